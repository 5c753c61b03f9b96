"""The LLM abstraction's environment-free half (paper section 3.3, Fig. 12): the interaction records shown to the
explorer LLM, the ask, and the `<task>` blocks read back from its reply. Each environment writes the rest: what its
`{environment}` section says, its `{output_format}`, and how a block's actions parse (`envs.bfcl.abstraction`,
`envs.appworld.abstraction`).

    drafts = ask_for_drafts(environment_text, triplets, is_error, OUTPUT_FORMAT, draft_from_block, config, model,
                            cost)                                   # draft_from_block: the environment's parsing

Replies are read with regular expressions and `safe_calls` only, never evaluated.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.text_blocks import iter_blocks, without_blocks
from coevolve_lib.engine.explore import split_runs
from coevolve_lib.engine.judge import generation_config
from coevolve_lib.prompts import OBSERVATION_CHARS, clip, load_prompt

MAX_PROMPT_RECORD_CHARS = 12_000
"""Rendered triplets beyond this many characters are left out of the abstraction prompt (the rest is noted)."""
HISTORY_ACTIONS = 3
"""Previous actions of the run shown as the `history` of each triplet."""


def render_triplets(triplets: list[dict], is_error: Callable[[str], bool]) -> str:
    """(history, action, observation) records per run, cut to MAX_PROMPT_RECORD_CHARS; `is_error` says which
    observations report a failed call (the environment's `is_error`)."""
    lines, used, left_out = [], 0, 0
    for run_id, run in split_runs(triplets).items():
        history: list[str] = []
        block = [f"## Run {run_id}"]
        for triplet in run:
            failed = not triplet.get("valid") or is_error(str(triplet["observation"]))
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


def ask_for_drafts(environment: str, triplets: list[dict], is_error: Callable[[str], bool], output_format: str,
                   draft_from_block: Callable[[dict], dict], config: SynthesisConfig, model: ChatModel,
                   cost: Cost) -> list[dict]:
    """The Fig. 12 prompt filled in and asked once; each `<task>` block of the reply made a draft by the environment's
    `draft_from_block` (a ValueError('<reason>: <detail>') there skips the block, counted under its reason), with the
    group's run ids. An API error is counted as `api_error` and drafts nothing."""
    prompt = load_prompt("abstract").format(environment=environment, triplets=render_triplets(triplets, is_error),
                                            min_steps=config.min_calls, output_format=output_format)
    generation = cost.ask(model, prompt, generation_config(config))
    if generation.error:
        cost.skip("api_error")
        return []
    run_ids, drafts = list(split_runs(triplets)), []
    for block in parse_task_blocks(generation.text, cost.skipped):
        try:
            drafts.append({**draft_from_block(block), "run_ids": run_ids})
        except ValueError as e:
            cost.skip(str(e).split(":", 1)[0])
    return drafts


_TASK_OPEN, _TASK_CLOSE = re.compile("<task>", re.IGNORECASE), re.compile("</task>", re.IGNORECASE)
FIELD_RE = re.compile(r"^[\s*#>_-]*(description|query|action\s*sequence|completion\s*criterion|criterion|confidence|"
                      r"answer)[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)
FIELD_NAMES = {"description": "description", "query": "query", "actionsequence": "action_sequence",
               "completioncriterion": "criterion", "criterion": "criterion", "confidence": "confidence",
               "answer": "answer"}
STEP_PREFIX_RE = re.compile(r"^\s*(?:[-*•]\s*)?(?:#?\s*step\s*\d+\s*[:.)-]?|\d+\s*[.):-])?\s*", re.IGNORECASE)
REQUIRED_FIELDS = ("description", "query", "action_sequence", "criterion")


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


def action_lines(block: dict) -> list[str]:
    """A block's action sequence, one action per line with its numbering and code marks removed; ValueError
    ('missing_field: <name>') when a required field is empty."""
    for name in REQUIRED_FIELDS:
        if not block.get(name):
            raise ValueError(f"missing_field: {name}")
    lines = [STEP_PREFIX_RE.sub("", line, count=1).strip().strip("`").strip()
             for line in block["action_sequence"].splitlines()]
    return [line for line in lines if line]


def draft_fields(block: dict, actions: list[str]) -> dict:
    """The draft a block makes with its parsed `actions` (ValueError 'missing_field' when there are none)."""
    if not actions:
        raise ValueError("missing_field: action_sequence")
    return {"intent": block["description"], "query": block["query"], "action_sequence": actions,
            "completion_criterion": block["criterion"]}
