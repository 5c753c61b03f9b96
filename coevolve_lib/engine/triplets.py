"""Exploration runs as (action, observation, run id) triplets (paper section 3.2, Figs. 9-10): the explorer
interface both explorers implement, the triplet/v1 record they write, and the grouping of triplets by source and run
that abstraction (Fig. 12) reads. Record layout: docs/records.md."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.core.cost import Cost

TRIPLET_SCHEMA = "triplet/v1"


def run_ids(target: ExplorationTarget, context: dict | None, runs: int) -> list[str]:
    prefix = context["context_id"] if context else f"unguided/{target.task_id}"
    return [f"{prefix}/run{k}" for k in range(runs)]


def triplet_record(target: ExplorationTarget, context: dict | None, run_id: str, step: int, action: str,
                   observation: str, valid: bool, explorer: str) -> dict:
    return {"schema": TRIPLET_SCHEMA, "run_id": run_id, "step": step, "action": action, "observation": observation,
            "valid": valid, "task_id": target.task_id,
            "signal_id": context["signal_id"] if context else None,
            "signal_type": context["signal_type"] if context else None, "explorer": explorer}


class Explorer(ABC):
    """Turns a target (and its context, None = unguided) into the triplets of R runs."""

    name: str

    def __init__(self):
        self.cost = Cost()
        """LLM usage and skips of every `explore` call so far."""

    @abstractmethod
    def explore(self, target: ExplorationTarget, context: dict | None, config: ExploreConfig) -> list[dict]:
        """triplet/v1 records of all R runs, run by run and step by step."""


def _run_order(triplet: dict) -> tuple:
    # "…/run10" after "…/run9": compare the digit runs of the run id as numbers, then the step.
    run = tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(triplet["run_id"])))
    return run, triplet["step"]


def group_triplets(triplets: list[dict]) -> dict[tuple, list[dict]]:
    """(task_id, signal_id) -> the group's triplets ordered by run (run10 after run9) and step.
    D_0 triplets have signal_id None, so unguided runs of a task form one group."""
    groups: dict[tuple, list[dict]] = {}
    for triplet in triplets:
        groups.setdefault((triplet["task_id"], triplet.get("signal_id")), []).append(triplet)
    return {key: sorted(group, key=_run_order) for key, group in groups.items()}


def split_runs(triplets: list[dict]) -> dict[str, list[dict]]:
    """run_id -> that run's triplets, runs and steps in order."""
    runs: dict[str, list[dict]] = {}
    for triplet in sorted(triplets, key=_run_order):
        runs.setdefault(triplet["run_id"], []).append(triplet)
    return runs
