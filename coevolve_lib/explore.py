"""Signal-guided re-exploration (paper section 3.2): a weakness-signal trajectory becomes a structured
exploration context (Fig. 11), then R independent runs of up to S steps explore the real environment from it
(Figs. 9-10), each step recorded as an (action, observation, run id) triplet.

- Context builders: `heuristic` (offline, deterministic: read straight off the trajectory and the signal's
  evidence) or `llm` (the Fig. 11 prompt; a malformed reply or an API error is retried once, then falls back
  to the heuristic context with `error` set).
- Explorers: `SchemaExplorer` (no LLM: valid calls drawn from the tools' schemas, with argument values taken
  from what the run has observed so far) or `LLMExplorer` (the Fig. 9 prompts with the Fig. 10 guidance).
- Unguided exploration (D_0, and the paper's "random exploration" baseline) has no context: the schema
  explorer draws tools uniformly, the LLM explorer gets the curiosity-style guidance.

Records: context/v1 and triplet/v1 (docs/records.md). Model text is parsed with `safe_calls` and
`llm_json`, never evaluated.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field

from coevolve_lib.config import ExploreConfig
from coevolve_lib.envs import bfcl_backend
from coevolve_lib.envs.bfcl import BFCLEnv, is_error_observation
from coevolve_lib.envs.safe_calls import Call, CallParseError, parse_call, parse_call_list
from coevolve_lib.llm_json import LLMOutputError, extract_json_object
from coevolve_lib.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.prompts import available_prompts, load_prompt

log = logging.getLogger(__name__)

CONTEXT_SCHEMA = "context/v1"
TRIPLET_SCHEMA = "triplet/v1"
CONTEXT_TEXT_FIELDS = ("summary", "failure_cause", "instability_pattern")
CONTEXT_LIST_FIELDS = ("focus_pattern", "exploration_objectives", "do_not_repeat")
NO_VALID_ACTION = "No valid action"
ACTION_FORMAT = ("Exactly one function call of the environment, written as Python with literal arguments only, "
                 "inside <action>...</action> tags, e.g. <action>cd(folder='document')</action>. "
                 "Use only the functions listed in the environment description.")
ACTION_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL)


@dataclass
class ExplorationTarget:
    """What to explore from: an environment start state, the source task's text, and the signal if any."""

    task_id: str
    data_version: str
    initial_config: dict
    involved_classes: list[str]
    description: str
    """The source task's query text (user turns joined), for the prompts and the context."""
    signal: dict | None = None
    """The signal/v1 record; None for D_0 / unguided exploration."""
    trajectory: dict | None = None
    """The rollout/v1 record that carried the signal."""

    @classmethod
    def from_bfcl_task(cls, task, signal: dict | None = None, trajectory: dict | None = None) -> "ExplorationTarget":
        text = "\n".join(m["content"] for turn in task.turns for m in turn if m.get("role") == "user")
        return cls(task.id, task.data_version, task.initial_config, list(task.involved_classes), text,
                   signal, trajectory)

    @classmethod
    def from_pool_task(cls, task_record: dict, signal: dict | None = None,
                       trajectory: dict | None = None) -> "ExplorationTarget":
        """From a task/v1 record of the task pool."""
        return cls(task_record["task_id"], task_record["data_version"], task_record["initial_config"],
                   list(task_record["involved_classes"]), task_record["query"], signal, trajectory)

    @property
    def signal_id(self) -> str | None:
        return self.signal["signal_id"] if self.signal else None

    @property
    def signal_type(self) -> str | None:
        return self.signal["type"] if self.signal else None

    def tool_docs(self) -> list[dict]:
        """Func docs of the involved classes; a later class wins a name clash, as in the env."""
        by_name = {doc["name"]: doc for name in self.involved_classes
                   for doc in bfcl_backend.func_docs(self.data_version, name)}
        return list(by_name.values())

    def new_env(self) -> BFCLEnv:
        return BFCLEnv.from_config(self.initial_config, self.involved_classes, self.data_version)


@dataclass
class Cost:
    """LLM usage of one stage, and the steps or outputs it had to skip, by reason."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    skipped: Counter = field(default_factory=Counter)

    def generate(self, model: ChatModel, conversations: list[list[dict]], config: GenerationConfig) -> list[Generation]:
        """model.generate, with its calls, tokens and wall time added here."""
        start = time.perf_counter()
        generations = model.generate(conversations, None, config)
        self.seconds += time.perf_counter() - start  # wall time: a batch's items share one clock
        self.calls += len(generations)
        self.prompt_tokens += sum(g.prompt_tokens for g in generations)
        self.completion_tokens += sum(g.completion_tokens for g in generations)
        return generations

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def merge(self, other: "Cost") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.seconds += other.seconds
        self.skipped.update(other.skipped)

    def as_dict(self, skipped: bool = True) -> dict:
        out = {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
               "completion_tokens": self.completion_tokens, "seconds": round(self.seconds, 4)}
        return {**out, "skipped": dict(self.skipped)} if skipped else out


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


def _clip(text, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


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
        lines.append(f"- [user turn {turn}] {call} -> {_clip(observation, observation_chars)}")
    if len(calls) > max_calls:
        lines.append(f"- ... {len(calls) - max_calls} more calls not shown")
    if not calls:
        lines.append("- (no calls were executed)")
    rejected = [r for step in trajectory.get("steps", []) for r in step.get("rejected", [])]
    if rejected:
        lines.append(f"Rejected (unparsable) calls: {len(rejected)}, e.g. {_clip(rejected[0], observation_chars)}")
    if trajectory:
        lines += ["", f"Outcome: score {trajectory.get('score')}, success {trajectory.get('success')}, "
                      f"per-turn validity {trajectory.get('turn_valid')}, terminated {trajectory.get('terminated')}",
                  f"Checker error: {trajectory.get('error_type')}: "
                  f"{_clip(trajectory.get('error_message'), observation_chars)}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# Context builders (context/v1)


def _context_record(target: ExplorationTarget, builder: str, fields: dict, cost: Cost, error: str | None) -> dict:
    return {"schema": CONTEXT_SCHEMA, "context_id": f"ctx/{target.signal_id}", "signal_id": target.signal_id,
            "signal_type": target.signal_type, "task_id": target.task_id, "builder": builder,
            **{name: fields[name] for name in CONTEXT_TEXT_FIELDS + CONTEXT_LIST_FIELDS},
            "cost": cost.as_dict(skipped=False), "error": error}


def _instability_pattern(signal: dict) -> str:
    evidence, kind = signal.get("evidence") or {}, signal["type"]
    if kind == "forgetting" and "window" in evidence:
        return (f"Solved within the recent window (scores {evidence['window']}) but failed now "
                f"(score {evidence.get('score')}): a skill the policy had is being lost.")
    if kind == "boundary" and "group_scores" in evidence:
        scores = evidence["group_scores"]
        wins = sum(s >= 0.5 for s in scores)  # solved, as the signals count it
        return (f"Under one policy, {wins} of {len(scores)} sampled rollouts succeeded and "
                f"{len(scores) - wins} failed (scores {scores}): the outcome sits on the success boundary.")
    if kind == "rare" and "patterns" in evidence:
        seen = ", ".join(f"{p['pattern']} ({p['count']} of {evidence.get('total')})" for p in evidence["patterns"])
        return f"Action patterns rarely seen in training: {seen}; the policy has little experience with them."
    return f"{kind} signal with evidence {json.dumps(evidence, default=str)}."


def _signal_tools(signal: dict, known: set[str]) -> list[str]:
    """Tool names named in a rare signal's patterns ("cd>mv" -> cd, mv)."""
    if signal["type"] != "rare":
        return []
    text = json.dumps((signal.get("evidence") or {}).get("patterns", []))
    return list(dict.fromkeys(name for name in re.findall(r"[A-Za-z_]\w*", text) if name in known))


def heuristic_context(target: ExplorationTarget) -> dict:
    """The six context fields read straight off the trajectory and the signal (no LLM, deterministic)."""
    trajectory, signal = target.trajectory or {}, target.signal or {"type": "unknown", "evidence": {}}
    calls = trajectory_calls(trajectory)
    known = {doc["name"] for doc in target.tool_docs()}
    used = list(dict.fromkeys(_tool_name(call) for _, call, _ in calls if _tool_name(call) in known))
    errors = [(call, observation) for _, call, observation in calls if is_error_observation(observation)]
    score = trajectory.get("score")
    task_text = " / ".join(line.strip() for line in target.description.splitlines() if line.strip())
    summary = (f"Task: {_clip(task_text, 300)} The agent made {len(calls)} call(s)"
               f"{' using ' + ', '.join(used) if used else ''}; outcome: score {score}"
               f"{', checker error ' + str(trajectory.get('error_type')) if trajectory.get('error_type') else ''}.")
    if score is not None and score >= 0.5 and not errors:
        cause = (f"This trajectory succeeded; the {signal['type']} signal comes from its context, "
                 "not from a failure here.")
    else:
        parts = []
        if trajectory.get("error_type"):
            parts.append(f"The checker reported {trajectory['error_type']}: "
                         f"{_clip(trajectory.get('error_message'), 200)}.")
        if errors:
            call, observation = errors[0]
            parts.append(f"{len(errors)} call(s) returned errors, e.g. {call} -> {_clip(observation, 160)}.")
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
            reasons.append(f"model error: {_clip(generation.error, 200)}")
            continue
        try:
            return validate_context(extract_json_object(generation.text)), None
        except LLMOutputError as e:
            cost.skip("context_malformed")
            reasons.append(f"malformed context: {e}")
    cost.skip("context_fallback")
    return heuristic_context(target), "; ".join(reasons)


def _build_context(target: ExplorationTarget, config: ExploreConfig, model: ChatModel | None, cost: Cost) -> dict:
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
    cost.merge(stage)
    return record


def build_context(target: ExplorationTarget, config: ExploreConfig, model: ChatModel | None = None) -> dict:
    """The context/v1 record of a signal-annotated target (Fig. 11, or its heuristic stand-in)."""
    return _build_context(target, config, model, Cost())


# ---------------------------------------------------------------------------------------------------------
# Explorers (triplet/v1)


def run_ids(target: ExplorationTarget, context: dict | None, runs: int) -> list[str]:
    prefix = context["context_id"] if context else f"unguided/{target.task_id}"
    return [f"{prefix}/run{k}" for k in range(runs)]


def _triplet(target: ExplorationTarget, context: dict | None, run_id: str, step: int, action: str,
             observation: str, valid: bool, explorer: str) -> dict:
    return {"schema": TRIPLET_SCHEMA, "run_id": run_id, "step": step, "action": action, "observation": observation,
            "valid": valid, "task_id": target.task_id,
            "signal_id": context["signal_id"] if context else None,
            "signal_type": context["signal_type"] if context else None, "explorer": explorer}


def _canonical(call_text: str) -> str:
    try:
        return parse_call(call_text).to_source()
    except CallParseError:
        return call_text.strip()


class Explorer(ABC):
    """Turns a target (and its context, None = unguided) into the triplets of R runs."""

    name: str

    def __init__(self):
        self.cost = Cost()
        """LLM usage and skips of every `explore` call so far."""

    @abstractmethod
    def explore(self, target: ExplorationTarget, context: dict | None, config: ExploreConfig) -> list[dict]:
        """triplet/v1 records of all R runs, run by run and step by step."""


# --- schema explorer: argument values -----------------------------------------------------------------------

_STOPWORDS = {"get", "set", "to", "of", "the", "a", "an", "by", "for", "from", "is", "in", "on", "num", "current",
              "new", "all", "list", "and", "or", "with", "at", "this", "that", "be", "it"}
_SYNONYMS = {"folder": "dir", "directory": "dir", "stock": "symbol", "username": "user", "receiver": "user",
             "mentioned": "user", "mention": "user", "follow": "user", "following": "user", "contact": "user",
             "source": "name"}
_FILE_LIKE = re.compile(r"^[\w\-. ]{1,60}\.[A-Za-z][A-Za-z0-9]{0,4}$")
_CREATORS = ("mkdir", "touch", "create", "register", "add", "post", "echo")
_WORDS = ("alpha", "annual", "archive", "audit", "backup", "beta", "budget", "build", "campaign", "chapter", "client",
          "config", "contract", "course", "daily", "data", "design", "draft", "event", "expense", "experiment", "field",
          "final", "garden", "grant", "guide", "harbor", "index", "invoice", "journal", "lab", "launch", "lecture",
          "ledger", "lesson", "market", "meeting", "memo", "metrics", "model", "monthly", "notes", "orbit", "outline",
          "paper", "plan", "poster", "project", "proposal", "quarter", "recipe", "release", "report", "research",
          "review", "roadmap", "sales", "sample", "schedule", "script", "season", "sketch", "spring", "study",
          "summary", "survey", "team", "test", "thesis", "travel", "trial", "update", "vendor", "weekly", "winter",
          "workshop")
"""Words that new file, folder and item names and new text are made of (a made-up value must be copied from the query:
names the policy could guess from the environment would not test that)."""
_EXTENSIONS = ("txt", "md", "csv", "json", "log", "pdf")


def name_tags(name: str) -> frozenset[str]:
    """Semantic tokens of a field or parameter name: file_name -> {file, name}, tweetIds -> {tweet, id}."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
    tags = set()
    for word in re.split(r"[^a-z0-9]+", words):
        word = word.rstrip("0123456789")  # file_name1 -> file, name
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
            word = word[:-1]  # tweets -> tweet, stocks -> stock
        if word and not word.isdigit() and word not in _STOPWORDS:
            tags.add(_SYNONYMS.get(word, word))
    return frozenset(tags)


def _is_field_key(key: str) -> bool:
    """snake_case / camelCase keys are field names; '12345', 'AAPL', 'Alice', 'notes.txt' are data."""
    return bool(re.fullmatch(r"[a-z][A-Za-z0-9_]*", key)) and not _FILE_LIKE.match(key)


class ValuePool:
    """Argument values known to one run, each with the tags of where it was seen and a weight.

    Values from the task (initial_config, quoted names in its text) weigh GIVEN; each observation weighs twice
    the one before, so the latest state (the folder just listed, the id just created) dominates the draws."""

    GIVEN = 1.0
    DEEP = 0.2
    """Weight of names that may not exist where the run is: file-tree names below the starting folder, and
    names quoted in the task text (often ones the task asks to create)."""

    def __init__(self):
        self.values: dict[tuple, tuple[frozenset, float]] = {}  # (type name, value) -> (tags, weight)
        self.observations = 0

    def add(self, value, tags: frozenset, weight: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return
        if isinstance(value, str):
            value = value.strip()
            if not value or len(value) > 80 or "\n" in value:
                return
            if "/" in value.strip("/") and " " not in value:  # a path: its last part is a name too
                self.add(value.rstrip("/").rsplit("/", 1)[-1], tags, weight)
            if value.count(" ") >= 3:  # a sentence is text to reuse, never a name or an id
                tags = frozenset({"text", "content", "message"})
            elif _FILE_LIKE.match(value):
                tags = (tags - {"dir"}) | {"file", "name"}
        key = (type(value).__name__, value)
        old_tags, old_weight = self.values.get(key, (frozenset(), 0.0))
        self.values[key] = (old_tags | tags, max(old_weight, weight))

    def harvest(self, obj, tags: frozenset, weight: float, depth: int = 0) -> None:
        """Walk a JSON-like value; values are tagged by their field names, dict keys that are data become values."""
        if depth > 12:
            return
        if isinstance(obj, dict):
            for key, value in obj.items():
                key = str(key)
                if isinstance(value, dict) and value.get("type") in ("file", "directory"):  # a file-tree node
                    kind = {"file", "name"} if value["type"] == "file" else {"dir", "name"}
                    # The root is the starting folder and its children are its entries; deeper names exist but
                    # are not reachable from there as they are.
                    is_root = "root" in tags
                    self.add(key, frozenset(kind), self.DEEP if is_root else weight)
                    inner = weight if is_root else min(weight, self.DEEP)
                    self.harvest(value.get("contents", {}), frozenset({"dir"}), inner, depth + 1)
                elif _is_field_key(key):
                    self.harvest(value, name_tags(key) | (tags - {"name"}), weight, depth + 1)
                else:  # a data key ("12345", "AAPL", "Alice"): a value of its container's kind
                    if re.fullmatch(r"[\w\-.@# ]+", key):  # not "MA(5)"-style labels
                        self.add(int(key) if key.isdigit() and len(key) < 10 else key, tags | {"id", "name"}, weight)
                    self.harvest(value, tags, weight, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for item in obj[:50]:
                self.harvest(item, tags, weight, depth + 1)
        else:
            self.add(obj, tags, weight)

    def penalize(self, call: Call) -> None:
        """A call that failed: its argument values are probably wrong here (a missing file, an unknown id)."""
        for _, value in call.kwargs:
            key = (type(value).__name__, value) if isinstance(value, (str, int, float)) else None
            if key in self.values:
                tags, weight = self.values[key]
                self.values[key] = (tags, weight * 0.1)

    def harvest_observation(self, function: str, observation: str) -> None:
        if is_error_observation(observation):
            return
        self.observations += 1
        weight = 2.0 ** min(self.observations, 30)
        tags = name_tags(function)
        try:
            value = json.loads(observation)
        except ValueError:
            value = None
        if isinstance(value, (dict, list)):
            self.harvest(value, tags, weight)
            return
        for quoted in re.findall(r"'([^'\n]{1,60})'|\"([^\"\n]{1,60})\"", observation):
            self.add(quoted[0] or quoted[1], tags | {"name"}, weight)

    def candidates(self, param_tags: frozenset, kind: str) -> list[tuple[object, float]]:
        """(value converted to `kind`, weight) for values sharing tags with the parameter, best matches only."""
        scored = []
        for (_, value), (tags, weight) in self.values.items():
            converted = _convert(value, kind)
            overlap = len(param_tags & tags)
            if converted is None or overlap == 0:
                continue
            if "id" in param_tags and isinstance(value, str) and any(ch.isdigit() for ch in value):
                overlap += 0.5  # an id parameter prefers id-looking values ("USR002" over "Alice")
            scored.append((converted, overlap, weight))
        if not scored:
            return []
        best = max(s for _, s, _ in scored)
        return [(value, weight) for value, s, weight in scored if s >= best - 0.5]


def _convert(value, kind: str):
    """`value` as a JSON-schema `kind`, or None when it does not fit."""
    if kind == "string":
        return str(value) if not isinstance(value, float) else None
    if kind == "integer":
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, str) and value.isdigit() and len(value) < 10 else None
    if kind in ("float", "number"):
        return float(value) if isinstance(value, (int, float)) else None
    return None


def enum_values(schema: dict) -> list:
    """Allowed values from `enum`, or from the description ("[Enum]: [...]", "Options are: a, b", "(Buy/Sell)")."""
    if schema.get("enum"):
        return list(schema["enum"])
    text = schema.get("description", "")
    match = re.search(r"\[Enum\]:\s*(\[[^\]]*\])", text)
    if match:
        try:
            return [v for v in json.loads(match.group(1)) if isinstance(v, str)]
        except ValueError:
            pass
    match = re.search(r"(?:\[Enum\]|[Oo]ptions(?: are)?):\s*([^.\n]+)", text)
    if match:
        return [v.strip() for v in match.group(1).split(",") if v.strip()]
    match = re.search(r"\((\w+)/(\w+)\)|\((\w+) or (\w+)\)", text)
    if match:
        return [v for v in match.groups() if v]
    return re.findall(r"'(\w+)' for", text)


class ArgumentSampler:
    """Draws one value per parameter: an enum member, a value the run has seen, or a small typed default."""

    def __init__(self, rng: random.Random, pool: ValuePool, description: str):
        self.rng, self.pool = rng, pool
        self.words = [w for w in re.findall(r"[A-Za-z]{4,}", description) if w.lower() not in _STOPWORDS] or ["test"]

    def call(self, doc: dict) -> Call:
        parameters = (doc.get("parameters") or {}).get("properties", {})
        required = set((doc.get("parameters") or {}).get("required", []))
        creates = doc["name"].lower().startswith(_CREATORS)
        kwargs = []
        for name, schema in parameters.items():
            if name in required or self.rng.random() < 0.3:  # optional ones mostly keep their defaults
                kwargs.append((name, self.value(name, schema, creates)))
        return Call(doc["name"], (), tuple(kwargs))

    def value(self, name: str, schema: dict, creates: bool = False):
        kind = _kind(schema)
        options = enum_values(schema)
        tags = name_tags(name)
        if kind == "array":
            item = schema.get("items") or {"type": "string"}
            if options:
                return self.rng.sample(options, k=self.rng.randint(1, min(2, len(options))))
            longest = 2 if item.get("type") == "string" else 3
            return [self.value(name, item) for _ in range(self.rng.randint(1, longest))]
        if kind == "dict":
            keys = re.findall(r"-\s*(\w+)\s*\((str|int|float)\)", schema.get("description", ""))
            return {key: self.value(key, {"type": {"str": "string"}.get(t, t)}) for key, t in keys[:1]}
        if kind == "boolean":
            return self.rng.random() < 0.5
        if options:
            return self.rng.choice(options)
        # New names where something is created or renamed; elsewhere a made-up name would only miss.
        fresh = 0.7 if creates else 0.5 if "destination" in tags else 0.0
        if kind == "string" and tags & {"file", "dir", "name", "destination"} and self.rng.random() < fresh:
            return self.fresh_name(tags)
        found = self.pool.candidates(tags, kind)
        if found:
            values, weights = zip(*found)
            return self.rng.choices(values, weights=weights)[0]
        return self.default(tags, kind)

    def fresh_name(self, tags: frozenset) -> str:
        """A new name made of two random words: a file name with an extension, a folder or an item name."""
        stem = "_".join(self.rng.sample(_WORDS, 2))
        if "file" in tags:
            return f"{stem}.{self.rng.choice(_EXTENSIONS)}"
        return stem

    def fresh_text(self) -> str:
        """A short new text of three random words, e.g. "Budget review trial"."""
        return " ".join(self.rng.sample(_WORDS, 3)).capitalize()

    def default(self, tags: frozenset, kind: str):
        if kind == "integer":
            return self.rng.choice([1, 2, 3, 5, 10])
        if kind in ("float", "number"):
            return self.rng.choice([1.0, 2.5, 10.0, 50.0, 100.0])
        if "date" in tags:
            return self.rng.choice(["2024-11-15", "2024-12-01"])
        if "time" in tags:
            return self.rng.choice(["10:30 AM", "03:45 PM"])
        if tags & {"file", "dir", "name", "destination"}:
            return self.fresh_name(tags)
        if tags & {"content", "message", "comment", "description", "resolution", "title", "text"}:
            return self.fresh_text()
        return self.rng.choice(self.words)


def _kind(schema: dict) -> str:
    """Gorilla type names folded onto the few kinds the sampler knows."""
    kind = schema.get("type", "string")
    return {"list": "array", "tuple": "array", "object": "dict", "bool": "boolean", "int": "integer",
            "double": "float"}.get(kind, kind)


def _stable_seed(*parts) -> int:
    # Python's hash() of a str changes per process; sha256 keeps runs reproducible across processes.
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big")


class SchemaExplorer(Explorer):
    """Valid calls drawn from the tool schemas, with arguments from what the run has observed.

    Guided: a `focus_ratio` share of steps draws its tool from the context's focus_pattern, and no call in
    do_not_repeat is ever made. Unguided: tools are drawn uniformly (the "random exploration" baseline).
    Every (target, run) has its own seeded RNG, so the same inputs give the same triplets."""

    name = "schema"
    MAX_DRAWS = 20
    """Draws per step before a run gives up finding a call it has not made (and that is allowed)."""
    LOGIN_ERROR = re.compile(r"log(?:ged)?[ -]?in|authenticat", re.IGNORECASE)

    def explore(self, target, context, config):
        docs = target.tool_docs()
        focus = [doc for doc in docs if doc["name"] in _focus_tools(context)]
        banned = {_canonical(c) for c in (context or {}).get("do_not_repeat", [])}
        login = [doc for doc in docs if re.search(r"login|authenticate", doc["name"])]
        triplets = []
        for k, run_id in enumerate(run_ids(target, context, config.runs)):
            rng = random.Random(_stable_seed(config.seed, target.task_id, target.signal_id, k))
            pool = ValuePool()
            for state in target.initial_config.values():  # keyed by class name, which is no argument value
                pool.harvest(state, frozenset(), ValuePool.GIVEN)
            for quoted in re.findall(r"'([^'\n]{1,60})'", target.description):  # often names still to be made
                pool.add(quoted, frozenset({"name"}), ValuePool.DEEP)
            sampler = ArgumentSampler(rng, pool, target.description)
            env, made, observation = target.new_env(), set(), ""
            for step in range(config.calls_per_run):
                # An error that asks for a login is answered by a login call: the state says what is missing.
                prefer = login if is_error_observation(observation) and self.LOGIN_ERROR.search(observation) else []
                call = self._draw(rng, sampler, docs, focus, config.focus_ratio, banned | made, prefer)
                if call is None:
                    self.cost.skip("no_new_call")
                    break
                source = call.to_source()
                made.add(source)
                [observation] = env.execute([call])
                if is_error_observation(observation):
                    pool.penalize(call)
                pool.harvest_observation(call.name, observation)
                triplets.append(_triplet(target, context, run_id, step, source, observation,
                                         not is_error_observation(observation), self.name))
            env.close()
        return triplets

    def _draw(self, rng, sampler, docs, focus, focus_ratio, avoid, prefer) -> Call | None:
        for attempt in range(self.MAX_DRAWS):
            if prefer and attempt < 3:
                doc = rng.choice(prefer)
            else:
                doc = rng.choice(focus if focus and rng.random() < focus_ratio else docs)
            call = sampler.call(doc)
            if call.to_source() not in avoid:
                return call
        return None


def _focus_tools(context: dict | None) -> set[str]:
    """Identifiers named in focus_pattern entries (plain names, call strings or "cd>mv" patterns)."""
    return {name for entry in (context or {}).get("focus_pattern", []) for name in re.findall(r"[A-Za-z_]\w*", entry)}


# --- LLM explorer ---------------------------------------------------------------------------------------------


def describe_environment(target: ExplorationTarget) -> str:
    """The `{initial_obs}` of Fig. 9: the classes, each function's signature and one-line description, the task."""
    lines = [f"Environment classes: {', '.join(target.involved_classes)}.", "Available functions:"]
    for doc in target.tool_docs():
        params = (doc.get("parameters") or {}).get("properties", {})
        required = set((doc.get("parameters") or {}).get("required", []))
        signature = ", ".join(f"{p}: {s.get('type', 'string')}{'' if p in required else ' (optional)'}"
                              for p, s in params.items())
        text = doc.get("description", "").split("Tool description:")[-1].strip()
        lines.append(f"- {doc['name']}({signature}): {_clip(text.split('. ')[0].rstrip('.'), 160)}.")
    lines += ["", "The environment starts in the state of this task:", target.description]
    return "\n".join(lines)


def render_history(steps: list[tuple[str, str]], observation_chars: int = 300, last: int = 10) -> str:
    if not steps:
        return "(no actions yet: this is the first step)"
    start = max(0, len(steps) - last)
    lines = [f"(first {start} steps omitted)"] if start else []
    lines += [f"Step {i}: {action} -> {_clip(observation, observation_chars)}"
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


def parse_action(text: str, allowed_names) -> tuple[Call | None, str, str]:
    """(call or None, the action text, the rejection reason) of one explorer reply; the last <action> tag wins."""
    tags = ACTION_TAG.findall(text or "")
    if not tags:
        return None, _clip((text or "").strip(), 500), "no <action>...</action> tag in the reply"
    action = tags[-1].strip().strip("`").strip()
    calls, errors = parse_call_list(action, allowed_names)
    if errors or len(calls) != 1:
        return None, _clip(action, 500), errors[0] if errors else f"expected one call, got {len(calls)}"
    return calls[0], action, ""


class LLMExplorer(Explorer):
    """The Fig. 9 prompts with the Fig. 10 guidance; the R runs step together, one batched model call per step."""

    name = "llm"

    def __init__(self, model: ChatModel):
        super().__init__()
        self.model = model

    def explore(self, target, context, config):
        system = load_prompt("explore_system").format(action_format=ACTION_FORMAT)
        block, initial_obs = guidance(context), describe_environment(target)
        generation = GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)
        runs = [{"index": k, "run_id": run_id, "env": target.new_env(), "steps": []}
                for k, run_id in enumerate(run_ids(target, context, config.runs))]
        triplets = []
        for step in range(config.calls_per_run):
            live = [run for run in runs if run["env"] is not None]
            if not live:
                break
            conversations = [[{"role": "system", "content": system},
                              {"role": "user", "content": load_prompt("explore_user").format(
                                  exploration_guidance=block, initial_obs=initial_obs,
                                  history_text=render_history(run["steps"]))}] for run in live]
            for run, reply in zip(live, self.cost.generate(self.model, conversations, generation)):
                if reply.error:  # the endpoint is failing even after its retries: end this run
                    self.cost.skip("model_error")
                    run["env"].close()
                    run["env"] = None
                    continue
                call, action, reason = parse_action(reply.text, run["env"].method_names)
                if call is None:
                    self.cost.skip("no_valid_action")
                    observation, valid = f"{NO_VALID_ACTION}: {reason}", False
                else:
                    [observation] = run["env"].execute([call])
                    action, valid = call.to_source(), not is_error_observation(observation)
                run["steps"].append((action, observation))
                triplets.append((run["index"], _triplet(target, context, run["run_id"], step, action, observation,
                                                        valid, self.name)))
        for run in runs:
            if run["env"] is not None:
                run["env"].close()
        return [t for _, t in sorted(triplets, key=lambda item: (item[0], item[1]["step"]))]


def make_explorer(config: ExploreConfig, model: ChatModel | None = None) -> Explorer:
    if config.explorer == "llm":
        if model is None:
            raise ValueError("explorer='llm' needs a model")
        return LLMExplorer(model)
    return SchemaExplorer()


def explore(target: ExplorationTarget, config: ExploreConfig,
            model: ChatModel | None = None) -> tuple[dict | None, list[dict], dict]:
    """(context/v1 or None when unguided, triplet/v1 records of all runs, cost of the whole stage).

    cost = {calls, prompt_tokens, completion_tokens, seconds, skipped: {reason: count}}, over the context
    builder's and the explorer's LLM calls."""
    cost = Cost()
    guided = config.guided and target.signal is not None
    context = _build_context(target, config, model, cost) if guided else None
    explorer = make_explorer(config, model)
    triplets = explorer.explore(target, context, config)
    cost.merge(explorer.cost)
    return context, triplets, cost.as_dict()
