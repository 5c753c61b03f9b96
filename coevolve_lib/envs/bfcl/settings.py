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
class WarmStartConfig:
    """Supervised fine-tuning before RL, and the synthetic tasks it trains on."""

    enabled: bool = False
    """Run the warm start (tiny profile: on; paper profiles: off)."""
    max_steps: PositiveInt = 600
    """Optimizer steps; the cosine schedule ends exactly here."""
    batch_size: PositiveInt = 16
    """Conversations per step."""
    learning_rate: PositiveFloat = 3e-3
    """Peak learning rate (a random-init 2M-parameter model needs a large one)."""
    final_lr_ratio: Fraction = 0.1
    """The cosine decay ends at this fraction of the peak learning rate."""
    warmup_steps: NonNegativeInt = 30
    """Linear warm-up steps before the cosine decay."""
    adam_beta2: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.95
    """AdamW's second-moment decay (0.95 adapts faster than 0.999 in a short run)."""
    max_grad_norm: PositiveFloat = 1.0
    """Gradient clipping norm."""
    max_length: PositiveInt = 512
    """Tokens per conversation (longer ones are cut)."""
    seed: Seed = 0
    """Seed of the data order."""
    data_seeds: PositiveInt = 12
    """Unguided schema explorations of every source environment, one per seed (`first_data_seed` + i), each
    giving ~10 tasks per environment. More seeds: more distinct call sequences and argument values."""
    first_data_seed: Seed = 100
    """Seed of the first exploration (D_0 uses the profile's exploration seed; keep them apart)."""
    data_runs: PositiveInt = 10
    """Exploration runs R per environment and seed."""
    data_calls_per_run: PositiveInt = 5
    """Exploration calls S per run (short runs give short tasks)."""
    data_min_calls: PositiveInt = 1
    """Shortest reference of a warm-start task (1-call tasks teach the format; the RL pool keeps >= 3)."""
    data_max_calls: PositiveInt = 4
    """Longest reference of a warm-start task."""
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
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised fine-tuning before RL (a kit addition; the tiny profile's policy starts from it)."""
