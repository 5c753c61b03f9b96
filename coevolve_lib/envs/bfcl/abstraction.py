"""Task abstraction (paper section 3.3, Fig. 12): the triplets of one (task, signal) group become task specs
(taskspec/v1): an intent, a query, an action sequence of >= `min_calls` canonical calls and a completion criterion.

    triplet/v1 --group_triplets--> groups --abstract--> taskspec/v1 --validate--> verdict/v1 --to_pool_task--> task/v1

Two abstractions: "llm", the paper's Fig. 12 prompt, here (its `<task>` blocks are parsed with `safe_calls` only,
never eval/exec); and "deterministic", the offline stand-in in `abstraction_deterministic`.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.safe_calls import CallParseError, parse_call, parse_call_list
from coevolve_lib.core.text_blocks import iter_blocks, without_blocks
from coevolve_lib.engine.explore import split_runs
from coevolve_lib.engine.judge import generation_config
from coevolve_lib.engine.tasks import task_spec, unique_specs
from coevolve_lib.envs.bfcl.abstraction_deterministic import abstract_deterministic
from coevolve_lib.envs.bfcl.benchmark import is_error_observation
from coevolve_lib.envs.bfcl.tasks import docs_by_name
from coevolve_lib.prompts import OBSERVATION_CHARS, clip, load_prompt

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

MAX_PROMPT_RECORD_CHARS = 12_000
"""Rendered triplets beyond this many characters are left out of the abstraction prompt (the rest is noted)."""
HISTORY_ACTIONS = 3
"""Previous actions of the run shown as the `history` of each triplet."""


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


def _render_triplets(triplets: list[dict]) -> str:
    """(history, action, observation) records per run, cut to MAX_PROMPT_RECORD_CHARS."""
    lines, used, left_out = [], 0, 0
    for run_id, run in split_runs(triplets).items():
        history: list[str] = []
        block = [f"## Run {run_id}"]
        for triplet in run:
            failed = not triplet.get("valid") or is_error_observation(str(triplet["observation"]))
            status = "failed" if failed else "ok"
            block.append(f"- step {triplet['step']} | history: {' ; '.join(history[-HISTORY_ACTIONS:]) or '(start)'}"
                         f" | action: {clip(triplet['action'], 200)} | observation ({status}): "
                         f"{clip(triplet['observation'], OBSERVATION_CHARS)}")
            history.append(clip(triplet["action"], 80))
        text = "\n".join(block)
        if used + len(text) > MAX_PROMPT_RECORD_CHARS:
            left_out += len(run)
            continue
        lines.append(text)
        used += len(text)
    if left_out:
        lines.append(f"({left_out} more steps left out for length)")
    return "\n\n".join(lines)


def _environment(source: dict) -> str:
    docs = docs_by_name(source.get("data_version", "v3"), source["involved_classes"])
    return "\n".join([
        f"Classes: {', '.join(source['involved_classes'])}",
        f"Available functions: {', '.join(sorted(docs))}",
        f"Initial state (JSON, truncated): {clip(json.dumps(source['initial_config'], default=str), 1500)}",
        f"Original task: {clip(source.get('description') or '(none)', 600)}",
    ])


def _abstract_llm(triplets, source, config, model, cost) -> list[dict]:
    prompt = load_prompt("abstract").format(environment=_environment(source), triplets=_render_triplets(triplets),
                            min_steps=config.min_calls, output_format=OUTPUT_FORMAT)
    generation = cost.ask(model, prompt, generation_config(config))
    if generation.error:
        cost.skip("api_error")
        return []
    run_ids = list(split_runs(triplets))
    docs = docs_by_name(source.get("data_version", "v3"), source["involved_classes"])
    drafts = []
    for block in parse_task_blocks(generation.text, cost.skipped):
        try:
            drafts.append({**_draft_from_block(block, docs), "run_ids": run_ids})
        except ValueError as e:
            cost.skip(str(e).split(":", 1)[0])
    return drafts


_TASK_OPEN, _TASK_CLOSE = re.compile("<task>", re.IGNORECASE), re.compile("</task>", re.IGNORECASE)
FIELD_RE = re.compile(r"^[\s*#>_-]*(description|query|action\s*sequence|completion\s*criterion|criterion|confidence)"
                      r"[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)
FIELD_NAMES = {"description": "description", "query": "query", "actionsequence": "action_sequence",
               "completioncriterion": "criterion", "criterion": "criterion", "confidence": "confidence"}
STEP_PREFIX_RE = re.compile(r"^\s*(?:[-*•]\s*)?(?:#?\s*step\s*\d+\s*[:.)-]?|\d+\s*[.):-])?\s*", re.IGNORECASE)


def parse_task_blocks(text: str, skipped: Counter) -> list[dict]:
    """The `<task>` blocks of a reply as {field: text}; an unclosed last block or no block at all is counted."""
    blocks, spans = [], list(iter_blocks(text, _TASK_OPEN, _TASK_CLOSE))  # linear time on untrusted text
    for start, end in spans:
        body = text[start.end():end.start()]
        fields: dict[str, list[str]] = {}
        current = None
        for line in body.splitlines():
            match = FIELD_RE.match(line)
            if match:
                current = FIELD_NAMES[re.sub(r"\s+", "", match.group(1).lower())]
                fields[current] = [match.group(2)]
            elif current:
                fields[current].append(line)
        blocks.append({k: "\n".join(v).strip() for k, v in fields.items()})
    tail = without_blocks(text, spans)
    if _TASK_OPEN.search(tail):
        skipped["unclosed_block"] += 1
    if not blocks and not _TASK_OPEN.search(tail):
        skipped["no_task_block"] += 1
    return blocks


def _draft_from_block(block: dict, docs: dict) -> dict:
    """Fields of one parsed block; raises ValueError('<reason>: <detail>') when it cannot be used."""
    for name in ("description", "query", "action_sequence", "criterion"):
        if not block.get(name):
            raise ValueError(f"missing_field: {name}")
    actions = []
    for line in block["action_sequence"].splitlines():
        line = STEP_PREFIX_RE.sub("", line, count=1).strip().strip("`").strip()
        if not line:
            continue
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
    if not actions:
        raise ValueError("missing_field: action_sequence")
    return {"intent": block["description"], "query": block["query"], "action_sequence": actions,
            "completion_criterion": block["criterion"]}
