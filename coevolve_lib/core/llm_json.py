"""Pull the first JSON object out of an LLM reply, without ever evaluating the text.

Replies wrap JSON in code fences, put prose before and after it, or think aloud in `<think>` blocks first.
Fenced blocks are tried first (the model's declared answer), then every `{` in reading order is handed to
`json.JSONDecoder.raw_decode`, which parses exactly one value and ignores what follows. Python-style dicts
(single quotes, True/None) are not JSON and are rejected, never `eval`ed.
"""

from __future__ import annotations

import json
import re

from coevolve_lib.core.text_blocks import iter_blocks

MAX_CHARS = 200_000
"""Longest reply inspected (longer ones are cut; a context JSON is a few kB)."""
MAX_STARTS = 200
"""Most `{` positions tried, so a reply full of braces costs bounded time."""
MAX_READ = 2 * MAX_CHARS
"""Most characters the failed tries may read together: 200 starts before one long unclosed value would read it 200
times."""

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)  # linear: an unclosed block runs to the end, once
# Fences are found by `core.text_blocks`: as one regex, a lazy body after this opening retried every shorter opening
# when no fence closed (quadratic in a run of blanks or letters).
_FENCE_OPEN = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?")
_FENCE_CLOSE = re.compile("```")


class LLMOutputError(ValueError):
    """The reply holds no usable JSON object; the message says why."""


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} is not allowed")  # NaN/Infinity are not JSON proper


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def extract_json_object(text) -> dict:
    """The first JSON object (dict) in `text`; raise LLMOutputError with a reason otherwise."""
    if not isinstance(text, str):
        raise LLMOutputError(f"expected text, got {type(text).__name__}")
    text = _THINK.sub("", text[:MAX_CHARS])
    if not text.strip():
        raise LLMOutputError("empty output")
    for start, end in iter_blocks(text, _FENCE_OPEN, _FENCE_CLOSE):
        found = _first_object(text[start.end():end.start()])
        if found is not None:
            return found
    found = _first_object(text)
    if found is None:
        raise LLMOutputError(f"no JSON object found in the output ({len(text)} chars: {text[:120]!r})")
    return found


def _first_object(text: str) -> dict | None:
    start, read = text.find("{"), 0
    for _ in range(MAX_STARTS):
        if start < 0 or read > MAX_READ:
            return None
        try:
            value, _end = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError as error:
            value, read = None, read + error.pos - start
        except (ValueError, RecursionError):  # a non-finite constant, a huge integer, deep nesting: no position
            value, read = None, read + len(text) - start
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None
