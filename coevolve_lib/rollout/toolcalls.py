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
from collections.abc import Iterable
from dataclasses import dataclass, field

from coevolve_lib.core.openai_model import kept_call_ids
from coevolve_lib.core.safe_calls import MAX_SOURCE_CHARS, Call, CallParseError, call_from_json, parse_call_list

TOOL_FORMATS = ("native", "prompt")
ECHOED_NAME_CHARS, ECHOED_ARGUMENT_CHARS = 200, 2_000
"""Most characters of a refused structured call's name and arguments that go back into the conversation."""
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
    echoed: list[dict] = field(default_factory=list)
    """The endpoint's structured calls, accepted and rejected, as the assistant message carries them back
    (`_echoed`): their ids, which the tool messages answer. [] for calls parsed from text (a local model's)."""
    call_ids: list[str | None] = field(default_factory=list)
    """Per accepted call, the endpoint's id of it (structured calls; [] otherwise)."""
    error_ids: list[str | None] = field(default_factory=list)
    """Per rejected call, the endpoint's id of it (structured calls; [] otherwise)."""

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
        ids = kept_call_ids([c.get("id") if isinstance(c, dict) else None for c in structured])
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
        ids = []
    for index, (name, arguments) in enumerate(raw_calls):
        try:
            call = call_from_json(str(name), arguments, allowed_names)
        except CallParseError as error:
            call = None
            reply.errors.append(str(error))
        else:
            reply.calls.append(call)
        if ids:
            (reply.call_ids if call else reply.error_ids).append(ids[index])
            reply.echoed.append(_echoed(ids[index], name, call, arguments))
    return reply


def _echoed(call_id, name, call: Call | None, arguments) -> dict:
    """One structured call as the conversation keeps it: its id; an accepted call's name and arguments as parsed; a
    refused one's name and arguments as text when they are short strings, else empty. Model output is data: what
    goes back is bounded, and never the raw object (a 5,000-digit integer is no JSON)."""
    if call is not None:
        return {"id": call_id, "name": call.name, "arguments": call.kwargs_dict}
    text = arguments if isinstance(arguments, str) and len(arguments) <= ECHOED_ARGUMENT_CHARS else ""
    return {"id": call_id, "name": name[:ECHOED_NAME_CHARS] if isinstance(name, str) else "", "arguments": text}


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
    """The assistant turn as it goes back into the conversation: an endpoint's structured calls with their ids, the
    refused ones too, so that every tool message answers a call of this turn (`_echoed`); calls parsed from text as
    the kit read them."""
    if tool_format == "native" and reply.echoed:
        return {"role": "assistant", "content": reply.content, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.echoed]}
    if tool_format == "native" and reply.calls:
        return {"role": "assistant", "content": reply.content, "tool_calls": [
            {"type": "function", "function": {"name": c.name, "arguments": c.kwargs_dict}} for c in reply.calls]}
    return {"role": "assistant", "content": text}


def tool_messages(reply: ParsedReply, observations: list[str]) -> list[dict]:
    """One `tool` message per executed call, then one per rejected call (named after BFCL's OSS handler); each with
    the endpoint's id of its call when the call came structured."""
    messages = [{"role": "tool", "name": call.to_source(), "content": obs}
                for call, obs in zip(reply.calls, observations)]
    messages += [{"role": "tool", "name": "invalid_call", "content": f"Error: {error}"} for error in reply.errors]
    for message, call_id in zip(messages, [*reply.call_ids, *reply.error_ids] if reply.echoed else []):
        if call_id:
            message["tool_call_id"] = call_id
    return messages


DOC_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object",
    "tuple": "array", "any": "string", "byte": "integer", "short": "integer", "long": "integer",
    "double": "number", "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object",
    "Hashtable": "object", "Queue": "array", "Stack": "array", "Any": "string", "String": "string",
    "Bigint": "integer",
}
"""The parameter types an environment's function docs (`Environment.tool_docs`) may name -> JSON Schema's. The
vocabulary is the one BFCL's docs use (equal to BFCL's own `bfcl_eval.constants.type_mappings` table in both releases,
a test checks it; written out so that building tool schemas imports no BFCL release)."""


def tools_to_openai(func_docs: Iterable[dict]) -> list[dict]:
    """Function docs (`name`, `description`, `parameters` in the `DOC_TYPES` vocabulary) -> OpenAI function tools,
    the types mapped recursively (as BFCL's `convert_to_tool` does for OpenAI-style models), for a chat template's
    `tools` and an endpoint's `tools`."""
    tools = []
    for doc in func_docs:
        parameters = _openai_schema(doc.get("parameters") or {"type": "dict", "properties": {}})
        parameters["type"] = "object"
        tools.append({"type": "function", "function": {
            "name": doc["name"], "description": doc.get("description", ""), "parameters": parameters}})
    return tools


def _openai_schema(schema: dict) -> dict:
    out = dict(schema)
    doc_type = schema.get("type", "string")
    out["type"] = DOC_TYPES.get(doc_type, "string")
    if doc_type == "float":  # the official converter marks floats this way
        out["format"] = "float"
        out["description"] = out.get("description", "") + " This is a float type value."
    if isinstance(schema.get("properties"), dict):
        out["properties"] = {key: _openai_schema(value) for key, value in schema["properties"].items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = _openai_schema(schema["items"])
    return out
