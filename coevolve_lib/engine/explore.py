"""Exploration runs as (action, observation, run id) triplets (paper section 3.2, Figs. 9-10): the explorer
interface both explorers implement, the triplet/v1 record they write, and the grouping of triplets by source and run
that abstraction (Fig. 12) reads. Record layout: docs/records.md."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from abc import ABC, abstractmethod

from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.text_blocks import iter_blocks
from coevolve_lib.engine.contexts import CONTEXT_LIST_FIELDS, CONTEXT_TEXT_FIELDS, ExplorationTarget, build_context
from coevolve_lib.prompts import available_prompts, clip, load_prompt

log = logging.getLogger(__name__)

TRIPLET_SCHEMA = "triplet/v1"


def run_ids(target: ExplorationTarget, context: dict | None, runs: int) -> list[str]:
    prefix = context["context_id"] if context else f"unguided/{target.task_id}"
    return [f"{prefix}/run{k}" for k in range(runs)]


def triplet_record(target: ExplorationTarget, context: dict | None, run_id: str, step: int, action: str,
                   observation: str, valid: bool, explorer: str) -> dict:
    return {"schema": TRIPLET_SCHEMA, "run_id": run_id, "step": step, "action": action, "observation": observation,
            "valid": valid, "task_id": target.task_id,
            "signal_id": context["signal_id"] if context else None,
            "signal_type": context["signal_type"] if context else None, "explorer": explorer}


class Explorer(ABC):
    """Turns a target (and its context, None = unguided) into the triplets of R runs."""

    name: str

    def __init__(self):
        self.cost = Cost()
        """LLM usage and skips of every `explore` call so far."""

    @abstractmethod
    def explore(self, target: ExplorationTarget, context: dict | None, config: ExploreConfig) -> list[dict]:
        """triplet/v1 records of all R runs, run by run and step by step."""


def _run_order(triplet: dict) -> tuple:
    # "…/run10" after "…/run9": compare the digit runs of the run id as numbers, then the step.
    run = tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(triplet["run_id"])))
    return run, triplet["step"]


def group_triplets(triplets: list[dict]) -> dict[tuple, list[dict]]:
    """(task_id, signal_id) -> the group's triplets ordered by run (run10 after run9) and step.
    D_0 triplets have signal_id None, so unguided runs of a task form one group."""
    groups: dict[tuple, list[dict]] = {}
    for triplet in triplets:
        groups.setdefault((triplet["task_id"], triplet.get("signal_id")), []).append(triplet)
    return {key: sorted(group, key=_run_order) for key, group in groups.items()}


def split_runs(triplets: list[dict]) -> dict[str, list[dict]]:
    """run_id -> that run's triplets, runs and steps in order."""
    runs: dict[str, list[dict]] = {}
    for triplet in sorted(triplets, key=_run_order):
        runs.setdefault(triplet["run_id"], []).append(triplet)
    return runs


# ---------------------------------------------------------------------------------------------------------
# What every environment's explorers share


def explore_target(target: ExplorationTarget, config: ExploreConfig, model: ChatModel | None,
                   explorer: Explorer) -> tuple[dict | None, list[dict], dict]:
    """One target's exploration stage with `explorer`: (context/v1 or None when unguided, triplet/v1 records of all
    runs, the stage's cost over the context builder's and this call's explorer LLM calls; the explorer's own `cost`
    keeps adding up across calls)."""
    cost = Cost()
    guided = config.guided and target.signal is not None
    context = build_context(target, config, model, cost) if guided else None
    earlier, explorer.cost = explorer.cost, Cost()
    try:
        triplets = explorer.explore(target, context, config)
    finally:
        cost.merge(explorer.cost)
        earlier.merge(explorer.cost)
        explorer.cost = earlier
    return context, triplets, cost.as_dict()


NO_VALID_ACTION = "No valid action"
_ACTION_OPEN, _ACTION_CLOSE = re.compile("<action>"), re.compile("</action>")


def action_tags(text: str) -> list[str]:
    """The bodies of the `<action>...</action>` tags of an LLM explorer's reply (Fig. 9), in order (the last one is
    its action); in linear time, since a reply is untrusted text."""
    return [text[start.end():end.start()] for start, end in iter_blocks(text, _ACTION_OPEN, _ACTION_CLOSE)]


def render_history(steps: list[tuple[str, str]], observation_chars: int = 300, last: int = 10) -> str:
    if not steps:
        return "(no actions yet: this is the first step)"
    start = max(0, len(steps) - last)
    lines = [f"(first {start} steps omitted)"] if start else []
    lines += [f"Step {i}: {action} -> {clip(observation, observation_chars)}"
              for i, (action, observation) in enumerate(steps[start:], start)]
    return "\n".join(lines)


def guidance(context: dict | None) -> str:
    """The Fig. 10 block of the context's signal type with the context JSON, or the unguided block."""
    if context is None:
        return load_prompt("guidance_unguided")
    name = f"guidance_{context['signal_type']}"
    if name not in available_prompts():
        # A user-defined signal type without its own block gets the generic success-vs-failure probe.
        log.warning("no prompt %s.txt; using guidance_boundary for signal type %r", name, context["signal_type"])
        name = "guidance_boundary"
    fields = {key: context[key] for key in CONTEXT_TEXT_FIELDS + CONTEXT_LIST_FIELDS}
    return load_prompt(name).format(context=json.dumps(fields, indent=2, ensure_ascii=False))


WORDS = ("alpha", "annual", "archive", "audit", "backup", "beta", "budget", "build", "campaign", "chapter", "client",
         "config", "contract", "course", "daily", "data", "design", "draft", "event", "expense", "experiment", "field",
         "final", "garden", "grant", "guide", "harbor", "index", "invoice", "journal", "lab", "launch", "lecture",
         "ledger", "lesson", "market", "meeting", "memo", "metrics", "model", "monthly", "notes", "orbit", "outline",
         "paper", "plan", "poster", "project", "proposal", "quarter", "recipe", "release", "report", "research",
         "review", "roadmap", "sales", "sample", "schedule", "script", "season", "sketch", "spring", "study",
         "summary", "survey", "team", "test", "thesis", "travel", "trial", "update", "vendor", "weekly", "winter",
         "workshop")
"""Words that new file, folder and item names and new text are made of (a made-up value must be copied from the query:
names the policy could guess from the environment would not test that)."""


def stable_seed(*parts) -> int:
    """A seed from `parts` that is the same in every process."""
    # Python's hash() of a str changes per process; sha256 keeps runs reproducible across processes.
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big")
