"""Replay BFCL ground truth, and perturbed ground truth, through the kit's BFCLEnv and the official checker.

For every task and variant the model output is graded twice: by a `BFCLEnv` stepped the way an agent steps
it (one step per turn holding that turn's calls, `end_turn`, `score`) and by the release's own
`multi_turn_checker` on the same call strings. The variants are the ground truth itself and four
perturbations of the first turn that has ground-truth calls:
  drop_last   its last call removed
  wrong_arg   one argument value changed (first call in the task with a str/number/bool argument)
  extra_call  one state-changing call appended (from EXTRA_CALLS; skipped, and counted, when no involved
              class has one)
  empty_turn  no calls at all in that turn
The last stdout line is one JSON object:
  {"data_version": ..., "categories": {cat: {"tasks", "gt_passed", "perturbed", "perturbed_rejected",
   "skipped", "agreement", "agreement_total"}}}
where agreement counts (task, variant) cases on which the two verdicts agree, agreement_total is
tasks + perturbed, and perturbed_rejected counts perturbed cases the official checker fails.
Disagreements are listed on stderr.

    python -m coevolve_lib.envs.bfcl_replay --data-version v3 --category all [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

from tqdm import tqdm

from coevolve_lib.envs import bfcl_backend
from coevolve_lib.envs.bfcl import BFCLTask, grade, load_tasks
from coevolve_lib.envs.safe_calls import Call, parse_call

EXTRA_CALLS = {
    "GorillaFileSystem": "mkdir(dir_name='coevolve_extra_dir')",
    "MessageAPI": "add_contact(user_name='coevolve_extra_user')",
    "TicketAPI": "ticket_login(username='coevolve_extra_user', password='extra')",
    "TradingBot": "update_market_status(current_time_str='10:00 AM')",
    "TravelAPI": "authenticate_travel(client_id='extra', client_secret='extra', refresh_token='extra', "
                 "grant_type='read', user_first_name='Coevolve', user_last_name='Extra')",
    "VehicleControlAPI": "set_navigation(destination='1 Extra Street, Nowhere, ZZ')",
}
"""One call per class that changes its public state from (nearly) any state. MathAPI is stateless and
TwitterAPI changes state only after authentication, so they have none."""

_official_names = itertools.count()


def kit_verdict(task: BFCLTask, turns: list[list[str]]) -> bool:
    """Grade `turns` (the calls of each turn) with a BFCLEnv driven like an agent rollout."""
    return grade(task, turns)


def official_verdict(task: BFCLTask, turns: list[list[str]]) -> bool:
    """Grade `turns` with the release's `multi_turn_checker`, then free the instances it cached globally."""
    checker, utils = bfcl_backend.official_checker(task.data_version)
    entry = {"id": task.id, "initial_config": task.initial_config, "involved_classes": task.involved_classes}
    decoded = [[list(calls)] if calls else [] for calls in turns]
    # A unique model name per grading: the official executor keys its instance cache by model name and task.
    result = checker(decoded, task.ground_truth, entry, task.category, f"coevolve_replay_{next(_official_names)}")
    for key in [key for key in vars(utils) if key.endswith("_instance")]:
        del vars(utils)[key]
    return bool(result["valid"])


def variants(task: BFCLTask) -> dict[str, list[list[str]] | None]:
    """The ground truth and its perturbations (None: the perturbation does not apply to this task)."""
    gt = task.ground_truth
    turn = next((i for i, calls in enumerate(gt) if calls), None)
    if turn is None:
        return {"gt": gt, "drop_last": None, "wrong_arg": None, "extra_call": None, "empty_turn": None}
    extra = next((EXTRA_CALLS[name] for name in task.involved_classes if name in EXTRA_CALLS), None)
    return {
        "gt": gt,
        "drop_last": _replace_turn(gt, turn, gt[turn][:-1]),
        "wrong_arg": _wrong_arg(gt),
        "extra_call": _replace_turn(gt, turn, gt[turn] + [extra]) if extra else None,
        "empty_turn": _replace_turn(gt, turn, []),
    }


def _replace_turn(gt: list[list[str]], turn: int, calls: list[str]) -> list[list[str]]:
    return [calls if i == turn else list(turn_calls) for i, turn_calls in enumerate(gt)]


def _wrong_arg(gt: list[list[str]]) -> list[list[str]] | None:
    """Change the first str/number/bool argument of the first call (in task order) that has one."""
    for turn, calls in enumerate(gt):
        for index, text in enumerate(calls):
            call = parse_call(text)
            for position, value in enumerate(call.args):
                if _is_scalar(value):
                    args = call.args[:position] + (_changed(value),) + call.args[position + 1:]
                    return _replace_call(gt, turn, index, Call(call.name, args, call.kwargs))
            for position, (key, value) in enumerate(call.kwargs):
                if _is_scalar(value):
                    kwargs = call.kwargs[:position] + ((key, _changed(value)),) + call.kwargs[position + 1:]
                    return _replace_call(gt, turn, index, Call(call.name, call.args, kwargs))
    return None


def _is_scalar(value) -> bool:
    return type(value) in (str, int, float, bool)


def _changed(value):
    if type(value) is bool:
        return not value
    if type(value) is str:
        return value + "_x"
    return value + 7


def _replace_call(gt: list[list[str]], turn: int, index: int, call: Call) -> list[list[str]]:
    calls = list(gt[turn])
    calls[index] = call.to_source()
    return _replace_turn(gt, turn, calls)


def replay(version: str, categories: list[str], limit: int | None = None) -> dict:
    """Grade every task (and its perturbations) of `categories` with both graders; return the summary."""
    summary = {"data_version": version, "categories": {}}
    for category in categories:
        category = bfcl_backend.normalize_category(category)
        tasks = load_tasks(version, category)[:limit]
        counts = {"tasks": len(tasks), "gt_passed": 0, "perturbed": 0, "perturbed_rejected": 0, "skipped": 0,
                  "agreement": 0, "agreement_total": 0}
        for task in tqdm(tasks, desc=f"{version} {category}", file=sys.stderr):
            for name, turns in variants(task).items():
                if turns is None:
                    counts["skipped"] += 1
                    continue
                kit, official = kit_verdict(task, turns), official_verdict(task, turns)
                counts["perturbed"] += name != "gt"
                counts["perturbed_rejected"] += name != "gt" and not official
                counts["gt_passed"] += name == "gt" and kit
                counts["agreement"] += kit == official
                if kit != official:
                    print(f"DISAGREE {task.id} {name}: kit={kit} official={official}", file=sys.stderr)
        counts["agreement_total"] = counts["tasks"] + counts["perturbed"]
        summary["categories"][category] = counts
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bfcl-replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-version", choices=sorted(bfcl_backend.BFCL_RELEASES), default="v3")
    parser.add_argument("--category", choices=[*bfcl_backend.CATEGORY_ALIASES, "all"], default="all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks of each category")
    args = parser.parse_args(argv)
    categories = list(bfcl_backend.CATEGORIES) if args.category == "all" else [args.category]
    summary = replay(args.data_version, categories, args.limit)
    print(json.dumps(summary))
    perfect = all(c["gt_passed"] == c["tasks"] and c["agreement"] == c["agreement_total"]
                  for c in summary["categories"].values())
    return 0 if perfect else 1


if __name__ == "__main__":
    sys.exit(main())
