"""Abstraction for AppWorld (paper section 3.3): the triplets of one (task, signal) group become task specs
(taskspec/v1) whose answer, if any, is read off the last call's result (`answer_from`), the form
`calls.solution_code` renders. Two abstractions, as on BFCL:

- "llm", the paper's Fig. 12 prompt (`engine.llm_abstraction`) with AppWorld's APIs in its environment section and an
  `Answer:` field in each block (none, count, or field:<name>), the answer rule AppWorld's evaluator needs;
- "deterministic", the offline path: a run's successful calls, windowed, with a query that names every step.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.safe_calls import CallParseError
from coevolve_lib.engine.explore import split_runs
from coevolve_lib.engine.llm_abstraction import action_lines, ask_for_drafts, draft_fields
from coevolve_lib.engine.tasks import task_spec, unique_specs
from coevolve_lib.envs.appworld.calls import (
    ANSWER_COUNT,
    ANSWER_FIELD,
    DATA_VERSION,
    NO_LOGIN_APPS,
    TOKEN_PARAMETER,
    AppWorldCall,
    is_failed_output,
    parse_appworld_call,
)
from coevolve_lib.envs.appworld.explore import allowed_api
from coevolve_lib.prompts import clip

COMPLETION_CRITERION = "the database changes and the answer equal those of the reference solution"
ANSWER_KEYS = ("content", "title", "name", "amount", "balance", "description", "message")
"""Fields of a result object a task prefers to ask for (its first scalar field otherwise)."""
OUTPUT_FORMAT = """<task>
Description: <the user's intent, one sentence>
Query: <the request a user would type, stating every value the actions need and what to report, if anything>
ActionSequence:
1. app_name.api_name(argument='value', ...)
2. app_name.api_name(argument='value', ...)
3. app_name.api_name(argument='value', ...)
Answer: <none (the task changes data) | count (items the last call returns) | field:<name> (of the last call's result)>
Criterion: <what must be true when the task is complete>
</task>"""
"""The `{output_format}` of the Fig. 12 prompt on AppWorld: BFCL's block with the answer rule added."""
API_LIST_CHARS = 4000
"""The environment section's list of API signatures is cut to this many characters."""
_ANSWER_RULE = re.compile(r"^[`'\"<\s]*(none|count|field\s*:\s*(\w+))\b", re.IGNORECASE)


def abstract_appworld(group_key: tuple, triplets: list[dict], source: dict, config: SynthesisConfig,
                      api_docs: dict, model: ChatModel | None = None) -> tuple[list[dict], dict]:
    """Task specs (taskspec/v1 plus `answer_from`) from one group of AppWorld triplets, and the stage's cost.

    "deterministic": per run, its successful calls in order (exact repeats dropped), then for each length
    min_calls..max_calls the earliest window of that many consecutive calls that makes a task. "llm": the blocks of
    one Fig. 12 ask about all the group's runs, each checked against the API docs. `source` is
    `ExplorationTarget.source()`; `group_key` is unused, as in `envs.bfcl.abstraction.abstract`."""
    cost = Cost()
    if config.abstraction == "deterministic":
        drafts = _deterministic_drafts(triplets, api_docs, config, cost.skipped)
    elif config.abstraction == "llm":
        if model is None:
            raise ValueError("abstraction='llm' needs a model")
        drafts = _llm_drafts(triplets, source, api_docs, config, model, cost)
    else:
        raise ValueError(f"unknown abstraction {config.abstraction!r}; choose deterministic or llm")

    def specs():
        for draft in drafts:
            apps = list(dict.fromkeys(parse_appworld_call(a).app for a in draft["action_sequence"]))
            yield {**task_spec(draft, {**source, "involved_classes": apps, "data_version": DATA_VERSION},
                               config.abstraction), "answer_from": draft["answer_from"]}

    return unique_specs(specs(), cost), cost.as_dict()


def _deterministic_drafts(triplets, api_docs, config: SynthesisConfig, skipped: Counter):
    """Lazily: the skips are counted in the order the runs are read."""
    for run_id, run in split_runs(triplets).items():
        steps = _successful_calls(run, api_docs, skipped)
        if len(steps) < config.min_calls:
            skipped["too_few_calls"] += 1
            continue
        yield from _drafts(steps, api_docs, config, run_id, skipped)


def _llm_drafts(triplets, source, api_docs, config: SynthesisConfig, model: ChatModel, cost: Cost) -> list[dict]:
    return ask_for_drafts(_environment(source, api_docs), triplets, is_failed_output, OUTPUT_FORMAT,
                          lambda block: _draft_from_block(block, api_docs), config, model, cost)


def _environment(source: dict, api_docs: dict) -> str:
    """The Fig. 12 prompt's environment section: the apps, their callable APIs with parameters, the start state."""
    apps = source["involved_classes"]
    signatures = [f"{app}.{api}({', '.join(p['name'] for p in doc['parameters'] if p['name'] != TOKEN_PARAMETER)})"
                  for app in apps for api, doc in api_docs.get(app, {}).items() if allowed_api(f"{app}.{api}")]
    return "\n".join([
        f"Apps: {', '.join(apps)}",
        "Available APIs (keyword arguments only; leave out access_token: the solution logs in to each app first): "
        + clip("; ".join(signatures), API_LIST_CHARS),
        f"Initial state: the databases of AppWorld task {source['initial_config']['appworld_task']}",
        f"Original task: {clip(source.get('description') or '(none)', 600)}",
    ])


def _draft_from_block(block: dict, api_docs: dict) -> dict:
    """Fields of one parsed block; raises ValueError('<reason>: <detail>') when it cannot be used."""
    actions = []
    for line in action_lines(block):
        try:
            call = parse_appworld_call(line, api_docs)
        except CallParseError as e:
            raise ValueError(f"invalid_action: {line[:80]!r}: {e}") from None
        if not allowed_api(call.name):
            raise ValueError(f"excluded_api: {call.name}")
        actions.append(call.to_source())
    return {**draft_fields(block, actions), "answer_from": _answer_rule(block.get("answer"))}


def _answer_rule(text: str | None) -> str | None:
    """`answer_from` of a block's `Answer:` field (absent: none); ValueError('invalid_answer: ...') otherwise."""
    match = _ANSWER_RULE.match(text or "none")
    if not match:
        raise ValueError(f"invalid_answer: {clip(text, 80)!r}")
    if match.group(2):
        return ANSWER_FIELD + match.group(2)
    return ANSWER_COUNT if match.group(1).lower() == ANSWER_COUNT else None


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
