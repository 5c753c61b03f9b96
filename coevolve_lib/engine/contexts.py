"""Exploration targets and structured exploration contexts (paper section 3.2, Fig. 11).

A weakness-signal trajectory becomes an `ExplorationTarget`; `build_context` turns it into a context/v1 record
with the six fields of Fig. 11, by one of two builders:
- `llm`: the paper's path, the Fig. 11 prompt; a malformed reply or an API error is retried once, then falls back
  to the heuristic context with `error` set;
- `heuristic`: the offline stand-in (no LLM, deterministic), read straight off the trajectory and the signal's
  evidence.

Model text is parsed with `llm_json`, never evaluated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.environment import Environment
from coevolve_lib.core.llm_json import LLMOutputError, extract_json_object
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.engine.signals import SIGNALS
from coevolve_lib.prompts import clip, load_prompt

CONTEXT_SCHEMA = "context/v1"
CONTEXT_TEXT_FIELDS = ("summary", "failure_cause", "instability_pattern")
CONTEXT_LIST_FIELDS = ("focus_pattern", "exploration_objectives", "do_not_repeat")


@dataclass
class ExplorationTarget:
    """What to explore from: an environment start state, the source task's text, and the signal if any."""

    task_id: str
    environment: Environment = field(repr=False, compare=False)
    """The environment the target's start state belongs to (`core.environment`): it gives the tool docs and tells
    failed calls, so contexts and explorers need no environment of their own."""
    data_version: str
    """The environment's data version (BFCL: "v3" / "v4"; AppWorld: "appworld"), carried into specs and pool tasks."""
    initial_config: dict
    involved_classes: list[str]
    description: str
    """The source task's query text (user turns joined), for the prompts and the context."""
    signal: dict | None = None
    """The signal/v1 record; None for D_0 / unguided exploration."""
    trajectory: dict | None = None
    """The rollout/v1 record that carried the signal."""

    @classmethod
    def from_pool_task(cls, task_record: dict, environment: Environment, signal: dict | None = None,
                       trajectory: dict | None = None) -> "ExplorationTarget":
        """From a task/v1 record of the task pool."""
        return cls(task_record["task_id"], environment, task_record["data_version"], task_record["initial_config"],
                   list(task_record["involved_classes"]), task_record["query"], signal, trajectory)

    @property
    def signal_id(self) -> str | None:
        return self.signal["signal_id"] if self.signal else None

    @property
    def signal_type(self) -> str | None:
        return self.signal["type"] if self.signal else None

    def source(self, context: dict | None = None) -> dict:
        """What abstraction and validation need to know about where a group of triplets came from (and a
        task-like record for `start_env`)."""
        return {"task_id": self.task_id, "data_version": self.data_version, "initial_config": self.initial_config,
                "involved_classes": self.involved_classes, "description": self.description,
                "signal_id": self.signal_id, "signal_type": self.signal_type,
                "context_id": context["context_id"] if context else None}

    def tool_docs(self) -> list[dict]:
        """The function docs of the target's environment (`Environment.tool_docs`)."""
        return self.environment.tool_docs(self)

    def is_error(self, observation: str) -> bool:
        """Whether an observation of this target's environment reports a failed call."""
        return self.environment.is_error(observation)


# ---------------------------------------------------------------------------------------------------------
# Trajectory reading, shared by both context builders


def trajectory_calls(trajectory: dict | None) -> list[tuple[int, str, str]]:
    """(turn, call, observation) for every executed call of a rollout/v1 record, in order."""
    if not trajectory:
        return []
    return [(step.get("turn", 0), call, observation) for step in trajectory.get("steps", [])
            for call, observation in zip(step.get("calls", []), step.get("observations", []))]


def _tool_name(call: str) -> str:
    return call.split("(", 1)[0].strip()


def render_signal(signal: dict | None) -> str:
    if not signal:
        return "none (unguided exploration)"
    return f"{signal['type']} (evidence: {json.dumps(signal.get('evidence', {}), default=str)})"


def render_trajectory(target: ExplorationTarget, observation_chars: int = 300, max_calls: int = 60) -> str:
    """The task, every call with its (truncated) observation, and the outcome, as text for the Fig. 11 prompt."""
    trajectory = target.trajectory or {}
    lines = [f"Task ({target.task_id}; environment classes: {', '.join(target.involved_classes)}):",
             target.description, "", "Executed actions and environment feedback:"]
    calls = trajectory_calls(trajectory)
    for turn, call, observation in calls[:max_calls]:
        lines.append(f"- [user turn {turn}] {call} -> {clip(observation, observation_chars)}")
    if len(calls) > max_calls:
        lines.append(f"- ... {len(calls) - max_calls} more calls not shown")
    if not calls:
        lines.append("- (no calls were executed)")
    rejected = [r for step in trajectory.get("steps", []) for r in step.get("rejected", [])]
    if rejected:
        lines.append(f"Rejected (unparsable) calls: {len(rejected)}, e.g. {clip(rejected[0], observation_chars)}")
    if trajectory:
        lines += ["", f"Outcome: score {trajectory.get('score')}, success {trajectory.get('success')}, "
                      f"per-turn validity {trajectory.get('turn_valid')}, terminated {trajectory.get('terminated')}",
                  f"Checker error: {trajectory.get('error_type')}: "
                  f"{clip(trajectory.get('error_message'), observation_chars)}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Context builders (context/v1)


def _context_record(target: ExplorationTarget, builder: str, fields: dict, cost: Cost, error: str | None) -> dict:
    return {"schema": CONTEXT_SCHEMA, "context_id": f"ctx/{target.signal_id}", "signal_id": target.signal_id,
            "signal_type": target.signal_type, "task_id": target.task_id, "builder": builder,
            **{name: fields[name] for name in CONTEXT_TEXT_FIELDS + CONTEXT_LIST_FIELDS},
            "cost": cost.as_dict(skipped=False), "error": error}


def _instability_pattern(signal: dict) -> str:
    """The signal type's own description of its evidence (`Signal.describe`), else a generic one."""
    evidence, kind = signal.get("evidence") or {}, signal["type"]
    described = SIGNALS[kind].describe(evidence) if kind in SIGNALS else None
    return described or f"{kind} signal with evidence {json.dumps(evidence, default=str)}."


def _signal_tools(signal: dict, known: set[str]) -> list[str]:
    """The tools the signal type points the explorer to (`Signal.focus_tools`)."""
    kind = signal["type"]
    return SIGNALS[kind].focus_tools(signal.get("evidence") or {}, known) if kind in SIGNALS else []


def heuristic_context(target: ExplorationTarget) -> dict:
    """The six context fields read straight off the trajectory and the signal (no LLM, deterministic)."""
    trajectory, signal = target.trajectory or {}, target.signal or {"type": "unknown", "evidence": {}}
    calls = trajectory_calls(trajectory)
    known = {doc["name"] for doc in target.tool_docs()}
    used = list(dict.fromkeys(_tool_name(call) for _, call, _ in calls if _tool_name(call) in known))
    errors = [(call, observation) for _, call, observation in calls if target.is_error(observation)]
    score = trajectory.get("score")
    task_text = " / ".join(line.strip() for line in target.description.splitlines() if line.strip())
    summary = (f"Task: {clip(task_text, 300)} The agent made {len(calls)} call(s)"
               f"{' using ' + ', '.join(used) if used else ''}; outcome: score {score}"
               f"{', checker error ' + str(trajectory.get('error_type')) if trajectory.get('error_type') else ''}.")
    if trajectory.get("success") and not errors:  # the checker's verdict, not a copy of the signals' threshold
        cause = (f"This trajectory succeeded; the {signal['type']} signal comes from its context, "
                 "not from a failure here.")
    else:
        parts = []
        if trajectory.get("error_type"):
            parts.append(f"The checker reported {trajectory['error_type']}: "
                         f"{clip(trajectory.get('error_message'), 200)}.")
        if errors:
            call, observation = errors[0]
            parts.append(f"{len(errors)} call(s) returned errors, e.g. {call} -> {clip(observation, 160)}.")
        cause = " ".join(parts) or "The trajectory failed without an explicit error message."
    focus = list(dict.fromkeys(_signal_tools(signal, known) + used))
    objectives = [f"Exercise {tool} with varied, valid arguments and check the state it leaves." for tool in focus[:4]]
    objectives += [f"Find the preconditions under which {_tool_name(call)} succeeds (it failed as {call})."
                   for call, _ in errors[:3]]
    if not objectives:
        objectives = ["Explore the functions of " + ", ".join(target.involved_classes) + " from the initial state."]
    return {"summary": summary, "failure_cause": cause, "instability_pattern": _instability_pattern(signal),
            "focus_pattern": focus, "exploration_objectives": objectives,
            "do_not_repeat": list(dict.fromkeys(call for call, _ in errors))}


def validate_context(value: dict) -> dict:
    """The six fields of an LLM context, type-checked; LLMOutputError naming the first bad field."""
    out = {}
    for name in CONTEXT_TEXT_FIELDS:
        if not isinstance(value.get(name), str) or not value[name].strip():
            raise LLMOutputError(f"field {name!r} must be a non-empty string")
        out[name] = value[name].strip()
    for name in CONTEXT_LIST_FIELDS:
        items = value.get(name)
        if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
            raise LLMOutputError(f"field {name!r} must be a list of strings")
        out[name] = [item.strip() for item in items if item.strip()]
    return out


def _llm_context(target: ExplorationTarget, config: ExploreConfig, model: ChatModel,
                 cost: Cost) -> tuple[dict, str | None]:
    """(fields, None) from the Fig. 11 prompt, or (heuristic fields, reason) after two failed attempts."""
    prompt = load_prompt("context_summary").format(signal=render_signal(target.signal),
                                                   trajectory_context=render_trajectory(target))
    reasons = []
    for attempt in range(2):  # one retry, sampled so that it can differ from the greedy first reply
        generation_config = GenerationConfig(max_new_tokens=2 * config.max_new_tokens,
                                             temperature=0.0 if attempt == 0 else config.temperature)
        [generation] = cost.generate(model, [[{"role": "user", "content": prompt}]], generation_config)
        if generation.error:
            cost.skip("context_model_error")
            reasons.append(f"model error: {clip(generation.error, 200)}")
            continue
        try:
            return validate_context(extract_json_object(generation.text)), None
        except LLMOutputError as e:
            cost.skip("context_malformed")
            reasons.append(f"malformed context: {e}")
    cost.skip("context_fallback")
    return heuristic_context(target), "; ".join(reasons)


def build_context(target: ExplorationTarget, config: ExploreConfig, model: ChatModel | None = None,
                  cost: Cost | None = None) -> dict:
    """The context/v1 record of a signal-annotated target (Fig. 11, or its heuristic stand-in); its LLM usage is
    also added to `cost` when given."""
    if target.signal is None:
        raise ValueError(f"target {target.task_id} has no signal: a context is built only for guided exploration")
    stage = Cost()
    if config.context_builder == "llm":
        if model is None:
            raise ValueError("context_builder='llm' needs a model")
        fields, error = _llm_context(target, config, model, stage)
        record = _context_record(target, "heuristic" if error else "llm", fields, stage, error)
    else:
        record = _context_record(target, "heuristic", heuristic_context(target), stage, None)
    if cost is not None:
        cost.merge(stage)
    return record
