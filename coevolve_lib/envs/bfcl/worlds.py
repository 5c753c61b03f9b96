"""Procedurally generated GorillaFileSystem worlds: seeded random initial states of BFCL's file system, so that a small
policy meets thousands of environments instead of BFCL's 25 train-split ones (the tiny profile's warm start, a kit
addition; docs/deviations.md).

A world is a directory tree under one home folder (depth up to `max_depth`, 1..`max_entries` entries per folder, about
half of the worlds with one working folder under home, a few hidden files), its names made of words from BFCL's own
single-turn question text (`vocabulary`) in five naming styles (`notes`, `final_report`, `FinalReport`, `report2`,
`Final_report`), its files holding a short sentence of the same words. A world is a pure function of its seed:
`world_state(seed)` always builds the same tree.

Seeds come in two disjoint ranges, `WORLD_SPLITS`: `train` worlds for building training data, `val` worlds for
checking that a policy trained on them generalises to worlds it has not seen.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache

from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.tasks import BFCLTask

WORLD_SPLITS = {"train": range(1_000_000), "val": range(1_000_000, 2_000_000)}
"""Seed ranges of the world splits: a world's seed says which split it belongs to."""
NAMING_STYLES = ("word", "word_word", "CamelCase", "word+number", "Capital_word")
EXTENSIONS = ("txt", "md", "csv", "json", "log", "pdf", "py", "jpg")
CLASS_NAME = "GorillaFileSystem"


@dataclass(frozen=True)
class WorldShape:
    """What a generated world looks like (the defaults are the tiny warm start's)."""

    max_depth: int = 3
    """Deepest folder level below home (home is level 0)."""
    max_entries: int = 5
    """Most entries (files and folders) in one folder; each folder has at least one."""
    folder_share: float = 0.35
    """Chance that an entry above `max_depth` is a folder rather than a file."""
    working_folder_share: float = 0.5
    """Share of worlds whose home holds a single working folder with everything else inside it."""
    hidden_share: float = 0.04
    """Chance that a file name starts with a dot."""
    content_words: tuple[int, int] = (3, 12)
    """Fewest and most words in a file's content."""


@cache
def vocabulary(data_version: str = "v3", size: int = 1500) -> tuple[str, ...]:
    """The `size` most frequent 3-10-letter words (lower case) of BFCL's single-turn question files (every category
    whose file name holds no `multi_turn`), most frequent first, ties alphabetical: the words BFCL's users write,
    which the tiny model's tokenizer was trained on."""
    counts: Counter = Counter()
    for path in sorted(bfcl_backend.data_dir(data_version).glob(f"BFCL_{data_version}_*.json")):
        if "multi_turn" in path.name:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            for turn in json.loads(line).get("question", []):
                for message in turn if isinstance(turn, list) else [turn]:
                    if isinstance(message, dict) and message.get("role") == "user":
                        counts.update(w.lower() for w in re.findall(r"[A-Za-z]+", str(message["content"]))
                                      if 3 <= len(w) <= 10)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return tuple(word for word, _ in ranked[:size])


def _name(rng: random.Random, words: tuple[str, ...]) -> str:
    style = rng.choice(NAMING_STYLES)
    first, second = rng.choice(words), rng.choice(words)
    if style == "word":
        return first
    if style == "word_word":
        return f"{first}_{second}"
    if style == "CamelCase":
        return first.capitalize() + second.capitalize()
    if style == "word+number":
        return f"{first}{rng.randint(1, 9)}"
    return f"{first.capitalize()}_{second}"


def _sentence(rng: random.Random, words: tuple[str, ...], shape: WorldShape) -> str:
    text = " ".join(rng.choice(words) for _ in range(rng.randint(*shape.content_words)))
    return text[0].upper() + text[1:] + "."


def _folder(rng: random.Random, words: tuple[str, ...], shape: WorldShape, depth: int) -> dict:
    contents: dict = {}
    for _ in range(rng.randint(1, shape.max_entries)):
        if depth < shape.max_depth and rng.random() < shape.folder_share:
            name = _name(rng, words)
            node = {"type": "directory", "contents": _folder(rng, words, shape, depth + 1)}
        else:
            name = f"{_name(rng, words)}.{rng.choice(EXTENSIONS)}"
            if rng.random() < shape.hidden_share:
                name = "." + name
            node = {"type": "file", "content": _sentence(rng, words, shape)}
        contents.setdefault(name, node)  # a name drawn twice in one folder is one entry
    return contents


def world_state(seed: int, shape: WorldShape = WorldShape(), data_version: str = "v3") -> dict:
    """The initial configuration (BFCL's `initial_config`) of world `seed`: {"GorillaFileSystem": {"root": {home:
    {"type": "directory", "contents": ...}}}}."""
    words = vocabulary(data_version)
    rng = random.Random(f"bfcl-world/{seed}")
    home = rng.choice(words)
    if rng.random() < shape.working_folder_share:
        contents = {_name(rng, words): {"type": "directory", "contents": _folder(rng, words, shape, 2)}}
    else:
        contents = _folder(rng, words, shape, 1)
    return {CLASS_NAME: {"root": {home: {"type": "directory", "contents": contents}}}}


def world_seeds(split: str, count: int, offset: int = 0) -> range:
    """`count` seeds of `split`, from its `offset`-th on."""
    seeds = WORLD_SPLITS[split]
    if offset < 0 or count < 0 or offset + count > len(seeds):
        raise ValueError(f"worlds {offset}..{offset + count} are outside the {split} range of {len(seeds)} seeds")
    return seeds[offset:offset + count]


def world_tasks(split: str, count: int, offset: int = 0, shape: WorldShape = WorldShape(),
                data_version: str = "v3") -> list[BFCLTask]:
    """Worlds as exploration sources: one BFCLTask per world (id `world-<seed>`, its initial state, no query or
    ground truth), as the data engine's explorers take benchmark environments."""
    return [BFCLTask(id=f"world-{seed}", category="procedural_world", data_version=data_version, turns=[],
                     initial_config=world_state(seed, shape, data_version), involved_classes=[CLASS_NAME])
            for seed in world_seeds(split, count, offset)]
