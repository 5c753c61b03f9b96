"""The two tool-call formats an agent can speak, and how each is rendered and parsed.

- `native`: the chat template renders the tools and the model answers with Qwen3-style
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (or an OpenAI endpoint returns structured
  `tool_calls`). Used for every model whose chat template supports tools.
- `prompt`: BFCL's prompting protocol for models without a tool template: the function docs go into the
  environment's system prompt (BFCL's own: `envs.bfcl.episode.prompt_style_system_prompt`) and the model answers
  `[func(a=1), other(b='x')]`.

Parsing returns data only: `Call` objects built from literals by `core.safe_calls`; nothing is evaluated.
Text that holds no call at all is the model's answer, and (as in BFCL's runner) ends the user turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from coevolve_lib.core.safe_calls import MAX_SOURCE_CHARS, Call, CallParseError, call_from_json, parse_call_list

TOOL_FORMATS = ("native", "prompt")
MAX_REPLY_CHARS = 4 * MAX_SOURCE_CHARS
"""Longest reply parsed at all (checked before any regex or JSON work); a longer one is one rejected call. The
kit generates at most a few thousand tokens per reply (`max_new_tokens`), tens of kB at most; BFCL replies are under
2 kB. Each call in it is still held to `safe_calls.MAX_SOURCE_CHARS`."""
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE_OPEN = re.compile(r"```[a-zA-Z]*")


@dataclass
class ParsedReply:
    """What one model reply asks for: the accepted calls, one message per rejected call, and free text."""

    calls: list[Call] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    content: str = ""

    @property
    def is_answer(self) -> bool:
        """True when the reply requests nothing, so the user turn ends."""
        return not self.calls and not self.errors


def parse_native(text: str, structured: list[dict] | None = None, allowed_names=None) -> ParsedReply:
    """Parse `<tool_call>` JSON blocks in `text`, or the endpoint's structured calls when it returned some.

    Never raises: oversized text, invalid JSON, integers over Python's digit limit and too-deep nesting are errors."""
    if len(text) > MAX_REPLY_CHARS:
        return _oversized(text)
    reply = ParsedReply(content=_TOOL_CALL_BLOCK.sub("", text).strip())
    if structured:
        raw_calls = [(c.get("name"), c.get("arguments")) if isinstance(c, dict) else (None, None) for c in structured]
    else:
        raw_calls = []
        for block in _TOOL_CALL_BLOCK.findall(text):
            try:
                payload = json.loads(block.strip())
            except (ValueError, RecursionError) as error:  # JSONDecodeError, a huge int, deep nesting
                reply.errors.append(f"tool call is not valid JSON: {type(error).__name__}: {str(error)[:200]}")
                continue
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
                reply.errors.append('tool call must be a JSON object {"name": ..., "arguments": {...}}')
                continue
            raw_calls.append((payload["name"], payload.get("arguments", {})))
    for name, arguments in raw_calls:
        try:
            reply.calls.append(call_from_json(str(name), arguments, allowed_names))
        except CallParseError as error:
            reply.errors.append(str(error))
    return reply


def parse_prompt_style(text: str, allowed_names=None) -> ParsedReply:
    """Parse BFCL's `[f(a=1), g()]` reply. Text that is not a call list is an answer, as in BFCL's decoder."""
    if len(text) > MAX_REPLY_CHARS:
        return _oversized(text)
    # Drop a Markdown code fence with string operations: a regex for the closing fence backtracks quadratically
    # on long whitespace runs.
    stripped = text.strip()
    fence = _FENCE_OPEN.match(stripped)
    if fence:
        stripped = stripped[fence.end():]
    stripped = stripped.removesuffix("```").strip()
    if not stripped or not re.match(r"^\[?\s*[A-Za-z_]\w*\s*\(", stripped):
        return ParsedReply(content=text.strip())
    calls, errors = parse_call_list(stripped, allowed_names)
    return ParsedReply(calls=calls, errors=errors)


def _oversized(text: str) -> ParsedReply:
    return ParsedReply(errors=[f"reply longer than {MAX_REPLY_CHARS} characters ({len(text)}); nothing was parsed"])


def parse_reply(tool_format: str, text: str, structured: list[dict] | None = None, allowed_names=None) -> ParsedReply:
    if tool_format == "native":
        return parse_native(text, structured, allowed_names)
    return parse_prompt_style(text, allowed_names)


def compact_docs(func_docs: list[dict]) -> list[dict]:
    """Function docs without parameter descriptions or response schemas, each description cut to one sentence.

    BFCL's docs for two classes are ~10k tokens; small models and CPU profiles use this shorter rendering.
    """
    compact = []
    for doc in func_docs:
        parameters = json.loads(json.dumps(doc.get("parameters", {})))
        for prop in parameters.get("properties", {}).values():
            prop.pop("description", None)
        description = doc.get("description", "").split("Tool description: ")[-1].split(". ")[0]
        compact.append({"name": doc["name"], "description": description, "parameters": parameters})
    return compact


def assistant_message(tool_format: str, text: str, reply: ParsedReply) -> dict:
    """The assistant turn as it goes back into the conversation."""
    if tool_format == "native" and reply.calls:
        return {"role": "assistant", "content": reply.content, "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": c.kwargs_dict}} for c in reply.calls]}
    return {"role": "assistant", "content": text}


def tool_messages(reply: ParsedReply, observations: list[str]) -> list[dict]:
    """One `tool` message per executed call, then one per rejected call (named after BFCL's OSS handler)."""
    messages = [{"role": "tool", "name": call.to_source(), "content": obs}
                for call, obs in zip(reply.calls, observations)]
    messages += [{"role": "tool", "name": "invalid_call", "content": f"Error: {error}"} for error in reply.errors]
    return messages
