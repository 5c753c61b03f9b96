"""BFCL's own settings: the profile's `environment` section when `evaluation.environment_name` is `bfcl`.

    environment:
      data_version: v3                # the paper's BFCL-V3
      category: multi_turn_base       # the val split evaluated (base, miss_func, miss_param, long_context)
      classes: [GorillaFileSystem]    # the world D_0, the rounds, the held-out sets and the warm start explore
      warm_start: {enabled: true, ...}

The data engine, the loop and evaluation never read these: the environment does (`BFCLEnvironment.settings`), and the
profile check validates them with the profile (`Environment.Settings`).
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass

from coevolve_lib.core.config import (
    STRICT,
    Fraction,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
    WarmStartConfig,
)


@dataclass(config=STRICT)
class WorldsStageConfig:
    """The warm start's second stage (a kit addition, tiny profile): the first stage's model trained further on tasks
    from procedurally generated GorillaFileSystem worlds (`envs.bfcl.worlds`, train-split seeds), so that it learns
    to copy names from the query in file systems it has never seen instead of recalling a few environments' names
    (it raises success on unseen environments: docs/log.md). The tasks are built as the first stage's are
    (schema exploration, abstraction, validation), with its `data_runs`, `data_calls_per_run` and call lengths."""

    count: NonNegativeInt = 0
    """Generated worlds the stage's tasks come from (~10 tasks per world); 0: no second stage."""
    first_world: NonNegativeInt = 0
    """Index of the first train-split world (`bfcl_worlds.world_seeds`)."""
    data_seed: Seed = 100
    """Exploration seed of the worlds' tasks (other environments than the first stage's, so the same default)."""
    max_steps: PositiveInt = 400
    """Optimizer steps of the stage; its cosine schedule ends exactly here."""
    batch_size: PositiveInt = 16
    """Conversations per step."""
    learning_rate: PositiveFloat = 1e-3
    """Peak learning rate (lower than the first stage's: the model is trained already)."""
    final_lr_ratio: Fraction = 0.1
    """The cosine decay ends at this fraction of the peak."""
    warmup_steps: NonNegativeInt = 20
    """Linear warm-up steps."""


@dataclass(config=STRICT)
class BFCLWarmStartConfig(WarmStartConfig):
    """BFCL's warm start: the shared schedule and data settings (`core.config.WarmStartConfig`), the share of
    environments it takes, and an optional second stage on generated worlds."""

    environment_share: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.5
    """Share of the train-split environments the warm start's tasks come from; D_0 and every round use only the
    others, so the RL pool, like the held-out set, is in environments the warm start never saw (a policy that has
    memorized an environment's names solves its tasks without reading the query)."""
    worlds: WorldsStageConfig = field(default_factory=WorldsStageConfig)
    """The optional second stage on generated worlds (off unless `worlds.count` > 0)."""


@dataclass(config=STRICT)
class BFCLSettings:
    """BFCL multi-turn: which data, which category is evaluated, which classes make the world, and the warm start."""

    data_version: Literal["v3", "v4"] = "v3"
    """BFCL data version, of the environments explored and of the split evaluated: `v3` (the paper's) or `v4`."""
    category: str = "multi_turn_base"
    """BFCL multi-turn category evaluated: base, miss_func, miss_param or long_context (with or without
    `multi_turn_`). D_0, the rounds and the held-out sets explore base environments."""
    classes: list[str] | None = None
    """BFCL classes of the profile's world (None: all eight). The training pool, the held-out sets and the warm
    start are built from benchmark environments restricted to these classes (`tasks.restrict_classes`); the
    BFCL val split is always evaluated as it is."""
    warm_start: BFCLWarmStartConfig = field(default_factory=BFCLWarmStartConfig)
    """Supervised fine-tuning before RL (a kit addition; the tiny profile's policy starts from it)."""
