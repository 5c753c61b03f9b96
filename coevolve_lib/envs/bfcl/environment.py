"""BFCL multi-turn behind the `Environment` seam: its task sources, its round stages, its episodes, its metric, its
held-out identity and its warm start.

    sources   BFCL tasks of the profile's `d0_source_split` (their start states), restricted to its classes; with a
              warm start, a disjoint share of them goes to the warm start (`warm_start.partition_environments`)
    a round   the schema or LLM explorer (`explore`), the deterministic or LLM abstraction (`abstraction`), validation
              by replay and BFCL's checker, with the optional judge (`validation`)
    episodes  `episode.Episode`: BFCL's inference protocol on the task's own `BFCLEnv`
    metric    multi-turn success on a split (`evaluate`)
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import DataEngineConfig, RolloutConfig, WarmStartConfig
from coevolve_lib.core.environment import Environment, RoundStages
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.warm_start import RECIPE_VERSION, cached_warm_start
from coevolve_lib.envs.bfcl.abstraction import abstract
from coevolve_lib.envs.bfcl.backend import CLASSES, normalize_category
from coevolve_lib.envs.bfcl.benchmark import is_error_observation
from coevolve_lib.envs.bfcl.episode import Episode, pool_task_to_bfcl
from coevolve_lib.envs.bfcl.evaluate import evaluate
from coevolve_lib.envs.bfcl.explore import explore
from coevolve_lib.envs.bfcl.rewards import format_reward, prefix_reward
from coevolve_lib.envs.bfcl.settings import BFCLSettings
from coevolve_lib.envs.bfcl.tasks import docs_by_name, load_tasks, restrict_classes, split_tasks
from coevolve_lib.envs.bfcl.tiny_model import TinyConfig
from coevolve_lib.envs.bfcl.validation import validate
from coevolve_lib.envs.bfcl.warm_start import (
    FORMAT_CLASSES,
    FORMAT_DATA,
    FORMAT_WARM_START,
    WORLDS_VERSION,
    partition_environments,
    standin_conversations,
    warm_start,
    worlds_stage,
)

log = logging.getLogger(__name__)

BFCL_SPLITS = ("val", "train", "all")
"""The splits `evaluation.split` may name (`tasks.split_tasks`)."""


class BFCLEnvironment(Environment):
    """BFCL multi-turn base, on the profile's data version and classes."""

    name = "bfcl"
    rewards = {**Environment.rewards, "prefix": prefix_reward, "format": format_reward}
    Settings = BFCLSettings

    def _split(self, split: str) -> list:
        bfcl = self.settings
        return restrict_classes(split_tasks(load_tasks(bfcl.data_version, "multi_turn_base"), split), bfcl.classes)

    def partition(self) -> dict[str, list]:
        """The source environments of the pool and of the warm start: with a warm start a disjoint share each,
        without one the pool has them all."""
        sources = self._split(self.config.d0_source_split)
        if not self.settings.warm_start.enabled:
            return {"pool": sources, "warm_start": []}
        warm, pool = partition_environments(sources, self.settings.warm_start.environment_share,
                                            self.settings.warm_start.seed)
        return {"pool": pool, "warm_start": warm}

    def sources(self, part: str) -> list:
        return self._split("val") if part == "unseen" else self.partition()[part]

    def target(self, source) -> ExplorationTarget:
        text = "\n".join(m["content"] for turn in source.turns for m in turn if m.get("role") == "user")
        return ExplorationTarget(source.id, self, source.data_version, source.initial_config,
                                 list(source.involved_classes), text)

    def round_stages(self) -> RoundStages:
        return RoundStages(explore=explore, abstract=abstract, validate=validate)

    def tool_docs(self, target) -> list[dict]:
        """Func docs of the involved classes; a later class wins a name clash, as in the env."""
        return [doc for _, doc in docs_by_name(target.data_version, target.involved_classes).values()]

    def is_error(self, observation: str) -> bool:
        return is_error_observation(observation)

    def rollout_tasks(self, pool_tasks: list[dict]) -> list:
        """One-turn BFCL tasks graded against their reference actions."""
        return [pool_task_to_bfcl(task) for task in pool_tasks]

    def new_episode(self, task, sample_index: int, tool_format: str, config) -> Episode:
        return Episode(task, sample_index, tool_format, config)

    def evaluate(self, model, evaluation, out, rollout, experiment: str, progress: bool = False) -> dict:
        return evaluate(evaluation, out, model=model, progress=progress, experiment=experiment, rollout=rollout)

    def heldout_identity(self) -> dict:
        return {"data_version": self.settings.data_version, "classes": self.settings.classes}

    def describe(self) -> dict:
        return {"benchmark": self.name, "data_version": self.settings.data_version}

    @classmethod
    def plan(cls, run) -> tuple[dict, list[str]]:
        bfcl = BFCLSettings(**run.environment)
        return {"name": cls.name, "data_version": bfcl.data_version, "category": bfcl.category,
                "split": run.evaluation.split, "classes": bfcl.classes, "warm_start": bfcl.warm_start.enabled}, []

    @classmethod
    def normalized(cls, run):
        return run.with_environment({**run.environment, "category": normalize_category(run.environment["category"])})

    @classmethod
    def check(cls, run) -> list[str]:
        bfcl = BFCLSettings(**run.environment)
        problems = []
        if run.evaluation.split not in BFCL_SPLITS:
            problems.append(f"evaluation.split: BFCL split {run.evaluation.split!r}: choose from {list(BFCL_SPLITS)}")
        try:
            normalize_category(bfcl.category)
        except ValueError as error:
            problems.append(f"environment.category: {error}")
        unknown = [name for name in bfcl.classes or [] if name not in CLASSES]
        if unknown:
            problems.append(f"environment.classes: unknown BFCL class(es) {unknown}; choose from {list(CLASSES)}")
        return problems

    # -- the warm start (a kit addition: the tiny profile's policy starts from it) ----------------------------
    def warm_start_recipe(self, stage: str = "final") -> dict:
        """Everything that decides the warm start's weights (its key names the cache folder and the shipped copy):
        of the first stage alone (`stage="first"`), or of the whole warm start (with its worlds stage, if any)."""
        cfg, bfcl = self.config, self.settings
        settings = {k: v for k, v in asdict(bfcl.warm_start).items() if k not in ("enabled", "worlds")}
        base = asdict(TinyConfig()) if cfg.model == "tiny" else None  # the kit builds `tiny` itself, from TinyConfig
        recipe = {"recipe_version": RECIPE_VERSION, "model": cfg.model, "tiny_config": base, "warm_start": settings,
                  "data_version": bfcl.data_version, "classes": bfcl.classes, "source_split": cfg.d0_source_split,
                  "query": {"abstraction": cfg.synthesis.abstraction,
                            "description_words": cfg.synthesis.description_words},
                  "tool_docs": cfg.rollout.tool_docs}
        if stage == "final" and bfcl.warm_start.worlds.count:
            recipe["worlds_stage"] = {"worlds_version": WORLDS_VERSION, **asdict(bfcl.warm_start.worlds)}
        return recipe

    def warm_start(self, base: str, progress: bool = True, use_shipped: bool = True) -> str | None:
        """None when `warm_start.enabled` is off; else the warm start's model folder: taken from
        `coevolve_lib/data/warm_start/<profile>` when that copy was built from the same recipe (its files' hashes are
        checked), else from `.cache/warm_start/<key>`, building it there first: the first stage on benchmark
        environments (the tiny recipe's build time: docs/log.md), then, if the profile has one, the worlds stage from
        it (minutes). A build cut short leaves only a `.partial` folder, started afresh next time."""
        cfg, warm = self.config, self.settings.warm_start
        if not warm.enabled:
            return None

        def first_stage(out: Path) -> dict:
            log.warning("building the %s warm start (no shipped copy matches its recipe): %d SFT steps, about %.0f min "
                        "on 2 CPU cores at the tiny model's measured 0.9 s/step", cfg.profile,
                        warm.max_steps, warm.max_steps * 0.9 / 60)
            return warm_start(base, self.sources("warm_start"), out, warm, cfg.synthesis, self,
                              tool_docs=cfg.rollout.tool_docs, progress=progress)

        def first() -> str:
            return cached_warm_start(cfg.profile, self.warm_start_recipe("first"), first_stage, use_shipped)

        if not warm.worlds.count:
            return first()
        # the first stage is needed (found or built) only when the whole warm start is neither shipped nor cached
        return cached_warm_start(cfg.profile, self.warm_start_recipe(), lambda out: worlds_stage(
            first(), out, warm, cfg.synthesis, self, self.settings.data_version, cfg.rollout.tool_docs, progress),
            use_shipped)

    @classmethod
    def format_warm_start(cls) -> tuple[WarmStartConfig, dict]:
        return FORMAT_WARM_START, FORMAT_DATA

    @classmethod
    def format_conversations(cls, work_dir: Path) -> list[dict]:
        config = DataEngineConfig(profile="standin", model="standin", environment={"classes": FORMAT_CLASSES},
                                  rollout=RolloutConfig(tool_docs=FORMAT_DATA["tool_docs"]))
        return standin_conversations(cls(config, work_dir))
