"""On-disk records: JSON Lines appended durably, JSON files replaced atomically, and run provenance.

A killed process leaves at worst one truncated last line in a JSONL file; `read_jsonl` skips it (and counts it),
so a resumed run re-does that one item instead of crashing or losing the rest.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.paths import REPO_ROOT

log = logging.getLogger(__name__)

ENCODING_ERRORS = "backslashreplace"
"""How text that UTF-8 cannot encode is written: only lone surrogates (`"\\ud800"`, e.g. in a model's tool-call
arguments) are such text, and they occur only inside JSON strings, where backslashreplace writes the JSON escape
`\\ud800`. Writing never raises, and `json.loads` reads back the same string."""


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one record and flush it to disk before returning. After a line cut by a killed process, the record
    starts a line of its own (else it would join the cut line, and be skipped with it when read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8", errors=ENCODING_ERRORS)
    # appends go to the end whatever was read; never through a symbolic link (a run folder's files are its own:
    # a linked rollouts file would append to its target, wherever that is)
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise RunError(f"{path} is a symbolic link: the kit appends only to files of its own; remove the link "
                       "(the same command then writes the file anew)") from None
    with os.fdopen(descriptor, "rb+") as f:
        if f.seek(0, os.SEEK_END):
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                line = b"\n" + line
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


class CorruptFileError(ValueError):
    """A file written atomically holds a line that is not a JSON record: corruption, never an interrupted write."""


MAX_LINE_BYTES = 64 * 2**20
"""Longest JSONL line read back (64 MiB; the kit bounds a record's model-made part at 2 MiB): a longer one is damage,
handled as a line that does not parse, and never held whole."""


def _lines(f) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) of a binary file, None for a line over `MAX_LINE_BYTES` (skipped without holding it)."""
    number = 0
    while line := f.readline(MAX_LINE_BYTES + 1):
        number += 1
        if len(line) > MAX_LINE_BYTES:
            while (rest := f.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield number, None
        else:
            yield number, line


def read_jsonl_numbered(path: str | Path, atomic: bool = False) -> list[tuple[int, dict]]:
    """(line number, record) of every record of a JSONL file ([] if it does not exist).

    An appended file (`append_jsonl`) may end in one line cut by a killed process: such a line (not JSON, not UTF-8,
    cut inside a multi-byte character, or over `MAX_LINE_BYTES`) is logged and skipped. A file only ever replaced
    whole (`atomic`, e.g. the task pool) cannot hold one, so a bad line there is a `CorruptFileError` naming the file
    and the line, and nothing is dropped or rewritten."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with open(path, "rb") as f:
        for number, line in _lines(f):
            if line is not None and not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8")) if line is not None else None
            except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                record = None
            if isinstance(record, dict):
                records.append((number, record))
            elif atomic:
                shown = "a line over 64 MiB" if line is None else repr(line.strip()[:60].decode("utf-8", "replace"))
                raise CorruptFileError(f"{path}, line {number}: not a JSON record ({shown}); the file is written "
                                       "atomically, so this is corruption: repair or remove the line")
            else:
                log.warning("skipping corrupt line %d of %s (an interrupted write)", number, path)
    return records


def read_jsonl(path: str | Path, atomic: bool = False) -> list[dict]:
    """The records of a JSONL file, as `read_jsonl_numbered` reads them."""
    return [record for _, record in read_jsonl_numbered(path, atomic)]


def read_json(path: str | Path):
    """A JSON file written whole (`write_json_atomic`); a `CorruptFileError` naming it when it does not parse (it
    cannot be an interrupted write: emptied or damaged afterwards)."""
    try:
        return json.loads(Path(path).read_bytes())
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past Python's recursion limit
        raise CorruptFileError(f"{path}: not JSON; the file is written atomically, so this is corruption: restore "
                               "it or remove it") from None


def _write_atomically(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file in the same folder, fsync it, then rename it over `path` (atomic on
    POSIX): a killed process leaves the old file or the new one, never a half-written one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name + ".", suffix=".tmp", delete=False,
                                     encoding="utf-8", errors=ENCODING_ERRORS) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.replace(f.name, path)
    finally:
        if os.path.exists(f.name):  # the rename failed: leave no temporary file behind
            os.unlink(f.name)


def write_json_atomic(path: str | Path, obj) -> None:
    """Replace `path` with `obj` as JSON, atomically."""
    _write_atomically(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_jsonl_atomic(path: str | Path, records: list[dict]) -> None:
    """Replace `path` with `records` as JSON Lines, atomically."""
    _write_atomically(path, "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records))


def copy_tree_atomic(source: str | Path, target: str | Path) -> None:
    """Copy the folder `source` to `target` (which must not exist), whole or not at all: into `<target>.partial`
    first (what a killed copy left there is removed), then renamed. One writer per target (its caller's lock or
    folder)."""
    target = Path(target)
    staging = target.with_name(f"{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    staging.rename(target)


def git_commit() -> str:
    """The checkout's commit, with `+dirty` when tracked files changed; `unknown` outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def config_hash(config: dict) -> str:
    """A short, stable hash of a configuration (key order does not matter)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (read in 1 MiB blocks: model weights are GBs)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
