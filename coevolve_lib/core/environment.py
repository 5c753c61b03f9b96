"""The environment seam: what the method needs of a benchmark, and the registry that names the benchmarks.

The data engine, the feedback round, the rollout loop, evaluation, training and the studies know an environment only
through `Environment`; this registry is the one place that names a concrete one. A new environment is one package
(`coevolve_lib/envs/<name>/`, or any importable module, in a package of your own) whose class implements
`Environment`, and a profile whose `evaluation.environment_name` names it: an `ENVIRONMENTS` entry here, a `register`
call, an installed entry point of the `coevolve_lib.environments` group, or a `module:Class` reference
(`core.extensions`; the recipe: docs/architecture.md).

Entries are `"module:Class"` strings, imported on first use, as Gymnasium's `entry_point`s are: a run on BFCL never
imports AppWorld's client, and the layers under the environments import none of them.
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic.dataclasses import dataclass as settings_dataclass

from coevolve_lib.core.config import STRICT, RunError, WarmStartConfig
from coevolve_lib.core.extensions import check_class, find, load_reference, registered
from coevolve_lib.core.results import validate_result


@dataclass
class RoundStages:
    """How one environment runs a feedback round's stages (`engine.feedback.feedback_round`)."""

    explore: Callable
    """`(target, explore_config, model) -> (context, triplets, cost)`: re-explore from a target (R runs x S steps)."""
    abstract: Callable
    """`(group_key, triplets, source, synthesis_config, model) -> (specs, cost)`: triplets into task specs."""
    validate: Callable
    """`(spec, synthesis_config, model, known_task_ids) -> verdict`: execute a spec in a fresh environment."""
    prepare_validation: Callable[[list[dict], object], None] | None = None
    """`(specs, synthesis_config)`: called once with the specs still to judge before the first of them is, validated
    or not (e.g. to write them all in one batch); None: nothing to prepare."""
    accept_unvalidated: Callable | None = None
    """`(spec, synthesis_config, known_task_ids) -> verdict`: a spec's verdict in the "w/o validation" ablation
    (`synthesis.validate: false`); None: `engine.tasks.accept_unvalidated` (kept as abstracted, nothing run)."""
    replay: Callable | None = None
    """`(target, explore_config, model) -> (None, triplets, cost)`: ReST's stand-in for exploration, the triplets of
    the policy's own trajectory `target.trajectory` (AppWorld runs its code's calls again); None: the record's executed
    calls and observations as they are (`engine.pool_updates.rest.trajectory_triplets`)."""


RoundSteps = RoundStages  # deprecated alias: removed in the next release


class ContractError(RunError):
    """An environment handed over something the seam's contract does not allow (a rollout record without a field the
    loop reads, a source without an id, an evaluation without its counts): one line naming the environment, the
    method and the field (status 1 on the command line)."""


EVALUATION_ROW_FIELDS = ("n", "correct")
"""What every metric row of `Environment.evaluate`'s results document holds besides `core.results`' own fields: the
tasks measured and those solved (training logs `eval/val_<metric>_n`; the command line prints correct/n)."""


def checked_evaluation(environment: "Environment", doc) -> dict:
    """`doc`, the results document `environment.evaluate` returned, if it keeps the contract (a valid `results/v2`
    document, `core.results.validate_result`, whose rows have integer `EVALUATION_ROW_FIELDS`); a ContractError naming
    the environment and the field otherwise."""
    problems = validate_result(doc)
    if not problems:
        problems = [f"$.metrics[{index}].{name}: missing or not an integer" for index, row in enumerate(doc["metrics"])
                    for name in EVALUATION_ROW_FIELDS if type(row.get(name)) is not int]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ContractError(f"environment {environment.name}: evaluate() returned a results document that breaks the "
                            f"contract (core.environment.checked_evaluation): {problems[0]}{more}")
    return doc


@settings_dataclass(config=STRICT)
class NoSettings:
    """The settings of an environment that declares none: the profile's `environment` section must be empty."""


def binary_reward(record: dict, task: dict) -> float:
    """The paper's reward: the episode's score (1 when the environment's checker passes, else 0)."""
    return float(record["score"])


class Environment(ABC):
    """One benchmark behind the method, for one run folder. Made by `make_environment(name, config, run_dir)`; the data
    engine owns it and calls `close()` when it is done.

    What differs per environment lives here: where tasks come from (`sources`, `target`), how a round explores,
    abstracts and validates (`round_stages`, `tool_docs`, `is_error`), how its tasks are rolled out (`rollout_tasks`,
    `new_episode`), the benchmark's own metric (`evaluate`), and the optional parts (held-out sets, a warm start, the
    profile checks)."""

    name: ClassVar[str]
    """The registry name (`evaluation.environment_name`)."""
    rewards: ClassVar[dict[str, Callable[[dict, dict], float]]] = {"binary": binary_reward}
    """What `training.reward` may name: `(rollout record, pool task) -> reward` (BFCL adds `prefix`)."""
    Settings: ClassVar[type] = NoSettings
    """The environment's own settings, the profile's `environment` section: a pydantic dataclass with a docstring
    per field (as `core.config`'s sections), validated when the profile loads (`profiles.check_registered`); the
    loop, the data engine and evaluation never read them, the environment does (`self.settings`)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "round_steps" in vars(cls) and "round_stages" not in vars(cls):  # an environment written before the rename
            warnings.warn(f"{cls.__qualname__}.round_steps is deprecated: name it round_stages (round_steps is "
                          "removed in the next release)", DeprecationWarning, stacklevel=2)
            cls.round_stages = cls.round_steps

    def __init__(self, config, run_dir: str | Path):
        self.config = config
        """The run's `DataEngineConfig`."""
        self.settings = self.Settings(**config.environment)
        """The profile's `environment` section, as `Settings`."""
        self.run_dir = Path(run_dir)

    # -- where tasks come from ---------------------------------------------------------------------------------
    @abstractmethod
    def sources(self, part: str) -> list:
        """The benchmark environments (start states) of `part`: `pool` (what D_0 and the rounds explore) or
        `unseen` (environments nothing trains on or explores, for the held-out set `new_envs`; [] if none)."""

    @abstractmethod
    def target(self, source):
        """The unguided `engine.contexts.ExplorationTarget` of one source (D_0, held-out sets; a signal round's targets
        are made from pool tasks, `ExplorationTarget.from_pool_task`)."""

    # -- how a round runs --------------------------------------------------------------------------------------
    @abstractmethod
    def round_stages(self) -> RoundStages:
        """The environment's explore / abstract / validate (a subclass that still defines the old `round_steps`
        gets it as its `round_stages`, with a DeprecationWarning: `__init_subclass__`)."""

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
    def evaluate(self, model, evaluation, out: str | Path, rollout, experiment: str, progress: bool = False) -> dict:
        """Evaluate `model` on the benchmark split of `evaluation` (an `EvalConfig`) with the `rollout` config; write
        and return the results document (`core.results`). Its first metric row is the headline (`eval/val_success`
        in training); later rows are logged as `eval/val_<metric>`."""

    # -- optional parts ----------------------------------------------------------------------------------------
    def heldout_identity(self) -> dict:
        """What, besides the exploration settings, decides which tasks a held-out set holds (part of its key)."""
        return {"benchmark": self.name}

    def install_tasks(self, tasks: list[dict]) -> None:
        """Make pool tasks that another run folder built (a cached held-out set) runnable in this one. Nothing to do
        where a task is whole in its record (BFCL); AppWorld writes its task files into the run's data root."""

    def copy_tasks(self, tasks: list[dict], run_dir: Path) -> None:
        """Make pool tasks that the run folder `run_dir` built with this environment (a shared D_0) runnable in this
        one: by default as `install_tasks` does; AppWorld copies the task files that run wrote (writing is slower)."""
        self.install_tasks(tasks)

    def warm_start_recipe(self) -> dict | None:
        """Everything that decides the warm start's weights (`engine.warm_start.cached_warm_start` keys its cache and
        shipped copy by it); None: the environment has no warm start."""
        return None

    def warm_start(self, base: str, progress: bool = True, use_shipped: bool = True) -> str | None:
        """The policy's starting weights when the environment's settings ask for a warm start (a model folder); None
        when they do not (the base: no environment has one unless it says so)."""
        return None

    @classmethod
    def format_warm_start(cls) -> tuple[WarmStartConfig, dict] | None:
        """The format warm start of a paper backbone's stand-in for this environment (`engine.standins`: the
        backbone's architecture at tiny dims, random init, fine-tuned so that its replies take this environment's
        format): (its schedule and data settings, what else decides its data, for the stand-in's recipe); None: no
        stand-in is made for it."""
        return None

    @classmethod
    def format_conversations(cls, work_dir: Path) -> list[dict]:
        """That warm start's conversations ({"messages", "tools"}), their tasks built in an environment of this class
        in `work_dir` (and cached there)."""
        raise NotImplementedError(f"{cls.name} has no stand-in format warm start")

    def describe(self) -> dict:
        """What the run's environment is, for its records."""
        return {"benchmark": self.name}

    def close(self) -> None:
        """Stop what the environment started (servers)."""

    @classmethod
    def check(cls, run) -> list[str]:
        """What a `RunConfig` asks that this environment cannot do, one line each ([]: nothing); its `environment`
        section is valid `Settings` already (`cls.Settings(**run.environment)`)."""
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
    """Make `name` an environment a profile can name (`evaluation.environment_name`)."""
    ENVIRONMENTS[name] = environment


def environment_class(name: str) -> type[Environment]:
    """The class `name` gives (`core.extensions.find`: a registry entry, an installed entry point of the
    `coevolve_lib.environments` group, or a `module:Class` reference); its module imported on first use. A ValueError
    in one line when nothing gives it or it is no `Environment`."""
    entry = find("environments", name, ENVIRONMENTS, "environment")
    if isinstance(entry, str):
        entry = load_reference(entry, "environment")
    ENVIRONMENTS[name] = check_class(entry, Environment, name, "environment")
    return entry


def registered_environments() -> list[tuple[str, str]]:
    """(name, where from) of every benchmark a profile can name now."""
    return registered("environments", ENVIRONMENTS)


def make_environment(name: str, config, run_dir: str | Path, **options) -> Environment:
    """The environment `name` for one run folder; `options` go to its class (e.g. AppWorld's `source_root`)."""
    return environment_class(name)(config, run_dir, **options)
