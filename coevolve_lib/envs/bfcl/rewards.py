"""BFCL's rewards beyond the paper's binary one (`Environment.rewards`, named by `training.reward`)."""

from __future__ import annotations

from coevolve_lib.core.safe_calls import CallParseError, parse_call


def prefix_reward(record: dict, task: dict) -> float:
    """1 for a successful episode; else the pool task's reference calls the episode reproduced in order from the start,
    over one more than the larger of the reference and executed call counts (extra calls cost as much as missing ones,
    and a failed episode stays below 1 even when every call matched, e.g. without a final answer). A kit addition
    (`training.reward: prefix`): it reads calls in BFCL's call syntax."""
    if record["success"]:
        return 1.0
    reference_actions = task["reference_actions"]
    executed = [call for step in record["steps"] for call in step["calls"]]
    matched = 0
    for done, wanted in zip(executed, reference_actions):
        try:
            done_call, wanted_call = parse_call(done), parse_call(wanted)
        except CallParseError:
            break
        if (done_call.name, done_call.args, done_call.kwargs_dict) != \
                (wanted_call.name, wanted_call.args, wanted_call.kwargs_dict):
            break
        matched += 1
    return matched / (max(len(reference_actions), len(executed)) + 1)


def format_reward(record: dict, task: dict) -> float:
    """1 for a successful episode; else half the share of its model turns whose reply held tool calls that all parsed
    (none rejected). A kit addition (`training.reward: format`) for a policy that never solves a task: the paper
    profiles' CPU rehearsals (`configs/rehearsal.yaml`), whose random-init stand-ins earn 0 in every episode under the
    binary and the prefix rewards, so that GRPO's advantages, and its update, would be exactly 0."""
    if record["success"]:
        return 1.0
    steps = record["steps"]
    well_formed = sum(bool(step["calls"]) and not step["rejected"] for step in steps)
    return 0.5 * well_formed / len(steps) if steps else 0.0
