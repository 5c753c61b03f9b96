"""What every pool update shares: the registry, what a round reads (`RoundInputs`), the `PoolUpdate` contract, and
the round folder and report every round writes.

So that the tables compare like with like, every variant keeps the same D_0, policy, GRPO steps, tasks per step, K
rollouts per task and reward; it has a round every F steps where CoEvolve has its feedback round, reading only what
the loop already recorded (the steps' rollouts), never extra rollouts; at most `data_engine.max_targets` source
trajectories per round; new tasks only through the environment's validation by execution (`RoundStages.validate`, the
same duplicate check) into the append-only pool as version t, used from the step after the round. Each round writes
`round_NNN/report.json` (plus its own files) and its counts reach metrics.jsonl (`feedback/*`) and summary.json
(`rounds`).

Model output (reflections, trajectories) is data only: it is put into prompts and queries, parsed by `safe_calls`
during validation, and never evaluated or executed as Python.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from coevolve_lib.core.config import BaselinesConfig
from coevolve_lib.core.extensions import check_class, find
from coevolve_lib.core.models import ChatModel
from coevolve_lib.engine.data_engine import DataEngine


def _round_dir(run_dir: Path, round_index: int) -> Path:
    return Path(run_dir) / f"round_{round_index:03d}"


def _report(round_index: int, pool, **fields) -> dict:
    """A round report with the keys every round has (training/loop.py reads them), plus the baseline's own."""
    base = {"round": round_index, "targets": 0, "signal_types": {}, "specs": 0, "accepted": 0,
            "rejection_reasons": {}, "added_to_pool": sum(t["pool_version"] == round_index for t in pool.tasks),
            "pool_size": len(pool), "pool_version": pool.version}
    report = {**base, **fields}
    return {**report, "heldout_leaks": report["rejection_reasons"].get("heldout_leak", 0)}


@dataclass
class RoundInputs:
    """What a pool update reads at the end of a feedback period (only what the loop already recorded)."""

    data_engine: DataEngine
    """The run's data engine (its pool, environment, round stages)."""
    round_index: int
    step: int
    max_steps: int
    signals: list[dict]
    """The period's signal records."""
    rollouts: list[dict]
    """The period's GRPO rollouts."""
    history: Callable[[], list[dict]]
    """Every GRPO rollout recorded so far (read on demand: only the curriculum needs it)."""
    settings: BaselinesConfig
    reflector: Callable[[], ChatModel | None]
    """Who writes reflections (made on demand: only Reflexion needs one)."""
    seed: int
    """The training seed."""
    tasks_per_step: int
    progress: bool = True

    @property
    def engine(self) -> DataEngine:
        """`data_engine`, by its name before the rename, for pool updates written then (deprecated alias: removed in
        the next release)."""
        warnings.warn("RoundInputs.engine is deprecated: read RoundInputs.data_engine", DeprecationWarning,
                      stacklevel=2)
        return self.data_engine


class PoolUpdate(ABC):
    """What `training.pool_updates` names: what happens to the pool every F steps. A new one is one subclass and one
    `@register_pool_update` in the kit, or in a package of your own, found as an entry point of the
    `coevolve_lib.pool_updates` group or a `module:Class` reference in the profile (`pool_update`)."""

    name: ClassVar[str]
    has_rounds: ClassVar[bool] = True
    """False: nothing happens every F steps (the static pool)."""
    sharded: ClassVar[bool] = False
    """True: every process of a multi-process run calls `round` and does its share of the round's exploration,
    abstraction and validation (`engine.shards.Shards`, the data engine's `shards`); False: the main process runs the
    round alone while the others wait."""

    def start(self, engine: DataEngine, settings: BaselinesConfig, max_steps: int, tasks_per_step: int) -> None:
        """Before the first GRPO step (D_0 built)."""

    @abstractmethod
    def round(self, inputs: RoundInputs) -> dict:
        """Run (or resume) one round; its report (the feedback round's fields: targets, specs, added_to_pool, ...)."""

    def admitted(self, run_dir: Path, round_index: int) -> list[str] | None:
        """The task ids GRPO may draw after `round_index` (None: the whole pool)."""
        return None


POOL_UPDATES: dict[str, PoolUpdate] = {}
"""Pool update name -> the update (`training.pool_updates`)."""


def register_pool_update(cls: type[PoolUpdate]) -> type[PoolUpdate]:
    POOL_UPDATES[cls.name] = cls()
    return cls


def pool_update(name: str) -> PoolUpdate:
    """The pool update `name` gives (`core.extensions.find`: a registered one, an installed entry point of the
    `coevolve_lib.pool_updates` group, or a `module:Class` reference), kept under `name`. A ValueError in one line
    otherwise."""
    found = find("pool_updates", name, POOL_UPDATES, "pool update")
    if not isinstance(found, PoolUpdate):
        found = POOL_UPDATES[name] = check_class(found, PoolUpdate, name, "pool update")()
    return found
