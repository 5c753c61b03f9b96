"""Profiles: `configs/<name>.yaml` read into the validated sections of `config.py`, with overrides.

- A profile is a name of `configs/` (`tiny`) or the path of a `.yaml` file anywhere (`--profile ../my_env/loans.yaml`:
  an outside environment's own profile). Either may start with `inherits: <base>` (a name of `configs/`, e.g. `tiny`
  or `_paper`, or a path relative to the inheriting file): it then states only what differs, merged mapping by mapping
  over the base. Files of configs/ whose name starts with `_` are bases, not profiles.
- Overrides come as `section.field=value` strings (the CLI's `--set`, a notebook's `overrides`) or as a nested mapping;
  a value is read as YAML (`[a, b]` is a list; `core.user_yaml`) and then validated by the field's type (`2e-4` is a
  float).
- `$COEVOLVE_SCALE` (e.g. `smoke`, set by `make test`) merges `configs/scales/<scale>.yaml` on top (`at_scale`).
- Every user error is a `ConfigError`: one line that names the field, what is wrong and what is valid. The CLI
  (`coevolve_lib.__main__`) prints it and exits with status 2; option errors do the same (`ArgumentParser`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import AfterValidator, TypeAdapter, ValidationError
from pydantic_core import ArgsKwargs

from coevolve_lib.core.config import (
    RENAMED_FIELDS,
    ConfigError,
    DataEngineConfig,
    EvalConfig,
    RolloutConfig,
    RunConfig,
    TrainConfig,
    quoted,
)
from coevolve_lib.core.environment import environment_class
from coevolve_lib.core.paths import REPO_ROOT, is_profile_path, shown_path
from coevolve_lib.core.user_yaml import load_yaml_file, parse_overrides
from coevolve_lib.engine.pool_updates import pool_update
from coevolve_lib.engine.signals import signal_class

CONFIGS_DIR = REPO_ROOT / "configs"
SECTIONS = ("model", "rollout", "environment", "evaluation", "data_engine", "training")
USAGE_ERROR = 2
"""Exit status of a command given bad input (argparse's own)."""


NOT_PROFILES = ("reproduce", "rehearsal")
"""YAML files of configs/ that are no profile (`reproduce.yaml`: the batch driver's per-profile parameters;
`rehearsal.yaml`: what a rehearsal puts over a paper profile)."""


def profile_names() -> list[str]:
    """The profiles in configs/ (bases, whose names start with `_`, and `NOT_PROFILES` excluded)."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml")
                  if not p.stem.startswith("_") and p.stem not in NOT_PROFILES)


def appworld_profile(profile: str, chosen: str | None = None) -> str:
    """The AppWorld profile notebooks 14-15 run for `profile`: `chosen` (their `appworld_profile` parameter) when
    given, else the profile's AppWorld counterpart by name, `<profile>-appworld`."""
    return chosen or f"{profile}-appworld"


def appworld_counterpart(profile: str) -> str | None:
    """The profile's AppWorld counterpart (`appworld_profile`) when configs/ has one, else None."""
    counterpart = appworld_profile(profile)
    return counterpart if counterpart in profile_names() else None


def deep_merge(base: dict, overrides: dict) -> dict:
    """A copy of `base` with `overrides` merged in, mapping by mapping (a list or value replaces the base's)."""
    out = dict(base)
    for key, value in overrides.items():
        both_mappings = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = deep_merge(out[key], value) if both_mappings else value
    return out


def _read(name: str, chain: tuple[str, ...] = (), folder: Path | None = None) -> dict:
    """The sections of profile `name` (a name of configs/, or a `.yaml` path: `profile_path`) merged over those it
    inherits. `folder`: where the profile that inherits `name` lives (a relative path inherits from beside it)."""
    path = profile_path(name, inherited=bool(chain), folder=folder)
    key = str(path.resolve())
    if key in chain:
        raise ConfigError(f"profile {shown_path(chain[0])} inherits from itself through "
                          f"{' -> '.join(shown_path(k) for k in (*chain, key))}")
    try:
        raw = load_yaml_file(path) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown_path(path)} is not valid YAML: {' '.join(str(exc).split())}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"profile {quoted(name)}: {shown_path(path)} cannot be read ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{shown_path(path)} must be a mapping of sections ({', '.join(SECTIONS)}), not a "
                          f"{type(raw).__name__}")
    base = raw.pop("inherits", None)
    unknown = sorted(map(str, set(raw) - set(SECTIONS)))
    if unknown:  # named here, where the file is known (an override's unknown section is refused in `_sections`)
        raise ConfigError(f"{shown_path(path)}: unknown section(s) {unknown}; valid: {list(SECTIONS)}")
    raw = renamed(raw, shown_path(path))
    return merge_over(_read(base, (*chain, key), path.parent), raw) if base else raw


def merge_over(base: dict, raw: dict) -> dict:
    """`raw` (a profile's sections, or overrides) merged over `base` (`deep_merge`); when `raw` names another
    environment than `base` does, without `base`'s `environment` section: another environment's settings are not the
    new one's."""
    named = _environment_name(raw)
    if named is not None and named != (_environment_name(base) or DEFAULT_ENVIRONMENT):
        base = {key: value for key, value in base.items() if key != "environment"}
    return deep_merge(base, raw)


def _environment_name(raw: dict) -> str | None:
    """The environment a profile file's sections name (None: it names none, and inherits or defaults it)."""
    evaluation = raw.get("evaluation")
    return evaluation.get("environment_name") if isinstance(evaluation, dict) else None


DEFAULT_ENVIRONMENT = EvalConfig.__dataclass_fields__["environment_name"].default


_NOTED: set[str] = set()


def renamed(raw: dict, where: str) -> dict:
    """`raw` (a profile's sections, or overrides) with each field given by its name before a rename under its name
    now (`config.RENAMED_FIELDS`), and a one-line notice on stderr naming `where`; both names at once: ConfigError."""
    out = dict(raw)
    for section, names in RENAMED_FIELDS.items():
        values = out.get(section)
        if not isinstance(values, dict):
            continue
        values = dict(values)
        for now, before in names.items():
            if before not in values:
                continue
            if now in values:
                raise ConfigError(f"{where}: {section}.{before} and {section}.{now} name one field (its name before "
                                  f"and now): give {section}.{now} only")
            note = f"note: {where}: {section}.{before} is {section}.{now} now; the old name is read until the next " \
                   f"release"
            if note not in _NOTED:  # once per process: a study reads its profile once per run
                _NOTED.add(note)
                print(note, file=sys.stderr)
            values[now] = values.pop(before)
        out[section] = values
    return out

def profile_path(name, inherited: bool = False, folder: Path | None = None) -> Path:
    """The file of profile `name`: `configs/<name>.yaml` for a name (a base, `_` first, only when `inherited`), or a
    `.yaml` path anywhere (relative to the working folder, or for an `inherits:` to `folder`, the inheriting file's).
    A ConfigError in one line when there is none."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"profile must be a profile name or a .yaml path, not {quoted(name)}; choose from "
                          f"{profile_names()}")
    if is_profile_path(name):
        path = Path(name).expanduser()
        if not path.is_absolute() and folder is not None:
            path = folder / path
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            raise ConfigError(f"profile {quoted(name)} is no .yaml file (a profile is a name of configs/, "
                              f"{profile_names()}, or the path of a .yaml file)")
        return path
    path = CONFIGS_DIR / f"{name}.yaml"
    if not path.exists() or name in NOT_PROFILES or (name.startswith("_") and not inherited):
        raise ConfigError(f"unknown profile {quoted(name)}; choose from {profile_names()} or give a .yaml path")
    return path


def capped(raw: dict, caps: dict) -> dict:
    """A copy of `raw` whose sizes are at most `caps`' (a scale's): the smaller of the two numbers, the cap where
    `raw` has none (unset or None: unbounded). So a scale only shrinks: a size the profile set to 0 (an AppWorld
    profile's held-out set) stays 0."""
    out = dict(raw)
    for key, cap in caps.items():
        value = out.get(key)
        if isinstance(cap, dict):
            out[key] = capped(value if isinstance(value, dict) else {}, cap)
        elif value is None:
            out[key] = cap
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = min(value, cap)
        # any other value stays, for the config to refuse in one line (`"abc"` steps)
    return out


def at_scale(raw: dict) -> dict:
    """`raw` with the sizes of `configs/scales/<scale>.yaml` as caps (`capped`) when $COEVOLVE_SCALE names a scale.
    `make test` sets COEVOLVE_SCALE=smoke, so the notebooks run under nbval in seconds to minutes: fewer steps, tasks
    and samples, never a different model or warm start. Its caps hold over a notebook's own overrides too.
    Multi-process profiles (the paper's GPU runs) stay as they are: they are only planned here, and their batch must
    divide over their processes."""
    scale = os.environ.get("COEVOLVE_SCALE")
    launch = (raw.get("training") or {}).get("launch") or {}
    if not scale or launch.get("num_processes", 1) > 1:
        return raw
    path = CONFIGS_DIR / "scales" / f"{scale}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in (CONFIGS_DIR / "scales").glob("*.yaml"))
        raise ConfigError(f"unknown COEVOLVE_SCALE {scale!r}; choose from {choices} or leave it unset")
    return capped(raw, yaml.safe_load(path.read_text()) or {})


def _valid_fields(cls, path: tuple) -> list[str]:
    """The field names of the (nested) config class at `path` inside `cls`."""
    for name in path:
        annotation = getattr(cls, "__pydantic_fields__", {}).get(name)
        if annotation is None:
            return []
        cls = annotation.annotation
    return sorted(getattr(cls, "__pydantic_fields__", {}))


MOVED_TO_ENVIRONMENT = ("evaluation.data_version", "evaluation.category", "data_engine.data_version",
                        "data_engine.classes", "data_engine.warm_start")
"""Fields an older profile has that BFCL's `environment` section holds now (named in the error)."""
MAX_SHOWN_PROBLEMS = 5
"""Most validation errors one ConfigError lists (a list of a million bad items has a million)."""


def _validation_message(exc: ValidationError, section: str, cls) -> str:
    """pydantic's errors as one line: `training.max_steps: Input should be a valid integer (got 'abc')`."""
    problems = []
    for error in exc.errors():
        where = section + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "unexpected_keyword_argument":
            message = f"unknown field; valid: {', '.join(_valid_fields(cls, error['loc'][:-1]))}"
            if where in MOVED_TO_ENVIRONMENT:
                message += f" (BFCL's {where} is environment.{where.split('.')[-1]} now: the benchmark's own section)"
        elif "input" in error and not isinstance(error["input"], (dict, ArgsKwargs)):  # a value, not a whole
            # section's fields (a cross-field check's)
            message += f" (got {quoted(error['input'])})"
        problems.append(f"{where}: {message}")
    shown = problems[:MAX_SHOWN_PROBLEMS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def checked(name: str, value, annotation):
    """`value` validated and converted as `annotation`, one of the config's types (e.g. `config.Seeds`): a value that
    is no profile field (a notebook parameter, a sweep file's seeds) checked as a field would be, with a ConfigError
    in one line naming `name` otherwise."""
    try:
        return TypeAdapter(annotation).validate_python(value)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc, name, None)) from None


def _build(section: str, cls, values):
    if not isinstance(values, dict):
        raise ConfigError(f"{section} must be a mapping of fields, not {quoted(values)}")
    try:
        return cls(**values)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc, section, cls)) from None
    except TypeError as exc:  # a non-string key
        raise ConfigError(f"{section}: {exc}") from None


def _other_environment(named: str, own: str) -> bool:
    """Whether `named` finds another environment class than `own` (a registry name and a `module:Class` reference
    may find the same one); False when it finds none, which `check_registered` refuses in one line."""
    if named == own:
        return False
    try:
        new = environment_class(named)
    except Exception:  # noqa: BLE001 - any import error of a reference: refused with its cause later
        return False
    try:
        return new is not environment_class(own)
    except Exception:  # noqa: BLE001
        return True


def _sections(profile: str, overrides: dict | list[str] | None) -> dict:
    base, overrides = _read(profile), _as_mapping(overrides)
    named, own = _environment_name(overrides), _environment_name(base) or DEFAULT_ENVIRONMENT
    if named is not None and base.get("environment") and "environment" not in overrides \
            and _other_environment(named, own):  # the profile's section would be dropped: say so, never silently
        raise ConfigError(f"evaluation.environment_name={named} replaces the profile's environment {own}, whose "
                          f"environment section ({', '.join(sorted(map(str, base['environment'])))}) is not "
                          f"{named}'s settings: give {named}'s with --set environment.<field>=<value>, or a profile "
                          f"of {named}")
    raw = merge_over(base, overrides)
    unknown = sorted(map(str, set(raw) - set(SECTIONS)))
    if unknown:
        raise ConfigError(f"unknown profile section(s) {unknown}; valid: {list(SECTIONS)}")
    for section in SECTIONS[1:]:  # before `at_scale` reads them (`--set training=1`)
        if not isinstance(raw.get(section) or {}, dict):
            raise ConfigError(f"{section} must be a mapping of fields, not {quoted(raw[section])}")
    raw = at_scale(raw)
    if not isinstance(raw.get("model"), str) or not raw["model"].strip():
        raise ConfigError(f"model must be a model name (tiny, a hub id, a local path or openai:<model>), not "
                          f"{quoted(raw.get('model'))}")
    return raw


def run_config(profile: str = "tiny", overrides: dict | list[str] | None = None) -> RunConfig:
    """The full, validated config of a profile with overrides (a nested mapping or `a.b=c` strings)."""
    raw = _sections(profile, overrides)
    rollout = _build("rollout", RolloutConfig, raw.get("rollout") or {})
    environment = raw.get("environment") or {}  # validated by the benchmark's own Settings (check_registered)
    common = {"model": raw["model"], "profile": profile, "rollout": rollout, "environment": environment}
    sections = {"evaluation": _build("evaluation", EvalConfig, {**common, **(raw.get("evaluation") or {})}),
                "data_engine": _build("data_engine", DataEngineConfig, {**common, **(raw.get("data_engine") or {})}),
                "training": _build("training", TrainConfig, raw.get("training") or {})}
    try:
        run = RunConfig(profile=profile, model=raw["model"], rollout=rollout, environment=environment, **sections)
    except ValidationError as exc:  # a check across sections (RunConfig.__post_init__)
        raise ConfigError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from None
    check_launch(run)
    return check_registered(run)


FSDP_LOCAL_ROLLOUTS = (
    "FSDP shards the policy, so every forward pass of a rollout is a collective, and episodes of different lengths "
    "on different processes would wait for each other for ever: with FSDP set training.use_vllm=true (vLLM generates; "
    "the policy only scores), or train with DeepSpeed ZeRO-3 (configs/accelerate/zero3_1x8.yaml), whose rollouts run "
    "on gathered weights")
"""Why FSDP with the kit's local rollout engines is refused (TRL gathers ZeRO-3's weights for generation, not
FSDP's); here for the profile's accelerate config, in `training.loop.train` for a launch that asks for FSDP itself."""


def check_launch(run: RunConfig) -> None:
    """What the profile's accelerate config file cannot do with it: FSDP without vLLM rollouts (a missing file is a
    note of the plan, not an error here)."""
    name = run.training.launch.accelerate_config
    path = REPO_ROOT / name if name else None
    if path is None or not path.is_file():
        return
    try:
        accelerate = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name} is not valid YAML: {' '.join(str(exc).split())}") from None
    if isinstance(accelerate, dict) and accelerate.get("distributed_type") == "FSDP" and not run.training.use_vllm:
        raise ConfigError(f"training.launch.accelerate_config={name}: {FSDP_LOCAL_ROLLOUTS}")


def check_registered(run: RunConfig) -> RunConfig:
    """What the registries decide (each name found as `core.extensions` says: the kit's registry, an installed entry
    point, or a `module:Class` reference): the signal types, the pool update and the benchmark exist, the reward is
    one of the benchmark's, the `environment` section is valid `Settings` of the benchmark, and its environment can do
    what the profile asks (`Environment.check`); ConfigError, one line, otherwise. Returns `run` with the section's
    defaults filled in (in every section that carries it), in the environment's canonical spellings
    (`Environment.normalized`)."""
    for name in run.data_engine.signals.enabled:
        _found("data_engine.signals.enabled", signal_class, name)
    _found("training.pool_updates", pool_update, run.training.pool_updates)
    environment = _found("evaluation.environment_name", environment_class, run.evaluation.environment_name)
    if run.training.reward not in environment.rewards:
        raise ConfigError(f"training.reward: {run.training.reward!r} is not a reward of {environment.name}; its "
                          f"rewards: {sorted(environment.rewards)}")
    run = run.with_environment(dataclasses.asdict(_build("environment", environment.Settings, run.environment)))
    problems = environment.check(run)
    if problems:
        raise ConfigError("; ".join(problems))
    return environment.normalized(run)


def _found(where: str, find, name: str):
    try:
        return find(name)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def eval_config(profile: str = "tiny", overrides: dict | list[str] | None = None, **fields) -> EvalConfig:
    """The evaluation config of a profile; `fields` override evaluation fields (None keeps the profile's)."""
    return _section_config("evaluation", profile, overrides, fields)


def data_engine_config(profile: str = "tiny", overrides: dict | list[str] | None = None, **fields) -> DataEngineConfig:
    """The data-engine config of a profile; `fields` override data_engine fields (None keeps the profile's; a
    section's value is a mapping of its fields, e.g. `explore={"runs": 5}`)."""
    return _section_config("data_engine", profile, overrides, fields)


def _section_config(section: str, profile: str, overrides, fields: dict):
    """One section of the validated run config, with `fields` (None values dropped) merged over `overrides`."""
    given = {key: value for key, value in fields.items() if value is not None}
    return getattr(run_config(profile, deep_merge(_as_mapping(overrides), {section: given})), section)


def _overrides(value):
    if value is not None and not isinstance(value, (dict, list, tuple)):
        raise ValueError("Input should be a mapping ({section: {field: value}}) or a list of section.field=value "
                         "strings")
    return value


Overrides = Annotated[object, AfterValidator(_overrides)]
"""Overrides as a caller gives them (a notebook's `overrides`): a nested mapping, a list of `section.field=value`
strings, or None."""


def _as_mapping(overrides: dict | list[str] | None) -> dict:
    overrides = checked("overrides", overrides, Overrides)
    mapping = parse_overrides(list(overrides)) if isinstance(overrides, (list, tuple)) else dict(overrides or {})
    return renamed(mapping, "overrides")


# ------------------------------------------------------------------------------------------------ command line

class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage block) and exit status 2."""

    def __init__(self, prog: str, description: str | None = None):
        super().__init__(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)

    def error(self, message: str):
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def profile_parser(prog: str, description: str | None, example: str) -> ArgumentParser:
    """An argument parser with the options every profile-driven command shares: --profile and --set (`example`: a
    typical override for the help text)."""
    parser = ArgumentParser(prog, description)
    parser.add_argument("--profile", default="tiny",
                        help="a profile of configs/ or the path of a .yaml profile file (default: tiny)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help=f"override a profile value, e.g. --set {example} (repeatable)")
    return parser


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """The run config of parsed --profile/--set options (a ConfigError when they are invalid)."""
    return run_config(args.profile, args.set)

