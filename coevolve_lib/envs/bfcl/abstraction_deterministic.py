"""Deterministic abstraction: the offline stand-in for the paper's LLM abstraction (Fig. 12), no model.

Per exploration run, the window of consecutive successful calls that replays cleanly from the task's initial state
becomes a task spec, with a query written from each function's own doc and the calls' literal arguments.
"""

from __future__ import annotations

import re
from collections import Counter

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.safe_calls import CallParseError, parse_call
from coevolve_lib.engine.explore import split_runs
from coevolve_lib.envs.bfcl.benchmark import is_error_observation
from coevolve_lib.envs.bfcl.tasks import docs_by_name
from coevolve_lib.envs.bfcl.validation import COMPLETION_CRITERION, replay


def abstract_deterministic(triplets: list[dict], source: dict, config: SynthesisConfig, skipped: Counter) -> list[dict]:
    """Drafts (intent, query, action_sequence, completion_criterion, run_ids): per run, the best clean window."""
    docs = docs_by_name(source.get("data_version", "v3"), source["involved_classes"])
    drafts = []
    for run_id, run in split_runs(triplets).items():
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
        _, observations, changed, _ = replay(source, actions)
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
            _, observations, changed, _ = replay(source, window)
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
