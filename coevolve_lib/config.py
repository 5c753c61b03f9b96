"""Profiles (`configs/<name>.yaml`) and the evaluation configuration they fill in.

A profile is a complete, documented parameter set; notebooks and the CLI start from one and override fields.
Unknown keys are errors that name the valid ones, so a mistyped papermill parameter never passes silently.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import yaml

from coevolve_lib.paths import REPO_ROOT

CONFIGS_DIR = REPO_ROOT / "configs"


@dataclass
class EvalConfig:
    """Zero-shot (or checkpoint) evaluation on BFCL multi-turn."""

    model: str = "tiny"
    """Chat model: `tiny`, `smollm2-135m`, a local path or hub id, or `openai:<model>` for an OpenAI-compatible endpoint."""
    profile: str = "tiny"
    """Profile the values came from (recorded in results)."""
    benchmark: str = "bfcl"
    """Benchmark; only BFCL multi-turn runs offline (AppWorld's task data cannot be downloaded here)."""
    data_version: str = "v3"
    """BFCL data version: `v3` (the paper's) or `v4`."""
    category: str = "multi_turn_base"
    """BFCL multi-turn category: base, miss_func, miss_param or long_context (with or without `multi_turn_`)."""
    split: str = "val"
    """`val` (the kit's evaluation split), `train`, or `all`; see envs.bfcl.split_tasks."""
    split_seed: int = 42
    """Seed of the train/val split (fixed so every run evaluates the same tasks)."""
    limit: int | None = None
    """Evaluate only the first `limit` tasks of the split (None = all)."""
    seed: int = 0
    """Seed of model sampling (irrelevant at temperature 0)."""
    temperature: float = 0.0
    """Sampling temperature; the paper evaluates at 0."""
    max_new_tokens: int = 512
    """Tokens per model reply."""
    tool_format: str = "auto"
    """`native`, `prompt` or `auto` (native when the chat template supports tools)."""
    tool_docs: str = "full"
    """`full` BFCL function docs or `compact` ones for small models."""
    max_steps_per_turn: int = 20
    """BFCL's per-turn step limit."""
    max_steps_per_episode: int = 30
    """The paper's per-episode interaction cap."""
    batch_size: int = 16
    """Episodes whose model calls are batched together."""
    base_url: str | None = None
    """OpenAI-compatible endpoint for `openai:` models (default: $OPENAI_BASE_URL)."""


def load_profile(name: str) -> dict:
    """The raw mapping of `configs/<name>.yaml`."""
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))
        raise ValueError(f"unknown profile {name!r}; choose from {choices}")
    return yaml.safe_load(path.read_text()) or {}


def build(config_class, values: dict):
    """Instantiate a config dataclass from a mapping, rejecting unknown keys with a clear message."""
    names = {f.name for f in fields(config_class)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {config_class.__name__} field(s) {unknown}; valid: {sorted(names)}")
    return config_class(**values)


def eval_config(profile: str = "tiny", **overrides) -> EvalConfig:
    """The evaluation config of a profile, with `overrides` (None values mean "keep the profile's")."""
    raw = load_profile(profile)
    values = {"model": raw.get("model"), "profile": profile, **raw.get("evaluation", {})}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return build(EvalConfig, {k: v for k, v in values.items() if v is not None})


def as_dict(config) -> dict:
    return dataclasses.asdict(config)
