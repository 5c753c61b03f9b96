"""The environment seam: what the method needs of a benchmark, and the registry that names the benchmarks.

The data engine, the feedback round, the rollout loop, evaluation, training and the studies know an environment only
through `Environment`; this registry is the one place that names a concrete one. A new environment is one package
(`coevolve_lib/envs/<name>/`, or any importable module) whose class implements `Environment`, one `register` line
(or one `ENVIRONMENTS` entry here), and a profile whose `evaluation.benchmark` names it (docs/architecture.md).

Entries are `"module:Class"` strings, imported on first use, as Gymnasium's `entry_point`s are: a run on BFCL never
imports AppWorld's client, and the layers under the environments import none of them.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass
class RoundSteps:
    """How one environment runs a feedback round's stages (`engine.feedback.feedback_round`)."""

    explore: Callable
    """`(target, explore_config, model) -> (context, triplets, cost)`: re-explore from a target (R runs x S steps)."""
    abstract: Callable
    """`(group_key, triplets, source, synthesis_config, model) -> (specs, cost)`: triplets into task specs."""
    validate: Callable
    """`(spec, synthesis_config, model, known_task_ids) -> verdict`: execute a spec in a fresh environment."""
    prepare_validation: Callable[[list[dict]], None] | None = None
    """Called once with the specs still to validate before the first of them is (e.g. to write them all in one
    batch); None: nothing to prepare."""


class Environment(ABC):
    """One benchmark behind the method, for one run folder. Made by `make_environment(name, config, run_dir)`; the data
    engine owns it and calls `close()` when it is done.

    What differs per environment lives here: where tasks come from (`sources`, `target`), how a round explores,
    abstracts and validates (`round_steps`, `tool_docs`, `is_error`), how its tasks are rolled out (`rollout_tasks`,
    `new_episode`), the benchmark's own metric (`evaluate`), and the optional parts (held-out sets, a warm start, the
    profile checks)."""

    name: ClassVar[str]
    """The registry name (`evaluation.benchmark`)."""

    def __init__(self, config, run_dir: str | Path):
        self.config = config
        """The run's `DataEngineConfig`."""
        self.run_dir = Path(run_dir)

    # -- where tasks come from ---------------------------------------------------------------------------------
    @abstractmethod
    def sources(self, part: str) -> list:
        """The benchmark environments (start states) of `part`: `pool` (what D_0 and the rounds explore) or
        `unseen` (environments nothing trains on or explores, for the held-out set `new_envs`; [] if none)."""

    @abstractmethod
    def target(self, source, signal: dict | None = None, trajectory: dict | None = None):
        """The `engine.contexts.ExplorationTarget` of one source: unguided (D_0, held-out sets), or with the signal
        and trajectory that chose it."""

    # -- how a round runs --------------------------------------------------------------------------------------
    @abstractmethod
    def round_steps(self) -> RoundSteps:
        """The environment's explore / abstract / validate."""

    @abstractmethod
    def tool_docs(self, target) -> list[dict]:
        """The function docs (`name`, `description`, `parameters`) a target's environment offers."""

    @abstractmethod
    def is_error(self, observation: str) -> bool:
        """Whether an observation reports a failed call."""

    # -- rollouts ----------------------------------------------------------------------------------------------
    @abstractmethod
    def rollout_tasks(self, pool_tasks: list[dict]) -> list:
        """Pool tasks (task/v1 records) as `new_episode` takes them."""

    @abstractmethod
    def new_episode(self, task, sample_index: int, tool_format: str, config):
        """One live episode of `task` (a `rollout.agent.Conversation` with `feed` and `record`) for
        `rollout.agent.run_rollouts`."""

    # -- the benchmark's metric --------------------------------------------------------------------------------
    @abstractmethod
    def evaluate(self, model, settings, out: str | Path, rollout, experiment: str, progress: bool = False) -> dict:
        """Evaluate `model` on the benchmark split of `settings` (an `EvalConfig`) with the `rollout` config; write
        and return the results document (`core.results`). Its first metric row is the headline (`eval/val_success`
        in training); later rows are logged as `eval/val_<metric>`."""

    # -- optional parts ----------------------------------------------------------------------------------------
    def heldout_identity(self) -> dict:
        """What, besides the exploration settings, decides which tasks a held-out set holds (part of its key)."""
        return {"benchmark": self.name}

    def warm_start(self, base: str, progress: bool = True, use_shipped: bool = True) -> str:
        """The policy's starting weights when the profile asks for a warm start (`check` refuses it where the
        environment has none)."""
        raise NotImplementedError(f"{self.name} has no warm start")

    def describe(self) -> dict:
        """What the run's environment is, for its records."""
        return {"benchmark": self.name}

    def close(self) -> None:
        """Stop what the environment started (servers)."""

    @classmethod
    def check(cls, run) -> list[str]:
        """What a `RunConfig` asks that this environment cannot do, one line each ([]: nothing). The base refuses a
        warm start where `warm_start` is not implemented."""
        if run.data_engine.warm_start.enabled and cls.warm_start is Environment.warm_start:
            return [f"data_engine.warm_start.enabled=false ({cls.name} has no warm start)"]
        return []

    @classmethod
    def normalized(cls, run):
        """`run` with this environment's spellings made canonical (BFCL: `base` -> `multi_turn_base`), so that equal
        settings hash alike; called after `check` passed."""
        return run

    @classmethod
    def plan(cls, run) -> tuple[dict, list[str]]:
        """What a dry run (`train --dry-run`) says of the benchmark a `RunConfig` evaluates on, and notes for it."""
        return {"name": cls.name, "split": run.evaluation.split}, []


ENVIRONMENTS: dict[str, str | type[Environment]] = {
    "bfcl": "coevolve_lib.envs.bfcl.environment:BFCLEnvironment",
    "appworld": "coevolve_lib.envs.appworld.environment:AppWorldEnvironment",
}
"""Registry name -> the environment class, or its `"module:Class"` entry point."""


def register(name: str, environment: str | type[Environment]) -> None:
    """Make `name` a benchmark a profile can name (`evaluation.benchmark`)."""
    ENVIRONMENTS[name] = environment


def environment_class(name: str) -> type[Environment]:
    """The class registered as `name` (its module imported on first use)."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"unknown benchmark {name!r}; registered: {sorted(ENVIRONMENTS)}")
    entry = ENVIRONMENTS[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = ENVIRONMENTS[name] = getattr(importlib.import_module(module), attribute)
    return entry


def make_environment(name: str, config, run_dir: str | Path, **options) -> Environment:
    """The environment `name` for one run folder; `options` go to its class (e.g. AppWorld's `source_root`)."""
    return environment_class(name)(config, run_dir, **options)
