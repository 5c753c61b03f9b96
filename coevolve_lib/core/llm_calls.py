"""Record and replay of the data engine's LLM calls (`data_engine.llm_calls`: live | record | replay).

The explorer LLM (contexts, exploration, abstraction, judge, an explorer-written reflection) is the one part of a run
that costs money and does not repeat: a hosted model answers the same request differently next month. `record`
appends every request's reply to a JSON Lines file (`data_engine.llm_record`, default `<run folder>/llm_calls.jsonl`)
and `replay` answers from that file alone, with no endpoint, so a recorded run can be rerun, and so reviewed or
extended, byte for byte.

A request is keyed by a hash of what decides its reply: the model's name, the messages, the tools and the sampling
settings (`request_key`). The same request may be asked more than once (two targets that build the same prompt, a
sampled reply asked again): the n-th ask of a key gets the n-th recorded reply of that key, so a replay gives every
ask the reply it got when recorded, in the order the run asked them. A round's order of asks is fixed by its seeds.

- `record` answers from the file what is already there and asks the live model only for the rest, appending each
  batch's new replies when the batch returns: a killed run resumed in `record` mode pays again for at most the one
  batch it was waiting on. Model errors are recorded too, so that a replay reproduces them, but `record` asks them
  again (an endpoint that was down is not the model's answer); the new line replaces the error for that ask.
- `replay` with an ask the file lacks stops the run with one line naming the call (model, the ask's number and
  key, the start of its last message) and the file: the run asked something the recording never saw (another
  config, another seed, or a changed prompt).

Each process of a multi-process run records to, and replays from, a file of its own (`record_path`), so replay
wants the same number of processes. What is replayed is the reply: text, tool calls, token counts and finish reason;
its seconds are the recorded ones, so a replayed round's costs (Table 7's ratio) are the recorded round's. Wall-time
fields of a round report (`seconds`, `wall_seconds`) are measured anew and differ; everything else is equal.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.paths import REPO_ROOT, shown_path
from coevolve_lib.core.records import append_jsonl, read_jsonl

SCHEMA = "llm_call/v1"
RECORD_NAME = "llm_calls.jsonl"
"""The record's file name in the run folder (when `data_engine.llm_record` is unset)."""
REPLY_FIELDS = ("text", "tool_calls", "prompt_tokens", "completion_tokens", "seconds", "finish_reason", "error")
"""What a record line keeps of a `Generation` (its token ids are a local model's; the explorer's are never trained on)."""
ASKED_CHARS = 160
"""Characters of an ask's last message kept in its record line, to name it in a report or an error."""


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
        self.replies: dict[str, dict[int, dict]] = defaultdict(dict)
        """key -> ask number -> reply; a later line for the same ask (an error asked again) replaces the earlier."""
        for line in read_jsonl(self.path):
            if isinstance(line.get("key"), str) and type(line.get("n")) is int and isinstance(line.get("reply"), dict):
                self.replies[line["key"]][line["n"]] = line["reply"]
        self.recorded = sum(map(len, self.replies.values()))
        """Replies the file held when the model was made."""
        self.asked: Counter = Counter()
        """Asks per key so far: the next ask of a key is its ask number `asked[key]`."""
        self.asks = 0
        self.native_tools = live.native_tools if live is not None else True

    def generate(self, conversations, tools=None, config=GenerationConfig()) -> list[Generation]:
        asks, out = [], []
        for index, messages in enumerate(conversations):
            key = request_key(self.name, messages, tools[index] if tools else None, config)
            asks.append((key, self.asked[key]))
            self.asked[key] += 1
            self.asks += 1
            reply = self.replies[key].get(asks[-1][1])
            wanted = reply is not None and (self.live is None or reply.get("error") is None)
            out.append(Generation(**{name: reply.get(name) for name in REPLY_FIELDS}) if wanted else None)
        missing = [index for index, generation in enumerate(out) if generation is None]
        if missing and self.live is None:
            first = missing[0]
            raise RunError(f"replay of {self.name}: ask {self.asks - len(asks) + first + 1} (key {asks[first][0][:12]}, "
                           f"{_asked(conversations[first])!r}) is not in {shown_path(self.path)} ({self.recorded} "
                           "recorded replies): the run asks what the recording never saw (another config, seed or "
                           "prompt); record it with data_engine.llm_calls=record")
        if missing:
            fresh = self.live.generate([conversations[i] for i in missing],
                                       [tools[i] for i in missing] if tools else None, config)
            for index, generation in zip(missing, fresh):
                out[index] = generation
                (key, number), reply = asks[index], {name: getattr(generation, name) for name in REPLY_FIELDS}
                self.replies[key][number] = reply
                append_jsonl(self.path, {"schema": SCHEMA, "key": key, "n": number, "model": self.name,
                                         "asked": _asked(conversations[index]), "reply": reply})
        return out


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
