"""The evolving task pool D_t: an append-only, versioned JSONL file of task/v1 records.

Round t of the loop commits its validated tasks with `add_round(tasks, t)`; round 0 is D_0. Training samples
batches from the whole pool (or from chosen versions) with `sample`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from pathlib import Path

from coevolve_lib.core.records import CorruptFileError, read_jsonl_numbered, write_json_atomic, write_jsonl_atomic


class TaskPool:
    """Append-only, versioned task pool (JSONL). Each line is a task/v1 record. Writes are atomic: the new file is
    written to a temp file in the same folder and renamed over the pool (a killed process leaves the old or the
    new pool, never a corrupt one). Tasks are never modified or removed once added.

    Committed rounds are the tasks' `pool_version`s plus a sidecar `<pool>.rounds.json` (written atomically after
    the pool) that also remembers rounds which added nothing. Rounds commit in increasing order: an index at or
    below `version` counts as committed, so a round replayed after a crash between the two writes adds nothing.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.rounds_path = self.path.with_name(self.path.name + ".rounds.json")
        self.tasks: list[dict] = []
        for number, task in read_jsonl_numbered(self.path, atomic=True):
            if not (isinstance(task.get("task_id"), str) and type(task.get("pool_version")) is int):
                raise CorruptFileError(f"{self.path}, line {number}: not a task/v1 record (a task_id string and a "
                                       "pool_version integer); the pool is written atomically, so this is corruption: "
                                       "repair or remove the line")
            self.tasks.append(task)
        rounds = set()
        if self.rounds_path.exists():
            try:
                rounds = set(json.loads(self.rounds_path.read_text(encoding="utf-8"))["rounds"])
            except (ValueError, KeyError, TypeError):
                rounds = set()  # unreadable sidecar: the tasks' versions still say which rounds added tasks
        self._rounds = rounds | {task["pool_version"] for task in self.tasks}
        self._ids = {task["task_id"] for task in self.tasks}

    @property
    def version(self) -> int:
        """Highest committed round (pool_version); -1 when nothing was committed."""
        return max(self._rounds, default=-1)

    @property
    def ids(self) -> set[str]:
        return set(self._ids)

    def __len__(self) -> int:
        return len(self.tasks)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._ids

    def add_round(self, tasks: list[dict], round_index: int) -> list[dict]:
        """Commit one round: tasks not already in the pool (or earlier in the batch) get pool_version=round_index
        and are written atomically. Returns the tasks added; [] when the round was already committed."""
        if round_index in self._rounds or round_index <= self.version:
            return []
        added, seen = [], set(self._ids)
        for task in tasks:
            if task["task_id"] in seen:
                continue
            seen.add(task["task_id"])
            added.append({**copy.deepcopy(task), "pool_version": round_index})
        if added:
            write_jsonl_atomic(self.path, self.tasks + added)
        write_json_atomic(self.rounds_path, {"rounds": sorted(self._rounds | {round_index})})
        self.tasks += added
        self._ids = seen
        self._rounds.add(round_index)
        return copy.deepcopy(added)

    def drop_rounds_from(self, round_index: int) -> None:
        """Forget the rounds from `round_index` on, their tasks included: the pool a run killed before it committed
        that round leaves (the rehearsal's kill, `training.rehearsal`)."""
        self.tasks = [task for task in self.tasks if task["pool_version"] < round_index]
        self._rounds = {version for version in self._rounds if version < round_index}
        self._ids = {task["task_id"] for task in self.tasks}
        write_jsonl_atomic(self.path, self.tasks)
        write_json_atomic(self.rounds_path, {"rounds": sorted(self._rounds)})

    def sample(self, n: int, seed: int, versions: set[int] | None = None, ids: set[str] | None = None) -> list[dict]:
        """`n` tasks drawn uniformly (from the given versions only, if any, and among `ids` only, if given): without
        replacement, or with replacement when n exceeds the candidates. The same seed gives the same draw."""
        candidates = [t for t in self.tasks if (versions is None or t["pool_version"] in versions)
                      and (ids is None or t["task_id"] in ids)]
        if not candidates or n <= 0:
            return []
        rng = random.Random(seed)
        drawn = rng.sample(candidates, n) if n <= len(candidates) else rng.choices(candidates, k=n)
        return copy.deepcopy(drawn)

    def history(self) -> list[dict]:
        """Per committed round: {pool_version, added, total} (total = pool size after that round)."""
        out, total = [], 0
        for version in sorted(self._rounds):
            added = sum(1 for t in self.tasks if t["pool_version"] == version)
            total += added
            out.append({"pool_version": version, "added": added, "total": total})
        return out


def content_keys(task: dict) -> set[str]:
    """What makes two tasks the same for the held-out sets (`coevolve_lib.engine.heldout`): the environment (initial
    state) with the action sequence, or the environment with the query (whitespace-normalised). A pool task sharing
    either key with a held-out task is a leak of the test set into training."""
    environment = json.dumps(task["initial_config"], sort_keys=True, ensure_ascii=False, default=str)

    def digest(*parts) -> str:
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False, default=str).encode()).hexdigest()[:20]

    return {"actions:" + digest(environment, list(task["reference_actions"])),
            "query:" + digest(environment, " ".join(str(task["query"]).split()))}
