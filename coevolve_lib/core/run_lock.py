"""One live writer per output: an advisory lock (`flock`) that a command holds on its run folder (or results file)
while it writes there. A second command on the same output stops in one line naming the first, instead of writing
beside it (two `evaluate` on one `--out` doubled the episodes) or misreading its half-built files (a second `train`
advised deleting the first run's D_0). The lock goes with the process however it ends, SIGKILL included. Lock files
live in `runs/.locks/`, one per output path (never beside results that are committed), and keep the last holder's pid
and command for the message."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sys
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.paths import RUNS_DIR, shown_path


@contextlib.contextmanager
def output_lock(output: str | Path):
    """Hold `output`'s lock for the block, or raise a RunError naming it and the command holding it. Only the main
    process of a multi-process run locks (its other processes write their shares under it)."""
    if int(os.environ.get("RANK", "0")) != 0:
        yield
        return
    key = hashlib.sha256(str(Path(output).expanduser().resolve()).encode()).hexdigest()[:20]
    lock_path = RUNS_DIR / ".locks" / f"{key}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()[:300] or "another process"
            raise RunError(f"{shown_path(output)} is being written by another command ({holder}): let it finish or "
                           "stop it (the same command then resumes), or give another --out") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}")
        handle.flush()
        yield
