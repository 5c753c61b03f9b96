"""The OS-level sandbox (`core/sandbox.py`) on its own, without AppWorld: what a sandboxed process can reach, and
that killing the sandbox ends what it started. Each check has its positive control in mode "none" (the same code
does reach the host there), so that a check that cannot fail would show. The AppWorld attacks are in
`test_appworld_sandbox.py`."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from coevolve_lib.core import sandbox as sandbox_module
from coevolve_lib.core.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxLimits,
    SandboxUnavailableError,
    check_sandbox,
    kill_sandbox,
    process_footprint,
)

ESCAPES = textwrap.dedent("""\
    import json, os, socket, subprocess, sys
    found = {"uid": os.getuid()}
    try:
        open(sys.argv[1], "w").write("pwned")  # a file outside the scratch folder
        found["wrote"] = True
    except OSError as error:
        found["wrote"] = type(error).__name__
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()  # the host's loopback
        found["connected"] = True
    except OSError as error:
        found["connected"] = type(error).__name__
    found["sees_home"] = os.path.exists(sys.argv[3])
    # a process that leaves the session and outlives its parent
    subprocess.Popen(["sleep", sys.argv[4]], start_new_session=True)
    print(json.dumps(found), flush=True)
    import time; time.sleep(60)  # alive until the test kills the sandbox
    """)


def _run(mode: str, tmp_path: Path, marker: str) -> tuple[dict, subprocess.Popen]:
    scratch = tmp_path / f"scratch_{mode}"
    scratch.mkdir()
    script = scratch / "escape.py"
    script.write_text(ESCAPES)
    listener = __import__("socket").create_server(("127.0.0.1", 0))
    box = Sandbox(SandboxConfig(mode=mode), scratch, read_only=(Path(sys.base_prefix),))
    home = Path(__file__).resolve().parents[1]  # the checkout: not one of the paths the sandbox is given
    command = box.command([sys.executable if mode == "none" else str(Path(sys.base_prefix) / "bin" / "python3"),
                           "-I", str(script), str(tmp_path / f"pwned_{mode}"), str(listener.getsockname()[1]),
                           str(home), marker])
    process = subprocess.Popen(command, cwd=scratch, stdout=subprocess.PIPE, text=True, **box.popen_kwargs())
    line = process.stdout.readline()
    listener.close()
    return json.loads(line), process


def _sleepers(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]


def test_a_sandboxed_process_reaches_no_file_network_or_process_outside_it(tmp_path):
    check_sandbox()
    marker = "3001.5"
    found, process = _run("bwrap", tmp_path, marker)
    assert found["wrote"] in ("PermissionError", "FileNotFoundError", "OSError")
    assert found["connected"] not in (True,) and not found["sees_home"]
    assert not (tmp_path / "pwned_bwrap").exists()
    if os.geteuid() == 0:
        assert found["uid"] >= sandbox_module.SANDBOX_UID_BASE  # root was dropped
    assert process_footprint(process.pid).processes >= 4  # bubblewrap's two, the script, the detached sleep
    assert _sleepers(marker)
    kill_sandbox(process)
    time.sleep(0.2)
    assert _sleepers(marker) == []


def test_positive_control_the_same_code_reaches_the_host_without_the_sandbox(tmp_path):
    marker = "3001.6"
    found, process = _run("none", tmp_path, marker)
    try:
        assert found["wrote"] is True and (tmp_path / "pwned_none").read_text() == "pwned"
        assert found["connected"] is True and found["sees_home"]
        kill_sandbox(process)
        time.sleep(0.2)
        assert _sleepers(marker)  # it left the process group: mode "none" is weaker, as documented
    finally:
        for sleeper in _sleepers(marker):
            sleeper.kill()


def test_limits_hold_inside_the_sandbox(tmp_path):
    box = Sandbox(SandboxConfig(limits=SandboxLimits(address_space_mb=512, processes=16)), tmp_path,
                  read_only=(Path(sys.base_prefix),))
    code = textwrap.dedent("""\
        import threading, time
        try:
            bytearray(1024 ** 3)
            print("allocated")
        except MemoryError:
            print("MemoryError")
        started = 0
        try:
            for _ in range(64):
                threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
                started += 1
        except RuntimeError:
            pass
        print(started)
        """)
    command = box.command([str(Path(sys.base_prefix) / "bin" / "python3"), "-I", "-c", code])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, **box.popen_kwargs())
    memory, threads = done.stdout.split()
    assert memory == "MemoryError" and int(threads) < 16, done.stderr


def test_the_command_line_isolates_and_limits():
    box = Sandbox(SandboxConfig(), Path("/"))
    box.uid = None  # as a user other than root
    args = box.command(["python", "-c", "pass"])
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent", "--clearenv"):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL" and "setpriv" not in args
    assert args[-3:] == ["python", "-c", "pass"] and "prlimit" in args
    assert not any(a.startswith("--bind") and a.startswith("/root") for a in args)
    none = Sandbox(SandboxConfig(mode="none"), Path("/")).command(["python"])
    assert none[0] == "prlimit" and none[-1] == "python"


def test_a_missing_sandbox_is_refused_in_one_line(monkeypatch):
    with pytest.raises(ValueError, match="not one of"):
        SandboxConfig(mode="docker")
    check_sandbox.cache_clear()
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    try:
        with pytest.raises(SandboxUnavailableError) as error:
            check_sandbox()
        assert "bwrap" in str(error.value) and "'none'" in str(error.value) and "\n" not in str(error.value)
    finally:
        check_sandbox.cache_clear()
