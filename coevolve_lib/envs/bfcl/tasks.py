"""BFCL multi-turn tasks: the official data read as `BFCLTask`s (`load_tasks`), the kit's seeded train/val split, a
smaller world of chosen classes (`restrict_classes`), and the val split's queries as a reference set. The step API
that runs them is `envs.bfcl.benchmark`."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from coevolve_lib.envs.bfcl import backend as bfcl_backend


@dataclass
class BFCLTask:
    id: str
    category: str
    data_version: str
    turns: list[list[dict]]  # user messages per turn; miss_func hold-out turns are [] as in the data
    initial_config: dict
    involved_classes: list[str]
    ground_truth: list[list[str]] | None = None
    missed_functions: dict[int, list[str]] = field(default_factory=dict)  # turn -> names added at that turn

    @property
    def long_context(self) -> bool:
        # The official checker loads the classes with long_context=True exactly when the category says so.
        return "long_context" in self.category

    def tools_at_turn(self, turn: int) -> list[dict]:
        """Gorilla func docs offered at `turn`, in the official order: the involved classes' docs without the
        held-out ones, then each held-out group appended at the turn it becomes available."""
        docs = [doc for name in self.involved_classes for doc in bfcl_backend.func_docs(self.data_version, name)]
        held_out = {name for names in self.missed_functions.values() for name in names}
        by_name: dict[str, dict] = {}
        for doc in docs:
            by_name.setdefault(doc["name"], doc)
        tools = [doc for doc in docs if doc["name"] not in held_out]
        for added_at in sorted(self.missed_functions):
            if added_at <= turn:
                tools += [by_name[name] for name in self.missed_functions[added_at]]
        return copy.deepcopy(tools)


def docs_by_name(data_version: str, involved_classes: Sequence[str]) -> dict[str, tuple[str, dict]]:
    """Function name -> (class, func doc) of a task's classes; a later class wins a name clash, as in the executor."""
    return {doc["name"]: (name, doc) for name in involved_classes for doc in bfcl_backend.func_docs(data_version, name)}

def load_tasks(data_version: str = "v3", category: str = "multi_turn_base") -> list[BFCLTask]:
    category = bfcl_backend.normalize_category(category)
    entries, answers = bfcl_backend.read_entries(data_version, category)
    tasks = []
    for entry, answer in zip(entries, answers, strict=True):
        if entry["id"] != answer["id"]:
            raise ValueError(f"question {entry['id']} and answer {answer['id']} are out of order")
        tasks.append(BFCLTask(
            id=entry["id"],
            category=category,
            data_version=data_version,
            turns=copy.deepcopy(entry["question"]),
            initial_config=copy.deepcopy(entry["initial_config"]),
            involved_classes=list(entry["involved_classes"]),
            ground_truth=copy.deepcopy(answer["ground_truth"]),
            missed_functions={int(t): list(names) for t, names in (entry.get("missed_function") or {}).items()},
        ))
    return tasks


def split_tasks(tasks: list[BFCLTask], split: str, seed: int = 42, val_fraction: float = 0.5) -> list[BFCLTask]:
    """The train or val half (or all) of `tasks`.

    AgentEvolver used a seeded 50/50 split of multi_turn_base; the kit's split is its own: the numeric task
    indices (`multi_turn_base_17` -> 17) are shuffled with `random.Random(seed)` and the first
    `round(n * val_fraction)` form val, the rest train. The halves never overlap, the split is deterministic
    for a given seed, and because it depends only on the indices it is the same in v3 and v4 and across the
    four categories (long_context shares most questions with base, so this keeps val questions out of train).
    """
    if split not in ("train", "val", "all"):
        raise ValueError(f"unknown split {split!r}; choose train, val or all")
    if split == "all":
        return list(tasks)
    indices = sorted({_task_index(task.id) for task in tasks})
    random.Random(seed).shuffle(indices)
    val = set(indices[: round(len(indices) * val_fraction)])
    return [task for task in tasks if (_task_index(task.id) in val) == (split == "val")]


def restrict_classes(tasks: list[BFCLTask], classes: Sequence[str] | None) -> list[BFCLTask]:
    """A smaller world: each task's environment with only the given BFCL classes (their initial state kept, the
    other classes dropped); tasks that involve none of them are left out. The ground truth is dropped, since it may
    call the removed classes: the results are environments to explore (their queries stay, as context), not tasks
    to solve. None keeps every task as it is."""
    if classes is None:
        return list(tasks)
    unknown = sorted(set(classes) - set(bfcl_backend.CLASSES))
    if unknown:
        raise ValueError(f"unknown BFCL class(es) {unknown}; choose from {sorted(bfcl_backend.CLASSES)}")
    out = []
    for task in tasks:
        kept = [name for name in task.involved_classes if name in classes]
        if kept:
            out.append(BFCLTask(id=task.id, category=task.category, data_version=task.data_version,
                                turns=task.turns, involved_classes=kept,
                                initial_config={k: v for k, v in task.initial_config.items() if k in kept}))
    return out


def _task_index(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def reference_queries(data_version: str = "v3", category: str = "multi_turn_base", split_seed: int = 42) -> list[str]:
    """The benchmark's validation tasks as text (the reference set of the task-similarity study): each BFCL val-split
    task's first user turn."""
    tasks = split_tasks(load_tasks(data_version, category), "val", seed=split_seed)
    return [next(m["content"] for m in task.turns[0] if m["role"] == "user") for task in tasks]
