"""Deterministic abstraction for AppWorld (paper section 3.3), the offline (no LLM) path: `abstract_appworld` turns a
run's successful calls into task specs (taskspec/v1) whose answer, if any, is read off the last call's result
(`answer_from`), the form `calls.solution_code` renders.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.safe_calls import CallParseError
from coevolve_lib.engine.explore import split_runs
from coevolve_lib.engine.tasks import task_spec, unique_specs
from coevolve_lib.envs.appworld.calls import (
    ANSWER_COUNT,
    ANSWER_FIELD,
    DATA_VERSION,
    NO_LOGIN_APPS,
    AppWorldCall,
    parse_appworld_call,
)
from coevolve_lib.envs.appworld.explore import allowed_api

COMPLETION_CRITERION = "the database changes and the answer equal those of the reference solution"
ANSWER_KEYS = ("content", "title", "name", "amount", "balance", "description", "message")
"""Fields of a result object a task prefers to ask for (its first scalar field otherwise)."""


def abstract_appworld(group_key: tuple, triplets: list[dict], source: dict, config: SynthesisConfig,
                      api_docs: dict) -> tuple[list[dict], dict]:
    """Task specs (taskspec/v1 plus `answer_from`) from one group of AppWorld triplets, and the stage's cost.

    Per run: its successful calls in order (exact repeats dropped), then for each length min_calls..max_calls the
    earliest window of that many consecutive calls that makes a task. `source` is `ExplorationTarget.source()`;
    `group_key` is unused, as in `envs.bfcl.abstraction.abstract`."""
    cost = Cost()

    def drafted():  # lazily: the skips are counted in the order the runs are read
        for run_id, run in split_runs(triplets).items():
            steps = _successful_calls(run, api_docs, cost.skipped)
            if len(steps) < config.min_calls:
                cost.skip("too_few_calls")
                continue
            for draft in _drafts(steps, api_docs, config, run_id, cost.skipped):
                apps = list(dict.fromkeys(parse_appworld_call(a).app for a in draft["action_sequence"]))
                yield {**task_spec(draft, {**source, "involved_classes": apps, "data_version": DATA_VERSION},
                                   "deterministic"), "answer_from": draft["answer_from"]}

    specs = unique_specs(drafted(), cost)
    return specs, cost.as_dict()


def _successful_calls(run: list[dict], api_docs: dict, skipped: Counter) -> list[tuple[AppWorldCall, str]]:
    """(call, observation) of the run's valid calls, first occurrences only; excluded or unparsable ones counted."""
    steps, made = [], set()
    for triplet in run:
        if not triplet.get("valid"):
            continue
        try:
            call = parse_appworld_call(triplet["action"], api_docs)
        except CallParseError:
            skipped["unparsable_action"] += 1
            continue
        if not allowed_api(call.name):
            skipped["excluded_api"] += 1
            continue
        if call.to_source() not in made:
            made.add(call.to_source())
            steps.append((call, triplet["observation"]))
    return steps


def _drafts(steps, api_docs, config: SynthesisConfig, run_id: str, skipped: Counter) -> list[dict]:
    drafts = []
    for length in range(config.min_calls, min(config.max_calls, len(steps)) + 1):
        for first in range(len(steps) - length + 1):
            window = steps[first:first + length]
            changes_state = any(_doc(call, api_docs)["method"] != "GET" for call, _ in window)
            answer_from = None if changes_state else _answer_from(window[-1][1])
            if changes_state or answer_from:
                calls = [call for call, _ in window]
                drafts.append({"intent": _intent(calls), "query": _query(calls, api_docs, answer_from, config),
                               "action_sequence": [call.to_source() for call in calls],
                               "completion_criterion": COMPLETION_CRITERION, "run_ids": [run_id],
                               "answer_from": answer_from})
                break
        else:
            skipped["no_answerable_window"] += 1
    return drafts


def _doc(call: AppWorldCall, api_docs: dict) -> dict:
    return api_docs[call.app][call.api]


def _answer_from(observation: str) -> str | None:
    """What a read-only task asks for, from its last call's output: the count of a list, a field of an object, or
    None when the output is neither (plain text, or cut short by the explorer)."""
    try:
        value = json.loads(observation)
    except ValueError:
        return None
    if isinstance(value, list):
        return ANSWER_COUNT
    if isinstance(value, dict):
        scalars = [k for k, v in value.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
        key = next((k for k in ANSWER_KEYS if k in scalars), scalars[0] if scalars else None)
        return None if key is None else ANSWER_FIELD + key
    return None


def _app_title(app: str) -> str:
    return app.replace("_", " ").title()


def _step_text(call: AppWorldCall, api_docs: dict, words: int | None) -> str:
    """The API's own description (first sentence, or its first `words` words) and the call's literal arguments."""
    description = _doc(call, api_docs)["description"].strip() or call.name
    text = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0].rstrip(".")
    if words is not None:
        text = " ".join(text.split()[:words])
    if call.kwargs:
        text += " (" + ", ".join(f"{key}: {value!r}" for key, value in call.kwargs) + ")"
    return text + "."


def _query(calls: list[AppWorldCall], api_docs: dict, answer_from: str | None, config: SynthesisConfig) -> str:
    """An instruction that names every step and argument value (the agent must reproduce the calls), and what to
    report at the end."""
    apps = [_app_title(app) for app in dict.fromkeys(call.app for call in calls) if app not in NO_LOGIN_APPS]
    where = (f"In my {' and '.join(apps)} account{'s' if len(apps) > 1 else ''}" if apps
             else "Using my supervisor app")
    steps = " ".join(f"{n}. {_step_text(call, api_docs, config.description_words)}"
                     for n, call in enumerate(calls, 1))
    if answer_from is None:
        end = "Then mark the task complete."
    elif answer_from == ANSWER_COUNT:
        end = "Then tell me the number of items the last step returned."
    else:
        end = f"Then tell me the '{answer_from[len(ANSWER_FIELD):]}' of what the last step returned."
    return f"{where}, do these steps in order: {steps} {end}"


def _intent(calls: list[AppWorldCall]) -> str:
    names = list(dict.fromkeys(call.name for call in calls))
    return f"{' + '.join(names)} ({', '.join(dict.fromkeys(call.app for call in calls))})"
