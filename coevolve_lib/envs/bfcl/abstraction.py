"""Task abstraction (paper section 3.3, Fig. 12): the triplets of one (task, signal) group become task specs
(taskspec/v1): an intent, a query, an action sequence of >= `min_calls` canonical calls and a completion criterion.

    triplet/v1 --group_triplets--> groups --abstract--> taskspec/v1 --validate--> verdict/v1 --to_pool_task--> task/v1

Two abstractions: "llm", the paper's Fig. 12 prompt, here (its `<task>` blocks are parsed with `safe_calls` only,
never eval/exec); and "deterministic", the offline stand-in in `abstraction_deterministic`.
"""

from __future__ import annotations

import json

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.safe_calls import CallParseError, parse_call, parse_call_list
from coevolve_lib.engine.llm_abstraction import action_lines, ask_for_drafts, draft_fields
from coevolve_lib.engine.tasks import task_spec, unique_specs
from coevolve_lib.envs.bfcl.abstraction_deterministic import abstract_deterministic
from coevolve_lib.envs.bfcl.benchmark import is_error_observation
from coevolve_lib.envs.bfcl.tasks import docs_by_name
from coevolve_lib.prompts import clip

OUTPUT_FORMAT = """<task>
Description: <the user's intent, one sentence>
Query: <the request a user would type, stating every value the actions need>
ActionSequence:
1. function_name(argument='value', ...)
2. function_name(argument='value', ...)
3. function_name(argument='value', ...)
Criterion: <what must be true when the task is complete>
</task>"""
"""The `{output_format}` of the Fig. 12 prompt: labelled fields, one call per numbered line (CuES's block shape)."""


def abstract(group_key: tuple, triplets: list[dict], source: dict, config: SynthesisConfig,
             model: ChatModel | None = None) -> tuple[list[dict], dict]:
    """Task specs (taskspec/v1) from one group of triplets, and what it cost:
    {calls, prompt_tokens, completion_tokens, skipped: {reason: count}}. Specs are unique by content."""
    cost = Cost()
    if config.abstraction == "deterministic":
        drafts = abstract_deterministic(triplets, source, config, cost.skipped)
    elif config.abstraction == "llm":
        if model is None:
            raise ValueError("abstraction='llm' needs a model")
        drafts = _abstract_llm(triplets, source, config, model, cost)
    else:
        raise ValueError(f"unknown abstraction {config.abstraction!r}; choose deterministic or llm")
    specs = unique_specs((task_spec(draft, source, config.abstraction) for draft in drafts), cost)
    return specs, cost.as_dict()


def _environment(source: dict) -> str:
    docs = docs_by_name(source.get("data_version", "v3"), source["involved_classes"])
    return "\n".join([
        f"Classes: {', '.join(source['involved_classes'])}",
        f"Available functions: {', '.join(sorted(docs))}",
        f"Initial state (JSON, truncated): {clip(json.dumps(source['initial_config'], default=str), 1500)}",
        f"Original task: {clip(source.get('description') or '(none)', 600)}",
    ])


def _abstract_llm(triplets, source, config, model, cost) -> list[dict]:
    docs = docs_by_name(source.get("data_version", "v3"), source["involved_classes"])
    return ask_for_drafts(_environment(source), triplets, is_error_observation, OUTPUT_FORMAT,
                          lambda block: _draft_from_block(block, docs), config, model, cost)


def _draft_from_block(block: dict, docs: dict) -> dict:
    """Fields of one parsed block; raises ValueError('<reason>: <detail>') when it cannot be used."""
    actions = []
    for line in action_lines(block):
        if line.startswith("["):  # a whole list on one line: [f(a=1), g()]
            calls, errors = parse_call_list(line, docs)
            if errors:
                raise ValueError(f"invalid_action: {errors[0]}")
            actions += [c.to_source() for c in calls]
            continue
        try:
            actions.append(parse_call(line, docs).to_source())
        except CallParseError as e:
            raise ValueError(f"invalid_action: {line[:80]!r}: {e}") from None
    return draft_fields(block, actions)
