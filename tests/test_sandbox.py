"""The OS-level sandbox (`core/sandbox.py`) on its own, without AppWorld: what a sandboxed process can reach, and
that killing the sandbox ends what it started. Each check has its positive control in mode "none" (the same code
does reach the host there), so that a check that cannot fail would show. The AppWorld attacks are in
`test_appworld_sandbox.py`."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
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
    # no namespaces: the limits, and the parent-death signal that takes it down with the kit (bwrap's --die-with-parent)
    assert none[:5] == ["setpriv", "--pdeathsig", "KILL", "--", "prlimit"] and none[-1] == "python"


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


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="needs root (to become another user) and a system Python that user can read")
def test_a_sandbox_started_by_another_user_runs_in_a_user_namespace():
    """The kit run by a user other than root: bubblewrap makes a user namespace (no uid of its own to drop to); the
    process has only its loopback, writes only its scratch folder, and the process limit counts its own threads."""
    tmp_path = Path(tempfile.mkdtemp())  # in /tmp, which that user can reach (pytest's tmp_path is root's only)
    os.chmod(tmp_path, 0o777)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    box = Sandbox(SandboxConfig(limits=SandboxLimits(processes=24)), scratch)
    box.uid = None  # as that user would have it
    os.chown(scratch, 65534, 65534)
    code = textwrap.dedent(f"""\
        import os, socket, threading, time
        open("{scratch}/ok", "w").write("1")
        refused = []
        for path in ("{tmp_path}/outside", "/outside", "/dev/shm/outside"):  # the sandbox's own tmpfs included
            try:
                open(path, "w")
            except OSError as error:
                refused.append(type(error).__name__)
        print(len(refused))
        print([name for _, name in socket.if_nameindex()])
        try:
            for _ in range(64):
                threading.Thread(target=time.sleep, args=(1,)).start()
        except RuntimeError:
            pass
        print(threading.active_count())
        """)
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
               *box.command(["/usr/bin/python3", "-I", "-c", code])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    refused, interfaces, threads = done.stdout.split("\n")[:3]
    assert done.returncode == 0, done.stderr
    assert refused == "3" and interfaces == "['lo']" and int(threads) < 24
    assert (scratch / "ok").exists() and not (tmp_path / "outside").exists()
    shutil.rmtree(tmp_path)


def test_the_scratch_folder_is_the_only_place_a_sandbox_writes(tmp_path):
    """bubblewrap's own root and /dev are in-memory file systems, remounted read-only so that code cannot fill memory
    through them (in a user namespace they were writable: the test above pins that; as root the uid drop covers it)."""
    box = Sandbox(SandboxConfig(), tmp_path, read_only=(Path(sys.base_prefix),))
    code = textwrap.dedent(f"""\
        for path in ("/escape", "/dev/shm/escape", "/dev/escape", "{tmp_path}/kept"):
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError:
                pass
        """)
    command = box.command([str(Path(sys.base_prefix) / "bin" / "python3"), "-I", "-c", code])
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, **box.popen_kwargs())
    assert done.stdout.splitlines() == [f"wrote {tmp_path}/kept"], done.stderr
