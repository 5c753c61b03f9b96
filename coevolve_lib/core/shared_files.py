"""Files one process writes and the others read, on a filesystem the nodes of a multi-node run share.

A barrier says that the writer has finished, not that another node sees what it wrote: network filesystems cache
directory listings and file attributes (NFS: up to a minute by default), so a node can miss a file another wrote or
read its old content. So the writers' digests travel over the process group (`engine.shards.Shards.settle`) and
each reader waits until the files read back with those digests (`wait_for_files`), for at most `SETTLE_TIMEOUT_S`:
then the run stops in one line, instead of going on from another pool than the other nodes.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from coevolve_lib.core.config import RunError

SETTLE_TIMEOUT_S = 300.0
"""How long a process waits to see the files others wrote (NFS's attribute cache holds an entry 60 s at most by
default; a filesystem slower than five times that is not one a run can share)."""


def file_digest(path: str | Path) -> str | None:
    """sha256 of a file's bytes; None when it does not exist (here, yet)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def wait_for_files(expected: dict[str, str], timeout_s: float | None = None, poll_s: float = 0.2) -> None:
    """Return once every path of `expected` reads back with its digest; RunError in one line after `timeout_s`
    (None: `SETTLE_TIMEOUT_S`)."""
    timeout_s = SETTLE_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    pending = dict(expected)
    while True:
        pending = {path: digest for path, digest in pending.items() if file_digest(path) != digest}
        if not pending:
            return
        if time.monotonic() >= deadline:
            path = next(iter(pending))
            seen = "is missing" if file_digest(path) is None else "has other content"
            raise RunError(f"{len(pending)} file(s) another process wrote are not visible here as written after "
                           f"{timeout_s:g} s ({path} {seen}): a multi-node run needs --out on a filesystem every node "
                           "shares and sees alike")
        time.sleep(poll_s)
