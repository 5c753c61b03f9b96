"""Helpers shared by test modules (pytest puts this folder on sys.path)."""

from coevolve_lib.envs.bfcl import grade
from coevolve_lib.pool import pool_task_to_bfcl


def checker_accepts(task: dict, steps: list[list[str]]) -> bool:
    """The BFCL checker's verdict on an agent's steps (each a list of call strings) on a pool task: the RL reward."""
    return grade(pool_task_to_bfcl(task), [[call for calls in steps for call in calls]])
