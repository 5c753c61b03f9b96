"""AppWorld's rewards beyond the paper's binary one (`Environment.rewards`, named by `training.reward`): the analogues
of BFCL's `prefix` and `format` rewards (`envs.bfcl.rewards`), both kit additions. An AppWorld rollout records, per
step, the reply's code and output and the APIs the code names (`calls`, read as text: never run by the kit), not call
strings with their arguments, so both read those."""

from __future__ import annotations

from coevolve_lib.envs.appworld.calls import is_failed_output, parse_appworld_call
from coevolve_lib.envs.appworld.explore import allowed_api


def prefix_reward(record: dict, task: dict) -> float:
    """1 for a successful episode; else the longest start of the pool task's reference APIs that the episode's code
    named in that order (other APIs in between allowed), over one more than the larger of the reference's length and
    the APIs named (extra calls cost as missing ones do). Names of APIs a task never holds (login, passwords,
    `complete_task`: the login preamble's and the ending's) are left out; arguments are not compared."""
    if record["success"]:
        return 1.0
    wanted = [parse_appworld_call(action).name for action in task["reference_actions"]]
    named = [name for step in record["steps"] for name in step["calls"] if allowed_api(name)]
    matched, position = 0, 0
    for name in wanted:
        try:
            position = named.index(name, position) + 1
        except ValueError:
            break
        matched += 1
    return matched / (max(len(wanted), len(named)) + 1)


def format_reward(record: dict, task: dict) -> float:
    """1 for a successful episode; else half the share of its model turns whose reply held a code block that AppWorld
    ran without failing: for a policy that never solves a task (a stand-in), so that GRPO's advantages are not all 0."""
    if record["success"]:
        return 1.0
    steps = record["steps"]
    ran = sum(step["code"] is not None and not is_failed_output(step["output"]) for step in steps)
    return 0.5 * ran / len(steps) if steps else 0.0
