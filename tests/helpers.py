"""Helpers shared by test modules (pytest puts this folder on sys.path)."""

import json

from coevolve_lib.envs.bfcl import grade
from coevolve_lib.pool import pool_task_to_bfcl
from coevolve_lib.profiles import deep_merge, parse_overrides, run_config


def checker_accepts(task: dict, steps: list[list[str]]) -> bool:
    """The BFCL checker's verdict on an agent's steps (each a list of call strings) on a pool task: the RL reward."""
    return grade(pool_task_to_bfcl(task), [[call for calls in steps for call in calls]])


def small_run(base: dict, tmp_path, name: str, **extra):
    """(run config, run folder): the tiny profile with the `base` overrides (nested sections) and `extra` ones
    (`section.field=value` names, JSON values) merged in."""
    overrides = parse_overrides([f"{k}={json.dumps(v)}" for k, v in extra.items()])
    return run_config("tiny", deep_merge(base, overrides)), tmp_path / name
