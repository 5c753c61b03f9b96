"""Profiles (`configs/<name>.yaml`) and the evaluation configuration they fill in.

A profile is a complete, documented parameter set; notebooks and the CLI start from one and override fields.
Unknown keys are errors that name the valid ones, so a mistyped papermill parameter never passes silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass, field, fields

import yaml

from coevolve_lib.explore import ExploreConfig
from coevolve_lib.heldout import HeldoutConfig
from coevolve_lib.paths import REPO_ROOT
from coevolve_lib.signals import SignalConfig
from coevolve_lib.synthesize import SynthesisConfig
from coevolve_lib.train_config import LaunchConfig, LoraSettings, TrainConfig
from coevolve_lib.warmstart import WarmStartConfig

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
    """The raw mapping of `configs/<name>.yaml` (at the scale $COEVOLVE_SCALE asks for, see `at_scale`)."""
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))
        raise ValueError(f"unknown profile {name!r}; choose from {choices}")
    return at_scale(yaml.safe_load(path.read_text()) or {})


def at_scale(raw: dict) -> dict:
    """`raw` with `configs/scales/<scale>.yaml` merged on top when $COEVOLVE_SCALE names a scale. `make test` sets
    COEVOLVE_SCALE=smoke, so the notebooks run under nbval in seconds to minutes: fewer steps, tasks and samples,
    never a different model or warm start. Its values win over a notebook's own overrides. Multi-process profiles
    (the paper's GPU runs) stay as they are: they are only planned here, and their batch must divide over their
    processes."""
    scale = os.environ.get("COEVOLVE_SCALE")
    if not scale or raw.get("training", {}).get("launch", {}).get("num_processes", 1) > 1:
        return raw
    path = CONFIGS_DIR / "scales" / f"{scale}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in (CONFIGS_DIR / "scales").glob("*.yaml"))
        raise ValueError(f"unknown COEVOLVE_SCALE {scale!r}; choose from {choices} or leave it unset")
    return merge(raw, yaml.safe_load(path.read_text()) or {})


def build(config_class, values: dict):
    """Instantiate a config dataclass from a mapping, rejecting unknown keys with a clear message."""
    names = {f.name for f in fields(config_class)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {config_class.__name__} field(s) {unknown}; valid: {sorted(names)}")
    return config_class(**values)


def eval_config(profile: str = "tiny", raw: dict | None = None, **overrides) -> EvalConfig:
    """The evaluation config of a profile, with `overrides` (None values mean "keep the profile's");
    `raw`: an already loaded (and overridden) profile mapping instead of the file."""
    raw = load_profile(profile) if raw is None else raw
    values = {"model": raw.get("model"), "profile": profile, **(raw.get("evaluation") or {})}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return build(EvalConfig, {k: v for k, v in values.items() if v is not None})


def as_dict(config) -> dict:
    return dataclasses.asdict(config)


@dataclass
class ProbeConfig:
    """Rollouts that feed the signal extractor outside training (notebooks 03-05): the current policy samples K
    trajectories per pool task at the rollout temperature, for a few "steps" without parameter updates."""

    steps: int = 3
    """Probe steps (each one a batch of groups, as a training step would produce)."""
    tasks_per_step: int = 32
    """Pool tasks per step (the paper's batch is 32 tasks)."""
    samples_per_task: int = 4
    """K, the group size (the paper: 8)."""
    temperature: float = 0.9
    """Rollout temperature (the paper's Table 9)."""
    max_new_tokens: int = 64
    """Tokens per model reply."""
    tool_docs: str = "none"
    """Tool docs in the prompt: `full`, `compact`, or `none` (the tiny model learns the tools from data)."""
    max_steps_per_episode: int = 12
    """Interaction cap per episode."""
    batch_size: int = 32
    """Episodes batched per model call."""
    seed: int = 0
    """Seed of task sampling and generation."""


@dataclass
class DataEngineConfig:
    """The data engine of one profile: D_0, warm start, probe rollouts, signals, exploration, synthesis."""

    profile: str = "tiny"
    """Profile the values came from."""
    model: str = "tiny"
    """The policy (see EvalConfig.model)."""
    explorer_model: str | None = None
    """Chat model for `llm` contexts, exploration, abstraction and judging (e.g. `openai:qwen3-max`); None when
    every stage runs offline (heuristic context, schema explorer, deterministic abstraction)."""
    data_version: str = "v3"
    """BFCL data version whose environments are explored."""
    classes: list[str] | None = None
    """BFCL classes of the profile's world (None: all eight). The training pool, the held-out set and the warm
    start are built from benchmark environments restricted to these classes (`envs.bfcl.restrict_classes`); the
    BFCL val split is always evaluated as it is."""
    d0_size: int = 100
    """N, the initial synthetic task set size (the paper: 100)."""
    d0_source_split: str = "train"
    """Benchmark split whose initial states D_0 explores (never `val`: those are evaluation tasks)."""
    max_targets: int | None = 32
    """Signal trajectories re-explored per round."""
    signals: SignalConfig = field(default_factory=SignalConfig)
    explore: ExploreConfig = field(default_factory=ExploreConfig)
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)


_SECTIONS = {"signals": SignalConfig, "explore": ExploreConfig, "synthesis": SynthesisConfig,
             "warm_start": WarmStartConfig, "probe": ProbeConfig, "heldout": HeldoutConfig}


def data_engine_config(profile: str = "tiny", raw: dict | None = None, **overrides) -> DataEngineConfig:
    """The data-engine config of a profile (`model` and the `data_engine:` section of its YAML), with overrides;
    a section override is a mapping of its fields, e.g. `explore={"runs": 5}`."""
    raw = load_profile(profile) if raw is None else raw
    values = {"model": raw.get("model"), "profile": profile, **(raw.get("data_engine") or {})}
    for key, value in overrides.items():
        if value is None:
            continue
        if key in _SECTIONS and isinstance(value, dict):
            values[key] = {**(values.get(key) or {}), **value}
        else:
            values[key] = value
    for key, section in _SECTIONS.items():
        values[key] = build(section, values.get(key) or {})
    return build(DataEngineConfig, {k: v for k, v in values.items() if v is not None})


@dataclass
class RunConfig:
    """Everything one training run needs: the profile's model and its three sections."""

    profile: str
    """Profile name (configs/<profile>.yaml)."""
    model: str
    """The policy's starting model (see EvalConfig.model)."""
    evaluation: EvalConfig
    data_engine: DataEngineConfig
    training: TrainConfig


def parse_overrides(items: list[str]) -> dict:
    """`["training.max_steps=20", "data_engine.explore.runs=2"]` -> a nested mapping (values parsed as YAML)."""
    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form section.field=value")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _scalar(value)
    return out


def _scalar(text: str):
    """A YAML value, with numbers such as `2e-4` (a string to YAML 1.1) read as numbers."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def merge(base: dict, overrides: dict) -> dict:
    """A copy of `base` with `overrides` merged in, mapping by mapping."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = merge(out.get(key) or {}, value) if isinstance(value, dict) and key != "target_modules" else value
    return out


def run_config(profile: str = "tiny", overrides: dict | list[str] | None = None) -> RunConfig:
    """The full config of a training run: the profile, with overrides (a nested mapping or `a.b=c` strings).
    Unknown sections or fields raise a ValueError that lists the valid ones."""
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    raw = at_scale(merge(load_profile(profile), overrides or {}))
    unknown = sorted(set(raw) - {"model", "evaluation", "data_engine", "training"})
    if unknown:
        raise ValueError(f"unknown profile section(s) {unknown}; valid: data_engine, evaluation, model, training")
    training = dict(raw.get("training") or {})
    training["lora"] = build(LoraSettings, training.get("lora") or {})
    training["launch"] = build(LaunchConfig, training.get("launch") or {})
    return RunConfig(profile=profile, model=raw["model"], evaluation=eval_config(profile, raw=raw),
                     data_engine=data_engine_config(profile, raw=raw), training=build(TrainConfig, training))


def profile_parser(prog: str, description: str | None, example: str) -> argparse.ArgumentParser:
    """An argument parser with the options every profile-driven command shares: --profile and --set (`example`: a
    typical override for the help text)."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny", help="profile in configs/ (default: tiny)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help=f"override a profile value, e.g. --set {example} (repeatable)")
    return parser


def run_config_from_args(args: argparse.Namespace) -> RunConfig | None:
    """The run config of parsed --profile/--set options; None, after one line on stderr, when they are invalid."""
    try:
        return run_config(args.profile, args.set)
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
