"""How much work a BFCL backend's state can make one call do, measured in bounded time.

BFCL's tools walk their state: `find` and `du` walk the whole file tree, `ls -a`, `cat`, `grep` and `sort` read what
earlier calls wrote, and the state checker compares it all. Their cost follows the state as those walks see it, and
two things make that far larger than the characters the calls wrote: `cp` of a folder copies only its top-level
dict (`item.contents.copy()`), so the copy shares its subfolders and each further copy doubles what `find` walks
(30 copies of a nested folder: 2**30 paths from ~120 calls), and `find` writes each item's full path, so a deep chain
of long names costs the square of its depth.

`state_size` counts the state as those walks see it: shared parts once per place they appear (the tree expanded),
each dict key with the path of keys above it (as `find` prints it), each string's characters, each other value and
each node `NODE_CHARS`. It stops as soon as the count passes `limit`, so measuring costs at most `limit / NODE_CHARS`
node visits whatever the state is. The episode budget `max_state_chars` holds the count after every call.
"""

from __future__ import annotations

from collections.abc import Iterable

NODE_CHARS = 8
"""What the least item costs in a listing the tools print (quotes, separator, a short name): each value and each
node counts at least this much, which also bounds the nodes a measurement visits."""
BACK_REFERENCES = frozenset({"parent"})
"""Attributes that point back up a tree (GorillaFileSystem's `Directory.parent`): not followed, as no tool walks up."""


def state_size(instances: Iterable[object], limit: int) -> int:
    """The size of the backend instances' public state as BFCL's tools walk it (module docstring); a count over
    `limit` is returned as soon as it is reached (the exact figure above `limit` is not computed).

    Private attributes (`_current_dir`, `_last_modified`) are not counted: they point into the counted state or
    hold a scalar. A cycle through public attributes counts up to the limit and so reads as over it."""
    total = 0
    stack: list[tuple[object, int]] = [(instance, 0) for instance in instances]  # (value, length of its key path)
    while stack:
        value, prefix = stack.pop()
        total += NODE_CHARS
        if isinstance(value, (str, bytes)):
            total += len(value)
        elif isinstance(value, dict):
            if total + len(value) * NODE_CHARS > limit:  # each item counts at least that: stop before walking them
                return total + len(value) * NODE_CHARS
            for key, item in value.items():
                key_chars = len(key) if isinstance(key, str) else NODE_CHARS
                total += prefix + key_chars
                stack.append((item, prefix + key_chars + 1))
        elif isinstance(value, (list, tuple, set, frozenset)):
            if total + len(value) * NODE_CHARS > limit:
                return total + len(value) * NODE_CHARS
            stack.extend((item, prefix) for item in value)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            stack.extend((item, prefix) for name, item in vars(value).items()
                         if not name.startswith("_") and name not in BACK_REFERENCES)
        if total > limit:
            return total
    return total
