"""The kit's LLM prompts, one text file each, filled in with `str.format` (literal braces are doubled).

    load_prompt("explore_system").format(action_format=...)
"""

from __future__ import annotations

import string
from functools import cache
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent


@cache
def load_prompt(name: str) -> str:
    """The text of `<name>.txt` in this folder; ValueError naming the available prompts otherwise."""
    path = PROMPTS_DIR / f"{name.removesuffix('.txt')}.txt"
    if not path.is_file():
        raise ValueError(f"unknown prompt {name!r}; available: {available_prompts()}")
    return path.read_text(encoding="utf-8")


def available_prompts() -> list[str]:
    return sorted(p.stem for p in PROMPTS_DIR.glob("*.txt"))


def prompt_fields(name: str) -> set[str]:
    """The `{placeholder}` names a prompt expects."""
    return {field for _, field, _, _ in string.Formatter().parse(load_prompt(name)) if field}


OBSERVATION_CHARS = 300
"""Observations are cut to this length in prompts (file contents and listings can be long)."""


def clip(text, limit: int) -> str:
    """`text` (any value, as str) cut to `limit` characters, saying how many were left out: long observations and
    states would otherwise crowd out the rest of a prompt."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"
