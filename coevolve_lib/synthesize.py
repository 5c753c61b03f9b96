"""Task abstraction (Fig. 12) and validation by execution (Fig. 13): exploration triplets -> validated pool tasks.

    triplet/v1 --group_triplets--> groups --abstract--> taskspec/v1 --validate--> verdict/v1 --to_pool_task--> task/v1

`abstract` turns the triplets of one (task, signal) group into task specifications: an intent, a query, an action
sequence of >= `min_steps` canonical calls and a completion criterion. Two abstractions:
- "deterministic" (offline, no model): per exploration run, a window of consecutive successful calls that replays
  cleanly from the task's initial state, with a query written from each function's own doc and literal arguments;
- "llm": the Fig. 12 prompt; its `<task>` blocks are parsed with `safe_calls` only (never eval/exec).

`validate` executes a spec's action sequence in fresh environments (the kit replays the calls itself instead of
asking an LLM agent to execute them, so validation is exact and free) and returns a verdict: accepted with
"objective_met" or "positive_reward", or rejected with every reason that applies. An optional LLM judge (Fig. 13)
then checks that the execution answers the query.

A pool task becomes a one-turn `BFCLTask` whose ground truth is its reference actions, so the RL reward of a
synthetic task is the BFCL checker's verdict on the agent's own executions (`synthetic_reward`); `judge_reward` is
the optional LLM-judge alternative (AgentEvolver's way, see paper notes 2.6).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter

from coevolve_lib.config import SynthesisConfig
from coevolve_lib.envs import bfcl_backend
from coevolve_lib.envs.bfcl import BFCLEnv, BFCLTask, grade, is_error_observation
from coevolve_lib.envs.safe_calls import CallParseError, parse_call, parse_call_list
from coevolve_lib.models import ChatModel, GenerationConfig
from coevolve_lib.prompts import load_prompt

COMPLETION_CRITERION = "the environment state and the outputs equal those of the reference actions"
MODALITY_HINT = "Tool call JSONs (name + arguments)"
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

MAX_OBSERVATION_CHARS = 300
"""Observations are cut to this length in prompts (file contents and listings can be long)."""
MAX_PROMPT_RECORD_CHARS = 12_000
"""Rendered triplets beyond this many characters are left out of the abstraction prompt (the rest is noted)."""
HISTORY_ACTIONS = 3
"""Previous actions of the run shown as the `history` of each triplet."""
EMPTY_OUTPUTS = {"", "None", "null", "{}", "[]", "true", "false", "True", "False"}
"""Outputs that tell the user nothing (BFCL setters return None)."""


# --------------------------------------------------------------------------------------------------- helpers

def content_id(initial_config: dict, query: str, actions: list[str]) -> str:
    """The content hash that names a spec and its pool task: equal content, equal id."""
    blob = json.dumps([initial_config, query, list(actions)], sort_keys=True, ensure_ascii=False, default=str)
    return "syn-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def _informative(observation: str) -> bool:
    """A successful output that says something: not None/empty, not a JSON object of empty values only."""
    if is_error_observation(observation) or observation.strip() in EMPTY_OUTPUTS:
        return False
    try:
        value = json.loads(observation)
    except (ValueError, RecursionError):
        return True
    return not (isinstance(value, dict) and all(v in ("", None, [], {}) for v in value.values()))


def _env(source: dict) -> BFCLEnv:
    return BFCLEnv.from_config(source["initial_config"], source["involved_classes"], source.get("data_version", "v3"))


def _replay(source: dict, actions: list[str]) -> tuple[dict, list[str], list[bool], dict]:
    """Execute `actions` one per step in a fresh env: (initial state, observations, per-step state change, final)."""
    env = _env(source)
    initial = state = env.state()
    observations, changed = [], []
    for action in actions:
        observations += env.execute(action)
        after = env.state()
        changed.append(after != state)
        state = after
    env.close()
    return initial, observations, changed, state


def _natural_key(run_id: str) -> tuple:
    # "…/run10" after "…/run9": compare the digit runs as numbers.
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(run_id)))


def _usage(cost: dict, generation) -> None:
    cost["calls"] += 1
    cost["prompt_tokens"] += generation.prompt_tokens
    cost["completion_tokens"] += generation.completion_tokens


def _ask(model: ChatModel, prompt: str, config: SynthesisConfig):
    generation_config = GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)
    return model.generate([[{"role": "user", "content": prompt}]], config=generation_config)[0]


def _render_prompt(name: str, **values) -> str:
    return load_prompt(name).format(**values)


def _cut(text: str, limit: int = MAX_OBSERVATION_CHARS) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


# ---------------------------------------------------------------------------------------------- abstraction

def group_triplets(triplets: list[dict]) -> dict[tuple, list[dict]]:
    """(task_id, signal_id) -> the group's triplets ordered by run (run10 after run9) and step.
    D_0 triplets have signal_id None, so unguided runs of a task form one group."""
    groups: dict[tuple, list[dict]] = {}
    for triplet in triplets:
        groups.setdefault((triplet["task_id"], triplet.get("signal_id")), []).append(triplet)
    return {key: sorted(group, key=lambda t: (_natural_key(t["run_id"]), t["step"])) for key, group in groups.items()}


def _runs(triplets: list[dict]) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for triplet in sorted(triplets, key=lambda t: (_natural_key(t["run_id"]), t["step"])):
        runs.setdefault(triplet["run_id"], []).append(triplet)
    return runs


def abstract(group_key: tuple, triplets: list[dict], source: dict, config: SynthesisConfig,
             model: ChatModel | None = None) -> tuple[list[dict], dict]:
    """Task specs (taskspec/v1) from one group of triplets, and what it cost:
    {calls, prompt_tokens, completion_tokens, seconds, skipped: {reason: count}}. Specs are unique by content."""
    start = time.perf_counter()
    cost = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0, "skipped": Counter()}
    if config.abstraction == "deterministic":
        drafts = _abstract_deterministic(triplets, source, config, cost["skipped"])
    elif config.abstraction == "llm":
        if model is None:
            raise ValueError("abstraction='llm' needs a model")
        drafts = _abstract_llm(triplets, source, config, model, cost)
    else:
        raise ValueError(f"unknown abstraction {config.abstraction!r}; choose deterministic or llm")
    specs, seen = [], set()
    for draft in drafts:
        spec = _spec(draft, source, config.abstraction)
        if spec["spec_id"] in seen:
            cost["skipped"]["duplicate"] += 1
            continue
        seen.add(spec["spec_id"])
        specs.append(spec)
    cost["seconds"] = time.perf_counter() - start
    cost["skipped"] = dict(cost["skipped"])
    return specs, cost


def _spec(draft: dict, source: dict, abstraction: str) -> dict:
    return {
        "schema": "taskspec/v1",
        "spec_id": content_id(source["initial_config"], draft["query"], draft["action_sequence"]),
        "intent": draft["intent"],
        "query": draft["query"],
        "action_sequence": draft["action_sequence"],
        "completion_criterion": draft["completion_criterion"],
        "initial_config": source["initial_config"],
        "involved_classes": list(source["involved_classes"]),
        "data_version": source.get("data_version", "v3"),
        "source": {"task_id": source["task_id"], "signal_id": source.get("signal_id"),
                   "signal_type": source.get("signal_type"), "context_id": source.get("context_id"),
                   "run_ids": draft["run_ids"]},
        "abstraction": abstraction,
    }


def _docs_by_name(source: dict) -> dict[str, tuple[str, dict]]:
    """Function name -> (class, doc); a later class wins a name clash, as in the executor."""
    version = source.get("data_version", "v3")
    return {doc["name"]: (name, doc) for name in source["involved_classes"]
            for doc in bfcl_backend.func_docs(version, name)}


def _abstract_deterministic(triplets, source, config, skipped: Counter) -> list[dict]:
    docs = _docs_by_name(source)
    drafts = []
    for run_id, run in _runs(triplets).items():
        actions = []
        for triplet in run:
            if not triplet.get("valid"):
                continue
            try:
                actions.append(parse_call(triplet["action"], docs).to_source())
            except CallParseError:
                skipped["unparsable_action"] += 1
        # Replay the run from the initial state: calls that returned an error without changing anything are
        # pure no-ops (failed probes), so leaving them out changes neither the state nor later calls.
        _, observations, changed, _ = _replay(source, actions)
        actions = [a for a, o, c in zip(actions, observations, changed) if c or not is_error_observation(o)]
        if len(actions) < config.min_calls:
            skipped["too_few_actions"] += 1
            continue
        window = _best_window(source, actions, config)
        if window is None:
            skipped["no_clean_window"] += 1
            continue
        drafts.append({"intent": _intent(window, docs), "query": _query(window, docs, config.description_words),
                       "action_sequence": window, "completion_criterion": COMPLETION_CRITERION,
                       "run_ids": [run_id]})
    return drafts


def _best_window(source: dict, actions: list[str], config: SynthesisConfig) -> list[str] | None:
    """The window of min_calls..max_calls consecutive actions that, replayed from the initial state, fails no call
    and scores best: state-changing steps plus reads of values earlier steps wrote, then length, then earliness."""
    best, best_key = None, None
    for length in range(min(config.max_calls, len(actions)), config.min_calls - 1, -1):
        for first in range(len(actions) - length + 1):
            window = actions[first:first + length]
            _, observations, changed, _ = _replay(source, window)
            if any(is_error_observation(o) for o in observations):
                continue  # e.g. a `cd` left out by the window makes a later call fail
            written: list[str] = []
            score = 0
            for action, observation, change in zip(window, observations, changed):
                if change:
                    score += 1
                elif any(value in observation for value in written):
                    score += 1  # reads back something this window produced (ls after mkdir, cat after echo)
                written += [v for v in _literal_strings(action) if len(v) >= 2]
            key = (score, length, -first)
            if best_key is None or key > best_key:
                best, best_key = window, key
    return best


def _literal_strings(action: str) -> list[str]:
    call = parse_call(action)
    return [v for v in [*call.args, *call.kwargs_dict.values()] if isinstance(v, str)]


def _arguments(action: str, docs: dict) -> list[tuple[str, object]]:
    """(parameter name, value) pairs; positional values get their names from the function's doc."""
    call = parse_call(action)
    names = list((docs.get(call.name, (None, {}))[1].get("parameters") or {}).get("properties", {}))
    positional = [(names[i] if i < len(names) else f"argument {i + 1}", v) for i, v in enumerate(call.args)]
    return positional + list(call.kwargs)


def _description(name: str, docs: dict, words: int | None = None) -> str:
    """The function's own description, first sentence (or its first `words` words), without BFCL's class preamble."""
    text = docs.get(name, (None, {}))[1].get("description", "") or name
    text = text.split("Tool description:", 1)[-1].strip()
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0].strip().rstrip(".")
    if not sentence:
        return f"Call {name}"
    verb, _, rest = sentence.partition(" ")
    # Docs say "Displays the status ..."; an instruction says "Display the status ...".
    if re.fullmatch(r"[A-Za-z]+(ss|sh|ch|x)es", verb):
        verb = verb[:-2]
    elif re.fullmatch(r"[A-Za-z]+[^su]s", verb):
        verb = verb[:-1]
    text = f"{verb} {rest}".strip()
    return text if words is None else " ".join(text.split()[:words])


def _query(actions: list[str], docs: dict, words: int | None = None) -> str:
    """A readable instruction with every argument value written as a literal (the agent must copy them)."""
    parts = []
    for index, action in enumerate(actions):
        text = _description(parse_call(action).name, docs, words)
        if index:
            text = text[:1].lower() + text[1:]
        arguments = _arguments(action, docs)
        if arguments:
            text += " (" + ", ".join(f"{key}: {value!r}" for key, value in arguments) + ")"
        parts.append(text)
    return ", then ".join(parts) + "."


def _intent(actions: list[str], docs: dict) -> str:
    names = list(dict.fromkeys(parse_call(a).name for a in actions))
    classes = list(dict.fromkeys(docs[n][0] for n in names if n in docs))
    return f"{' + '.join(names)} ({', '.join(classes)})"


def _render_triplets(triplets: list[dict]) -> str:
    """(history, action, observation) records per run, cut to MAX_PROMPT_RECORD_CHARS."""
    lines, used, left_out = [], 0, 0
    for run_id, run in _runs(triplets).items():
        history: list[str] = []
        block = [f"## Run {run_id}"]
        for triplet in run:
            status = "ok" if triplet.get("valid") and not is_error_observation(str(triplet["observation"])) else "failed"
            block.append(f"- step {triplet['step']} | history: {' ; '.join(history[-HISTORY_ACTIONS:]) or '(start)'}"
                         f" | action: {_cut(triplet['action'], 200)} | observation ({status}): "
                         f"{_cut(triplet['observation'])}")
            history.append(_cut(triplet["action"], 80))
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
    docs = _docs_by_name(source)
    return "\n".join([
        f"Classes: {', '.join(source['involved_classes'])}",
        f"Available functions: {', '.join(sorted(docs))}",
        f"Initial state (JSON, truncated): {_cut(json.dumps(source['initial_config'], default=str), 1500)}",
        f"Original task: {_cut(source.get('description') or '(none)', 600)}",
    ])


def _abstract_llm(triplets, source, config, model, cost) -> list[dict]:
    prompt = _render_prompt("abstract", environment=_environment(source), triplets=_render_triplets(triplets),
                            min_steps=config.min_calls, output_format=OUTPUT_FORMAT)
    generation = _ask(model, prompt, config)
    _usage(cost, generation)
    if generation.error:
        cost["skipped"]["api_error"] += 1
        return []
    run_ids, docs = list(_runs(triplets)), _docs_by_name(source)
    drafts = []
    for block in parse_task_blocks(generation.text, cost["skipped"]):
        try:
            drafts.append({**_draft_from_block(block, docs), "run_ids": run_ids})
        except ValueError as e:
            cost["skipped"][str(e).split(":", 1)[0]] += 1
    return drafts


TASK_BLOCK_RE = re.compile(r"<task>(.*?)</task>", re.DOTALL | re.IGNORECASE)
FIELD_RE = re.compile(r"^[\s*#>_-]*(description|query|action\s*sequence|completion\s*criterion|criterion|confidence)"
                      r"[\s*_]*:[\s*_]*(.*)$", re.IGNORECASE)
FIELD_NAMES = {"description": "description", "query": "query", "actionsequence": "action_sequence",
               "completioncriterion": "criterion", "criterion": "criterion", "confidence": "confidence"}
STEP_PREFIX_RE = re.compile(r"^\s*(?:[-*•]\s*)?(?:#?\s*step\s*\d+\s*[:.)-]?|\d+\s*[.):-])?\s*", re.IGNORECASE)


def parse_task_blocks(text: str, skipped: Counter) -> list[dict]:
    """The `<task>` blocks of a reply as {field: text}; an unclosed last block or no block at all is counted."""
    blocks = []
    for body in TASK_BLOCK_RE.findall(text):
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
    tail = TASK_BLOCK_RE.sub("", text)
    if re.search(r"<task>", tail, re.IGNORECASE):
        skipped["unclosed_block"] += 1
    if not blocks and not re.search(r"<task>", tail, re.IGNORECASE):
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


# ----------------------------------------------------------------------------------------------- validation

def validate(spec: dict, config: SynthesisConfig, model: ChatModel | None = None,
             known_task_ids: set | None = None) -> dict:
    """Execute the spec's action sequence in fresh environments and decide (verdict/v1).

    Rejection reasons (all that apply are listed in `reasons`; `reason` is the first):
    "duplicate" (its spec id or resulting task id is in `known_task_ids`), "too_short" (< min_steps calls),
    "invalid_call" (a call `safe_calls` rejects against the involved classes' methods), "nondeterministic" (two
    executions in two fresh environments end in different states or outputs), "call_error" (a call failed, see
    `is_error_observation`, and the positive-reward rule below does not hold), "no_effect" (no state change and no
    informative output), "judge_rejected" (the optional Fig. 13 judge said false).

    Accepted with "objective_met" when every call succeeds. Accepted with "positive_reward" (the paper keeps a
    failed execution when the environment still returns a positive reward) under the kit's reading for BFCL,
    whose environment gives no reward of its own but whose checker rewards reaching the reference state:
    some calls fail, yet the environment reaches a state different from the initial one, a re-execution
    reproduces it, and the successful calls alone (at least min_steps of them) reach that same state. The task
    then keeps only the successful calls as its `reference_actions`, so the checker never asks an agent to
    reproduce an error message.

    Extra fields beyond the record doc: `reasons`, `task_id` and `reference_actions` of the pool task it would
    become, `judge_error` (why a judge verdict is missing: API error or unparsable reply) and judge `cost`.
    """
    known = known_task_ids or set()
    actions = list(spec["action_sequence"])
    reasons, details = [], []
    if len(actions) < config.min_calls:
        reasons.append("too_short")
        details.append(f"{len(actions)} calls < min_calls {config.min_calls}")
    env = _env(spec)
    invalid = []
    for index, action in enumerate(actions):
        try:
            parse_call(action, env.method_names)
        except CallParseError as e:
            invalid.append(index)
            details.append(f"call {index} rejected: {e}")
    env.close()
    if invalid:
        reasons.append("invalid_call")
    initial, observations, _, final = _replay(spec, actions)
    _, observations_again, _, final_again = _replay(spec, actions)
    if (observations, final) != (observations_again, final_again):
        reasons.append("nondeterministic")
        details.append("two executions from the same initial state differ")
    changed = final != initial
    failed = [i for i, o in enumerate(observations) if i not in invalid and is_error_observation(o)]
    reference, positive = actions, False
    if failed:
        succeeded = [a for i, a in enumerate(actions) if i not in failed and i not in invalid]
        *_, final_succeeded = _replay(spec, succeeded)
        positive = changed and final_succeeded == final and len(succeeded) >= config.min_calls
        details.append(f"calls {failed} failed; " + ("the successful calls alone reach the same changed state"
                                                      if positive else "no reproducible positive outcome"))
        if positive:
            reference = succeeded
        else:
            reasons.append("call_error")
    if not changed and not any(_informative(o) for o in observations):
        reasons.append("no_effect")
        details.append("no state change and no informative output")
    task_id = content_id(spec["initial_config"], spec["query"], reference)
    if spec["spec_id"] in known or task_id in known:
        reasons.insert(0, "duplicate")
        details.insert(0, "already in the pool")
    judge, judge_error, cost = None, None, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
    if config.judge and model is not None and not reasons:
        steps = [{"calls": [a], "observations": [o]} for a, o in zip(actions, observations)]
        judge, judge_error = _judge(spec["intent"], spec["query"], actions, steps, model, config, cost)
        if judge is not None and not judge["success"]:
            reasons.append("judge_rejected")
            details.append(f"judge: {judge['reason']}")
    accepted = not reasons
    return {
        "schema": "verdict/v1",
        "spec_id": spec["spec_id"],
        "accepted": accepted,
        "reason": ("positive_reward" if positive else "objective_met") if accepted else reasons[0],
        "reasons": reasons,
        "detail": "; ".join(details),
        "observations": observations,
        "judge": judge,
        "judge_error": judge_error,
        "task_id": task_id,
        "reference_actions": reference,
        "cost": cost,
    }


def _tool_call_json(action: str) -> dict:
    try:
        call = parse_call(action)
    except CallParseError:
        return {"name": None, "raw": action}
    out = {"name": call.name, "arguments": call.kwargs_dict}
    if call.args:
        out["positional_arguments"] = list(call.args)
    return out


def _judge(description: str, query: str, reference: list[str], steps: list[dict], model: ChatModel,
           config: SynthesisConfig, cost: dict) -> tuple[dict | None, str | None]:
    """The Fig. 13 judge on an executed trajectory: ({success, reason}, None) or (None, why it has no verdict)."""
    summary = "\n".join(f"step {index + 1}: {json.dumps(_tool_call_json(call), default=str)} -> {_cut(obs)}"
                        for index, step in enumerate(steps)
                        for call, obs in zip(step["calls"], step["observations"])) or "(no calls)"
    final = next((o for step in reversed(steps) for o in reversed(step["observations"])), "(no observation)")
    prompt = _render_prompt("judge", task_description=description, query=query,
                            ground_truth=json.dumps([_tool_call_json(a) for a in reference], default=str),
                            modality_hint=MODALITY_HINT, trajectory_summary=summary, final_observation=_cut(final))
    generation = _ask(model, prompt, config)
    _usage(cost, generation)
    if generation.error:
        return None, f"api_error: {generation.error}"
    verdict = parse_judge(generation.text)
    if verdict is None:
        return None, f"unparsable: {_cut(generation.text, 200)!r}"
    return verdict, None


JUDGE_SUCCESS_RE = re.compile(r"success\W*\[?\s*(true|false)\b", re.IGNORECASE)
JUDGE_REASON_RE = re.compile(r"reason\W*:\s*\[?(.*)", re.IGNORECASE | re.DOTALL)


def parse_judge(text: str) -> dict | None:
    """`Success: true/false` (brackets and markdown tolerated) and `Reason: ...`; None when there is no verdict."""
    found = JUDGE_SUCCESS_RE.findall(text or "")
    if len({v.lower() for v in found}) != 1:  # none, or contradicting verdicts
        return None
    reason = JUDGE_REASON_RE.search(text)
    reason = reason.group(1).strip().rstrip("]").strip() if reason else ""
    return {"success": found[0].lower() == "true", "reason": reason}


# ----------------------------------------------------------------------------------------------- pool tasks

def to_pool_task(spec: dict, verdict: dict, pool_version: int, provenance_extra: dict | None = None) -> dict:
    """The task/v1 record of an accepted spec (its reference actions are the verdict's, see `validate`)."""
    if not verdict["accepted"] or verdict["spec_id"] != spec["spec_id"]:
        raise ValueError(f"spec {spec['spec_id']} has no accepting verdict (got {verdict['reason']!r})")
    source = spec["source"]
    return {
        "schema": "task/v1",
        "task_id": verdict["task_id"],
        "query": spec["query"],
        "intent": spec["intent"],
        "initial_config": spec["initial_config"],
        "involved_classes": spec["involved_classes"],
        "data_version": spec["data_version"],
        "reference_actions": verdict["reference_actions"],
        "completion_criterion": spec["completion_criterion"],
        "pool_version": pool_version,
        "provenance": {"signal": source.get("signal_id"), "context": source.get("context_id"),
                       "runs": source.get("run_ids", []), "spec": spec["spec_id"], "verdict": verdict["reason"],
                       "origin_task": source.get("task_id"), "signal_type": source.get("signal_type"),
                       "abstraction": spec.get("abstraction"), **(provenance_extra or {})},
    }


def pool_task_to_bfcl(task: dict) -> BFCLTask:
    """A one-turn BFCLTask whose ground truth is the reference actions: the checker grades the agent's own calls."""
    return BFCLTask(id=task["task_id"], category="synthetic", data_version=task.get("data_version", "v3"),
                    turns=[[{"role": "user", "content": task["query"]}]], initial_config=task["initial_config"],
                    involved_classes=list(task["involved_classes"]), ground_truth=[list(task["reference_actions"])])


def synthetic_reward(task: dict, rollout_calls: list[list[str]]) -> float:
    """Replay an agent's steps (each a list of call strings) in a fresh env of the task: 1.0 iff the BFCL checker
    (state + outputs against the reference actions) accepts them."""
    return 1.0 if grade(pool_task_to_bfcl(task), [[call for calls in rollout_calls for call in calls]]) else 0.0


def judge_reward(task: dict, rollout_record: dict, model: ChatModel,
                 config: SynthesisConfig | None = None) -> float | None:
    """The optional LLM-judge reward (Fig. 13 prompt) of a rollout/v1 record on a pool task: 1.0 / 0.0, or None
    when the judge gives no verdict (API error or unparsable reply)."""
    config = config or SynthesisConfig(max_new_tokens=256)
    steps = [{"calls": step.get("calls", []), "observations": step.get("observations", [])}
             for step in rollout_record.get("steps", [])]
    verdict, _ = _judge(task["intent"], task["query"], task["reference_actions"], steps, model, config,
                        {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
    return None if verdict is None else float(verdict["success"])
