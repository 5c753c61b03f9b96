"""Replay BFCL ground truth, and perturbed ground truth, through the kit's BFCLEnv and the official checker
(`python -m coevolve_lib bfcl-replay`, coevolve_lib/cli/bfcl_replay.py).

For every task and variant the model output is graded twice: by a `BFCLEnv` stepped the way an agent steps
it (one step per turn holding that turn's calls, `end_turn`, `score`) and by the release's own
`multi_turn_checker` on the same call strings. The variants are the ground truth itself and four
perturbations of the first turn that has ground-truth calls:
  drop_last   its last call removed
  wrong_arg   one argument value changed (first call in the task with a str/number/bool argument)
  extra_call  one state-changing call appended (from EXTRA_CALLS; skipped, and counted, when no involved
              class has one)
  empty_turn  no calls at all in that turn
`replay` returns the summary
  {"data_version": ..., "categories": {cat: {"tasks", "gt_passed", "perturbed", "perturbed_rejected",
   "skipped", "agreement", "agreement_total"}}}
where agreement counts (task, variant) cases on which the two verdicts agree, agreement_total is
tasks + perturbed, and perturbed_rejected counts perturbed cases the official checker fails.
Disagreements are listed on stderr.

`mutated` builds the randomized trajectories of the checker differential (`benchmarks/bfcl_differential.py`,
and a small seeded sample in the tests): ground truth with calls dropped, duplicated, swapped, moved and
re-argued, calls the kit rejects (unknown functions, builtins, repeated keywords), and empty and split turns.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import random
import sys
import time

from tqdm import tqdm

from coevolve_lib.core.safe_calls import Call, CallParseError, parse_call
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv, grade
from coevolve_lib.envs.bfcl.tasks import BFCLTask, load_tasks

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
    """Grade `turns` (one step per turn) with the release's `multi_turn_checker`."""
    return official_steps_verdict(task, [[list(calls)] if calls else [] for calls in turns])


def kit_steps_verdict(task: BFCLTask, turns: list[list[list[str]]]) -> bool:
    """Grade `turns` ([turn][step][call]) with a BFCLEnv, one `execute` per step."""
    env = BFCLEnv(task)
    for steps in turns:
        for calls in steps:
            env.execute(calls)
        env.end_turn()
    verdict = env.score()["success"]
    env.close()
    return verdict


def official_steps_verdict(task: BFCLTask, turns: list[list[list[str]]]) -> bool:
    """Grade `turns` ([turn][step][call], no empty step, as BFCL's runner decodes them) with the release's
    `multi_turn_checker`, then free the instances it cached globally."""
    checker, utils = bfcl_backend.official_checker(task.data_version)
    entry = {"id": task.id, "initial_config": task.initial_config, "involved_classes": task.involved_classes}
    # A unique model name per grading: the official executor keys its instance cache by model name and task.
    # It `eval`s the calls, so a `print(...)` among them would write to our stdout.
    with contextlib.redirect_stdout(io.StringIO()):
        result = checker(turns, task.ground_truth, entry, task.category, f"coevolve_replay_{next(_official_names)}")
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


MUTATIONS = ("drop", "duplicate", "swap", "move", "reargue", "unknown", "builtin", "repeat_keyword",
             "reject_turn", "empty", "split")
"""The mutations of `mutated`. `unknown`, `builtin` and `repeat_keyword` put in (or substitute) one call the kit's
parser rejects; `reject_turn` replaces all calls of a turn with such calls; `split` spreads a turn over steps."""


def mutated(task: BFCLTask, rng: random.Random) -> tuple[list[list[list[str]]], list[str]]:
    """The task's ground truth after 1-3 random mutations, as [turn][step][call], and the mutations' names."""
    turns = [list(calls) for calls in task.ground_truth]
    applied = [rng.choice(MUTATIONS) for _ in range(rng.randint(1, 3))]
    split = set()
    for name in applied:
        if name == "split":
            split.add(rng.randrange(len(turns)))
        else:
            _MUTATE[name](turns, rng)
    steps = [_split(calls, rng) if turn in split else ([calls] if calls else []) for turn, calls in enumerate(turns)]
    return steps, applied


def _split(calls: list[str], rng: random.Random) -> list[list[str]]:
    """The turn's calls over 1 to len(calls) consecutive steps, none empty (BFCL's runner drops empty steps)."""
    cuts = sorted(rng.sample(range(1, len(calls)), rng.randint(0, len(calls) - 1))) if len(calls) > 1 else []
    return [calls[a:b] for a, b in zip([0, *cuts], [*cuts, len(calls)]) if calls[a:b]]


def _positions(turns: list[list[str]]) -> list[tuple[int, int]]:
    return [(turn, index) for turn, calls in enumerate(turns) for index in range(len(calls))]


def _insert(turns: list[list[str]], rng: random.Random, call: str) -> None:
    calls = turns[rng.randrange(len(turns))]
    calls.insert(rng.randint(0, len(calls)), call)


def _put(turns: list[list[str]], rng: random.Random, call: str) -> None:
    """Substitute `call` for a random call, or insert it (always, when there is no call to substitute)."""
    positions = _positions(turns)
    if positions and rng.random() < 0.5:
        turn, index = rng.choice(positions)
        turns[turn][index] = call
    else:
        _insert(turns, rng, call)


def _drop(turns, rng):
    if positions := _positions(turns):
        turn, index = rng.choice(positions)
        del turns[turn][index]


def _duplicate(turns, rng):
    if positions := _positions(turns):
        turn, index = rng.choice(positions)
        turns[turn].insert(rng.randint(0, len(turns[turn])), turns[turn][index])


def _swap(turns, rng):
    positions = _positions(turns)
    if len(positions) >= 2:
        (t1, i1), (t2, i2) = rng.sample(positions, 2)
        turns[t1][i1], turns[t2][i2] = turns[t2][i2], turns[t1][i1]


def _move(turns, rng):
    if positions := _positions(turns):
        turn, index = rng.choice(positions)
        _insert(turns, rng, turns[turn].pop(index))


def _reargue(turns, rng):
    """Change one scalar argument of a random call, or drop one of its keyword arguments."""
    positions = [(t, i) for t, i in _positions(turns) if _parsed(turns[t][i])]
    if not positions:
        return
    turn, index = rng.choice(positions)
    call = _parsed(turns[turn][index])
    slots = [("arg", i) for i, v in enumerate(call.args) if _is_scalar(v)]
    slots += [("kwarg", i) for i, (_, v) in enumerate(call.kwargs) if _is_scalar(v)]
    slots += [("drop", i) for i in range(len(call.kwargs))]
    if not slots:
        return
    kind, i = rng.choice(slots)
    if kind == "arg":
        call = Call(call.name, call.args[:i] + (_changed(call.args[i]),) + call.args[i + 1:], call.kwargs)
    elif kind == "kwarg":
        key, value = call.kwargs[i]
        call = Call(call.name, call.args, call.kwargs[:i] + ((key, _changed(value)),) + call.kwargs[i + 1:])
    else:
        call = Call(call.name, call.args, call.kwargs[:i] + call.kwargs[i + 1:])
    turns[turn][index] = call.to_source()


def _rejected_call(turns, rng) -> str:
    """One call the kit's parser rejects: an unknown function, a builtin, or a ground-truth call with a keyword
    repeated (falling back to an unknown function when no call has a keyword)."""
    kind = rng.choice(("unknown", "builtin", "repeat_keyword"))
    return _REJECTED[kind](turns, rng)


def _unknown_call(turns, rng) -> str:
    positions = _positions(turns)
    if positions and rng.random() < 0.5:  # a real call under a name no class has
        turn, index = rng.choice(positions)
        return "coevolve_" + turns[turn][index]
    return rng.choice(["undefined_tool()", "open_ticket(title='x')", "get_weather(city='Paris')"])


def _builtin_call(turns, rng) -> str:
    # The first five run under BFCL's `eval` (result "None"; Python reads `ｐｒｉｎｔ` as `print`), the next two raise
    # there (TypeError). A ground-truth call as print's argument runs first there (and changes the state).
    positions = _positions(turns)
    if positions and rng.random() < 0.25:
        turn, index = rng.choice(positions)
        return f"print({turns[turn][index]})"
    return rng.choice(["print('done')", "print()", "print('cd', 'folder', sep='/')", "ｐｒｉｎｔ('done')",
                       "print(*['cd', 'folder'])", "print(value='x')", "print('x', sep=1)"])


def _repeat_keyword_call(turns, rng) -> str:
    with_keywords = [call for calls in turns for call in map(_parsed, calls) if call and call.kwargs]
    if not with_keywords:
        return _unknown_call(turns, rng)
    call = rng.choice(with_keywords)
    key, value = rng.choice(call.kwargs)
    return call.to_source()[:-1] + f", {key}={value!r})"


def _parsed(text: str) -> Call | None:
    """The call, or None for one an earlier mutation made unparsable (a repeated keyword)."""
    try:
        return parse_call(text)
    except CallParseError:
        return None


_REJECTED = {"unknown": _unknown_call, "builtin": _builtin_call, "repeat_keyword": _repeat_keyword_call}


def _reject_turn(turns, rng):
    turn = rng.randrange(len(turns))
    turns[turn] = [_rejected_call(turns, rng) for _ in range(rng.randint(1, 2))]


def _empty(turns, rng):
    turns[rng.randrange(len(turns))] = []


_MUTATE = {
    "drop": _drop, "duplicate": _duplicate, "swap": _swap, "move": _move, "reargue": _reargue,
    "unknown": lambda turns, rng: _put(turns, rng, _unknown_call(turns, rng)),
    "builtin": lambda turns, rng: _put(turns, rng, _builtin_call(turns, rng)),
    "repeat_keyword": lambda turns, rng: _put(turns, rng, _repeat_keyword_call(turns, rng)),
    "reject_turn": _reject_turn, "empty": _empty,
}


def differential(version: str, category: str, count: int, seed: int = 0) -> dict:
    """Grade `count` mutated trajectories (task i mod the category's size, mutated with a generator seeded by
    seed, category and i) with both graders. Returns counts, time and every disagreement."""
    category = bfcl_backend.normalize_category(category)
    tasks = load_tasks(version, category)
    start = time.perf_counter()
    passed, disagreements = 0, []
    for i in range(count):
        task = tasks[i % len(tasks)]
        turns, applied = mutated(task, random.Random(f"{seed}/{category}/{i}"))
        kit, official = kit_steps_verdict(task, turns), official_steps_verdict(task, turns)
        passed += official
        if kit != official:
            disagreements.append({"index": i, "task_id": task.id, "mutations": applied, "kit": kit,
                                  "official": official, "turns": turns})
    return {"data_version": version, "category": category, "trajectories": count, "official_passed": passed,
            "disagreements": disagreements, "seconds": round(time.perf_counter() - start, 1)}


def replay(version: str, categories: list[str], limit: int | None = None, progress: bool = True) -> dict:
    """Grade every task (and its perturbations) of `categories` with both graders; return the summary."""
    summary = {"data_version": version, "categories": {}}
    for category in categories:
        category = bfcl_backend.normalize_category(category)
        tasks = load_tasks(version, category)[:limit]
        counts = {"tasks": len(tasks), "gt_passed": 0, "perturbed": 0, "perturbed_rejected": 0, "skipped": 0,
                  "agreement": 0, "agreement_total": 0}
        for task in tqdm(tasks, desc=f"{version} {category}", file=sys.stderr, disable=not progress):
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
