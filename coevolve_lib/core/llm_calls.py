"""Record and replay of the data engine's LLM calls (`data_engine.llm_calls`: live | record | replay).

The explorer LLM (contexts, exploration, abstraction, judge, an explorer-written reflection) is the one part of a run
that costs money and does not repeat: a hosted model answers the same request differently next month. `record`
appends every request's reply to a JSON Lines file (`data_engine.llm_record`, default `<run folder>/llm_calls.jsonl`)
and `replay` answers from that file alone, with no endpoint, so a recorded run can be rerun, reviewed or extended.

An ask is found by three things: its scope, the unit of work that asked it (`llm_scope`: a round's target, group of
triplets or task spec, a Reflexion trajectory); the hash of what decides its reply (`request_key`: the model's name,
the messages, the tools, the sampling settings); and its number `n` among the asks of that key in that scope (the
R runs of a target ask the same first prompt R times). Every unit a resumed round redoes asks from n = 0 again, as
it did the first time, so a killed run resumed in either mode finds the same replies.

- `record` answers from the file what is already there and asks the live model only for the rest, appending each
  batch's new replies when the batch returns: a killed run resumed in `record` mode pays again for at most the one
  batch it was waiting on. Model errors are recorded too, so that a replay reproduces them, but `record` asks them
  again (an endpoint that was down is not the model's answer); the new line replaces the error for that ask.
- `replay` with an ask the file lacks stops the run with one line naming it (scope, key, n, the start of its last
  message) and the file: the run asked something the recording never saw (another config, seed or prompt).

Each process of a multi-process run records to, and replays from, a file of its own (`record_path`), so replay
wants the same number of processes. What is replayed is the reply: text, tool calls, token counts, seconds and
finish reason. A round keeps the wall times it measures apart, in `timings.json` (`engine.feedback.write_round`): a
replayed round measures its own, and writes every other file byte for byte as the recorded round did."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.paths import REPO_ROOT, shown_path
from coevolve_lib.core.records import append_jsonl, read_jsonl, read_jsonl_numbered

SCHEMA = "llm_call/v1"
RECORD_NAME = "llm_calls.jsonl"
"""The record's file name in the run folder (when `data_engine.llm_record` is unset)."""
REPLY_FIELDS = ("text", "tool_calls", "prompt_tokens", "completion_tokens", "seconds", "finish_reason", "error")
"""What a record line keeps of a `Generation` (its token ids are a local model's; the explorer's are never trained
on)."""
ASKED_CHARS = 160
"""Characters of an ask's last message kept in its record line, to name it in a report or an error."""
MAX_ERROR_SHARE = 0.05
"""Most share of a recording's asks that may hold a model error (no reply) for it to stand for the model's replies:
`record-explorer` commits none above it, and a recording run's summary says when it is above (a recording of mostly
errors replays a model that was never heard: docs/log.md)."""


def request_key(model: str, messages: list[dict], tools: list[dict] | None, config: GenerationConfig) -> str:
    """The hash of everything that decides a reply: model name, messages, tools and sampling settings."""
    request = {"model": model, "messages": messages, "tools": tools, "sampling": asdict(config)}
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def record_path(run_dir: str | Path, record: str | Path | None) -> Path:
    """This process's record file: `record` (relative: to the repository root), else `<run_dir>/llm_calls.jsonl`; a
    multi-process run's process k > 0 (torchrun/accelerate's RANK) gets `<stem>.rank<k>.jsonl` beside it."""
    path = REPO_ROOT / record if record else Path(run_dir) / RECORD_NAME
    rank = int(os.environ.get("RANK", "0"))
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix}") if rank else path


class RecordedChatModel(ChatModel):
    """A chat model that answers from a record file and, when given a live model (`record` mode), asks it what the
    file lacks (or holds only as a model error) and appends the replies; without one (`replay` mode) an ask the file
    lacks is a RunError."""

    def __init__(self, name: str, path: str | Path, live: ChatModel | None = None):
        self.name, self.path, self.live = name, Path(path), live
        self.replies: dict[tuple[str, str, int], dict] = {}
        """(scope, key, n) -> reply; a later line for the same ask (an error asked again) replaces the earlier."""
        self.models: Counter = Counter()
        """The models the recording's lines name, with their counts (a replay refused says when it is another)."""
        for number, line in read_jsonl_numbered(self.path):
            ask = (line.get("scope"), line.get("key"), line.get("n"))
            if not (isinstance(ask[0], str) and isinstance(ask[1], str) and type(ask[2]) is int):
                continue  # not an ask (read_jsonl already skipped what is not JSON)
            reply = line.get("reply")
            missing = [name for name in REPLY_FIELDS if not isinstance(reply, dict) or name not in reply]
            if missing:  # replayed, it would answer None for each: another round, silently
                raise RunError(f"{shown_path(self.path)}, line {number}: the reply lacks {', '.join(missing)} (a "
                               f"recorded reply holds {', '.join(REPLY_FIELDS)}): the recording is damaged or was "
                               "written by another tool; record it again (data_engine.llm_calls=record)")
            self.replies[ask] = reply
            self.models[line.get("model")] += 1
        self.recorded = len(self.replies)
        """Replies the file held when the model was made."""
        self.scope = ""
        """The unit of work asking now (`llm_scope`)."""
        self.numbers: Counter = Counter()
        """(scope, key) -> asks so far: the next ask of that key in that scope is number `numbers[scope, key]`."""
        self.native_tools = live.native_tools if live is not None else True

    def generate(self, conversations, tools=None, config=GenerationConfig()) -> list[Generation]:
        asks, out = [], []
        for index, messages in enumerate(conversations):
            key = request_key(self.name, messages, tools[index] if tools else None, config)
            asks.append((self.scope, key, self.numbers[self.scope, key]))
            self.numbers[self.scope, key] += 1
            reply = self.replies.get(asks[-1])
            wanted = reply is not None and (self.live is None or reply.get("error") is None)
            out.append(Generation(**{name: reply.get(name) for name in REPLY_FIELDS}) if wanted else None)
        missing = [index for index, generation in enumerate(out) if generation is None]
        if missing and self.live is None:
            scope, key, number = asks[missing[0]]
            others = sorted(str(name) for name in self.models if name != self.name)
            why = (f"it recorded {', '.join(others)}, not {self.name} (data_engine.explorer_model)"
                   if others and self.name not in self.models else "another config, seed or prompt")
            raise RunError(f"replay of {self.name}: no recorded reply to the ask of scope {scope!r}, key {key[:12]}, "
                           f"n {number} ({_asked(conversations[missing[0]])!r}) in {shown_path(self.path)} "
                           f"({self.recorded} recorded replies): the run asks what the recording never saw ({why}); "
                           "record it with data_engine.llm_calls=record")
        if missing:
            fresh = self.live.generate([conversations[i] for i in missing],
                                       [tools[i] for i in missing] if tools else None, config)
            for index, generation in zip(missing, fresh):
                out[index] = generation
                (scope, key, number), reply = asks[index], {name: getattr(generation, name) for name in REPLY_FIELDS}
                self.replies[asks[index]] = reply
                append_jsonl(self.path, {"schema": SCHEMA, "scope": scope, "key": key, "n": number, "model": self.name,
                                         "asked": _asked(conversations[index]), "reply": reply})
        return out


def recording_report(path: str | Path) -> dict:
    """What a recording holds, ask by ask (a later line for the same ask replaces an earlier one, as in replay): its
    asks, the asks whose reply is a model error, their share, and the most frequent error messages."""
    last = {(line.get("scope"), line.get("key"), line.get("n")): line.get("reply") or {} for line in read_jsonl(path)}
    errors = Counter(str(reply["error"])[:120] for reply in last.values() if reply.get("error") is not None)
    asks, failed = len(last), sum(errors.values())
    return {"path": shown_path(Path(path)), "asks": asks, "errors": failed,
            "error_share": round(failed / asks, 4) if asks else 0.0, "over_bound": failed > MAX_ERROR_SHARE * asks,
            "frequent_errors": dict(errors.most_common(3))}


def recording_warning(report: dict) -> str:
    """One line on a recording over `MAX_ERROR_SHARE`: what it holds and its most frequent error."""
    frequent = next(iter(report["frequent_errors"]), "")
    return (f"{report['path']}: {report['errors']} of {report['asks']} recorded asks are model errors "
            f"({100 * report['error_share']:.1f}%, over the {100 * MAX_ERROR_SHARE:g}% bound): it records an endpoint "
            f"that mostly failed, not the model's replies (most frequent: {frequent!r})")


def commit_recording(partial: Path, recording: Path) -> dict:
    """Put the new recording `partial` in the place of `recording` when at most `MAX_ERROR_SHARE` of its asks are model
    errors; its report. Over the bound, a RunError saying why, and both files stay as they are."""
    report = recording_report(partial)
    if report["over_bound"]:
        raise RunError(f"{recording_warning(report)}; {shown_path(recording)} is kept as it was (the new recording is "
                       f"{shown_path(partial)})")
    partial.replace(recording)
    return {**report, "path": shown_path(recording)}


@contextlib.contextmanager
def llm_scope(model: ChatModel | None, scope: str):
    """Number the asks `model` gets inside the block from 0, apart from every other scope's, when it records or
    replays (a no-op for any other model). A round names each unit of work it may redo on resume (a target, a group,
    a spec), so that a unit redone asks what it asked the first time under the same numbers."""
    if not isinstance(model, RecordedChatModel):
        yield
        return
    outer, model.scope = model.scope, scope
    try:
        yield
    finally:
        model.scope = outer


@contextlib.contextmanager
def calls_cut_at(model: ChatModel | None, until: float):
    """Inside the block, every call `model` makes to an endpoint (an `OpenAIChatModel`, recorded or not) ends by
    `until` (a `time.perf_counter` time), its tries and waits included; a call cut is a model error like any other.
    A no-op for a local model or a replay (nothing to wait for)."""
    live = model.live if isinstance(model, RecordedChatModel) else model
    if not isinstance(live, OpenAIChatModel):
        yield
        return
    outer, live.not_after = live.not_after, until
    try:
        yield
    finally:
        live.not_after = outer


def _asked(messages: list[dict]) -> str:
    content = messages[-1].get("content") if messages else ""
    return str(content or "")[:ASKED_CHARS]


def explorer_model(spec: str, mode: str, path: Path, load) -> ChatModel:
    """The data engine's explorer for `data_engine.llm_calls` = `mode`: `load(spec)` itself (`live`), wrapped to
    record into `path` (`record`), or the recording at `path` alone, which must exist (`replay`)."""
    if mode == "live":
        return load(spec)
    if mode == "replay" and not path.exists():
        raise RunError(f"data_engine.llm_calls=replay: there is no recording at {shown_path(path)} (make one with "
                       "data_engine.llm_calls=record, or point data_engine.llm_record at one)")
    return RecordedChatModel(spec, path, load(spec) if mode == "record" else None)
