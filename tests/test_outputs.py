"""Issue 47: where a command writes, and what it may overwrite. One live writer per output (a lock), never through a
symbolic link, and a full disk or a file size limit is one line with the run resumable. (Output paths inside the
kit's own folders, and a rehearsal folder the kit did not make: tests/test_bad_command_lines.py.)"""

import json
import subprocess
import sys

import pytest

from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.config import RunError
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.records import append_jsonl
from coevolve_lib.core.run_lock import output_lock

EVALUATE = ["evaluate", "--limit", "2", "--quiet"]


def test_a_second_command_on_a_live_output_is_one_line_naming_the_first(tmp_path, capsys):
    """Two `evaluate` on one --out both ran and doubled the episodes."""
    out = tmp_path / "results.json"
    with output_lock(out):  # the first command, still writing
        returned = cli([*EVALUATE, "--out", str(out)])
    err = capsys.readouterr().err
    assert returned == 1 and err.count("\n") == 1 and "is being written by another command (pid " in err, err
    assert not out.exists() and not out.with_suffix(".rollouts.jsonl").exists()
    with output_lock(tmp_path / "run"):
        with pytest.raises(RunError, match="run is being written by another command"):
            with output_lock(tmp_path / "run"):
                pass
    with output_lock(tmp_path / "run"):  # released when the holder ended
        pass


def test_a_run_file_that_is_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path, capsys):
    """A symlinked rollouts file was appended through to its target."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the kit's\n")
    out = tmp_path / "results.json"
    out.with_suffix(".rollouts.jsonl").symlink_to(target)
    with pytest.raises(RunError, match="is a symbolic link: the kit appends only to files of its own"):
        append_jsonl(out.with_suffix(".rollouts.jsonl"), {"a": 1})
    returned = cli([*EVALUATE, "--out", str(out)])
    err = capsys.readouterr().err  # the model's loading bar, then one line
    assert returned == 1 and "Traceback" not in err and "is a symbolic link" in err.strip().splitlines()[-1], err
    assert target.read_text() == "not the kit's\n"


def test_a_file_size_limit_is_one_line_and_the_same_command_then_resumes(tmp_path):
    """`ulimit -f` (EFBIG; a full disk is ENOSPC, the same branch) was a traceback."""
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "coevolve_lib", *EVALUATE, "--out", str(out)]
    limited = subprocess.run(["prlimit", "--fsize=2000", "--", *command], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=300)
    assert limited.returncode == 1 and "Traceback" not in limited.stderr, limited.stderr[-2000:]
    last = limited.stderr.strip().splitlines()[-1]
    assert "File too large" in last and "the same command resumes where it stopped" in last, last
    resumed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(out.read_text())["metrics"][0]["n"] == 2
