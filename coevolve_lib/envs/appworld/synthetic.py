"""A small synthetic AppWorld world, built at test time by AppWorld's own code, cached by the builder's version.

AppWorld's task data downloads only from AWS S3, so offline the kit's AppWorld path (server, client, env, metrics) is
tested on a world that `envs/appworld/world_builder.py` builds inside AppWorld's venv: api_docs, 8 households (a
supervisor and their Simple Note notes: Ada's by hand, 7 drawn from a fixed seed) as the tasks' start states, two
scenarios (`synnote`: create a note; `synask`: answer a question) with AppWorld-format ground truth, and splits `train`
(7 tasks in 5 households), `dev` (6 tasks in the 3 other households) and `synthetic` (all 13). Nothing AppWorld
generates is committed: the world goes to `<cache>/appworld_synthetic/<builder version>/` (about 50 MB; its build time:
docs/appworld.md), and a changed builder gets a new folder. Each task's known correct solution is in `solutions.json`
beside `data/`, outside AppWorld's data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.paths import CACHE_DIR
from coevolve_lib.envs.appworld.server import APPWORLD_VENV, appworld_python

BUILDER = Path(__file__).with_name("world_builder.py")
WORLD_MARKER = "world.json"
"""The file a complete build writes last, beside `data/`: the synthetic world's marker."""
SYNTHETIC_BENCHMARK = "appworld-synthetic"
"""How an evaluation set on the synthetic world is named (`appworld-synthetic/dev`): never as an official split."""
SYNTHETIC_SPLIT = "synthetic"
"""The split holding every synthetic task (`train` and `dev` split them 7 / 6)."""


def builder_version() -> str:
    """The builder script's content hash: the cache key of the world it builds."""
    return hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:12]


def synthetic_identity() -> dict:
    """What decides the tasks a synthetic world holds (the same world on every machine): part of the records and
    recipes of what is built on it."""
    return {"data": "synthetic world", "builder_version": builder_version()}


@dataclass(frozen=True)
class SyntheticWorld:
    root: Path
    """The data root (contains `data/`): what `AppWorldServerConfig.root` and APPWORLD_ROOT take."""
    splits: dict[str, list[str]]
    """Task ids per split, as in `data/datasets/<split>.txt`."""
    solutions: dict[str, str]
    """Each task's known correct solution code (Python calling `apis.*`), for tests."""
    start_states: dict[str, str]
    """Each task's household (its start state, but for the supervisor's active-task record): tasks of one household
    are one environment to explore."""


def build_synthetic_world(cache_dir: Path | None = None, venv: Path = APPWORLD_VENV,
                          timeout_s: float = 600) -> SyntheticWorld:
    """The synthetic world under `<cache_dir>/<builder version>/`, built there first if it is not yet (in a side
    folder renamed into place when complete, so a killed build is never taken for a world)."""
    root = Path(cache_dir or CACHE_DIR / "appworld_synthetic") / builder_version()
    if not (root / WORLD_MARKER).exists():
        partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        env = {**os.environ, "APPWORLD_CACHE": str(Path(venv).resolve() / "appworld-cache")}
        # -I: the script's folder (which holds the kit's `appworld.py`) and PYTHONPATH stay off AppWorld's sys.path.
        result = subprocess.run([str(appworld_python(venv)), "-I", str(BUILDER), str(partial)], env=env, cwd=partial,
                                capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"building the synthetic AppWorld world failed (status {result.returncode}):\n"
                               f"{result.stderr[-3000:]}")
        try:
            partial.rename(root)
        except OSError:  # another process finished the same build first
            shutil.rmtree(partial, ignore_errors=True)
    world = json.loads((root / WORLD_MARKER).read_text())
    return SyntheticWorld(root=root, splits=world["splits"],
                          solutions=json.loads((root / "solutions.json").read_text()),
                          start_states=world["start_states"])


def synthetic_start_states(root: Path) -> dict[str, str] | None:
    """Each task's start state (household) when `root` is the synthetic world; None for other data (AppWorld's
    official tasks: each task is its own start state)."""
    marker = Path(root) / WORLD_MARKER
    return json.loads(marker.read_text())["start_states"] if marker.exists() else None
