r"""Delimited blocks (`<tag>...</tag>`, code fences) of model text, found in linear time.

Not one `open(.*?)close` regex: it rescans the rest of the text from every opening without a closing, so a reply of
20,000 `<action>` tags costs 20,000 scans of it (quadratic), and a whitespace run between two optional parts
(`\s*(.*?)\s*`, `[ \t]*(?:py)?[ \t]*`) is retried at every split. Here each opening and each closing is searched for
once, from where the previous block ended.
"""

from __future__ import annotations

import re
from collections.abc import Iterator


def iter_blocks(text: str, opening: re.Pattern, closing: re.Pattern) -> Iterator[tuple[re.Match, re.Match]]:
    """(opening match, closing match) of each block, in order: the first `opening`, the first `closing` after it, and
    so on from the end of that closing, as `re.finditer(opening + "(.*?)" + closing, text, re.DOTALL)` pairs them
    (the body is `text[opening.end():closing.start()]`).

    An opening with no closing after it ends the scan, so a later opening must end later (true of literal tags and
    of fences: an opening cannot start inside another), and each pattern must match in linear time (no two
    quantifiers that can trade characters)."""
    pos = 0
    while (start := opening.search(text, pos)) and (end := closing.search(text, start.end())):
        yield start, end
        pos = end.end()


def without_blocks(text: str, blocks: list[tuple[re.Match, re.Match]]) -> str:
    """`text` with each block of `iter_blocks` cut out, delimiters included (as `re.sub(pattern, "", text)`)."""
    kept, pos = [], 0
    for start, end in blocks:
        kept.append(text[pos:start.start()])
        pos = end.end()
    return "".join(kept) + text[pos:]
