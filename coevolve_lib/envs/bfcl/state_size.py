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

    Private attributes are counted only where they lead out of the public state: `_current_dir` points into the
    tree, unless `cp`, `rm` and `cd ..` left it in a branch the tree no longer holds (a copy's subfolders keep their
    old `parent`), where the tools still reach everything below its topmost detached ancestor. A cycle through
    public attributes counts up to the limit and so reads as over it."""
    instances = list(instances)
    seen: set[int] = set()  # objects the walk reached
    total = _walk([(instance, 0) for instance in instances], 0, limit, seen)
    for instance in instances:
        for name, value in vars(instance).items():
            if total > limit:
                break
            if name.startswith("_") and hasattr(value, "__dict__") and id(value) not in seen:
                total = _walk([(_detached_top(value, seen), 0)], total, limit, seen)
    return total


def _detached_top(node: object, seen: set[int]) -> object:
    """The topmost ancestor of `node` (by its back references) that the walk has not reached."""
    for _ in range(10_000):  # parent chains are as long as the tree is deep; bounded against a cycle
        parent = next((getattr(node, name) for name in BACK_REFERENCES if getattr(node, name, None) is not None), None)
        if parent is None or id(parent) in seen:
            break
        node = parent
    return node


def _walk(stack: list[tuple[object, int]], total: int, limit: int, seen: set[int]) -> int:
    """`total` plus the size of what `stack` holds ((value, length of its key path) pairs), stopping over `limit`."""
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
            seen.add(id(value))
            stack.extend((item, prefix) for name, item in vars(value).items()
                         if not name.startswith("_") and name not in BACK_REFERENCES)
        if total > limit:
            return total
    return total
