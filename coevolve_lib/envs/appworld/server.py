"""Start, watch, recycle and stop AppWorld's environment server in its own venv (`.venv-appworld`, `make appworld`),
inside an operating-system sandbox (`core/sandbox.py`).

Why a separate process in a separate venv: AppWorld pins pydantic<2 (the kit runs pydantic 2) and keeps one global task
world per process; the kit never imports `appworld` and never executes the agent's code itself. One server holds one
task at a time, so run one server per worker.

Why a sandbox: the server runs the policy's code by design, and AppWorld's own safety guard is a Python-level check
that code gets around (`os.posix_spawn`, the `__subclasses__` route to `posix.system`). So each server runs in a
bubblewrap sandbox: no network (the kit reaches it through a Unix socket in its scratch folder), a read-only view of
the system, AppWorld's venv and the data, its scratch folder the only place it may write, an unprivileged uid of its
own, resource limits, and its own PID namespace, so that killing it kills whatever the code started. Mode "none"
(`SandboxConfig`, opt-in) runs it without that isolation.

A server that model code has touched is checked after every execution (`leftovers`: processes the code left) and
between episodes (`recycle_reason`: extra threads, CPU spent while idle, memory or CPU time past a bound); a server
that fails a check is recycled: stopped, sandbox and all, and started afresh (`restart`).

Each server runs in its own scratch APPWORLD_ROOT whose `data` is a link to the real data root: AppWorld writes its
experiment outputs (and wipes a task's outputs on every initialize) under APPWORLD_ROOT/experiments, so servers that
share a data root must not share that folder, and the data root (e.g. the official download) stays untouched.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.sandbox import (
    Footprint,
    Sandbox,
    SandboxConfig,
    check_sandbox,
    kill_sandbox,
    process_footprint,
)
from coevolve_lib.envs.appworld.client import AppWorldClient, AppWorldServerError

log = logging.getLogger(__name__)

APPWORLD_VENV = REPO_ROOT / ".venv-appworld"
MAKE_TARGET = "make appworld"
SOCKET_NAME = "server.sock"
THREAD_SLACK = 8
"""Threads a server may hold beyond those it started with before it is recycled: AppWorld's own vary with its work
(2 at start, 3-5 once tasks ran, when measured)."""
IDLE_PROBE_S = 0.1
"""How long `busy_while_idle` watches an idle server's CPU time (a spinning thread spends all of it)."""
SERVE = ("import os, sys, uvicorn; from appworld.serve.environment import app; "
         "uvicorn.run(app, uds=sys.argv[1], log_level='warning'); os._exit(0)")
"""AppWorld's environment server under uvicorn on a Unix socket. After uvicorn's graceful shutdown, `os._exit` skips
the interpreter's final garbage collection over AppWorld's task world (5 s after a task ran, when measured), as
AppWorld's own `serve` does after Ctrl-C."""


class AppWorldNotInstalledError(FileNotFoundError):
    """AppWorld's own venv is missing or was not finished: `make appworld` builds it (`make test` does too)."""


def appworld_python(venv: Path = APPWORLD_VENV) -> Path:
    """The Python of AppWorld's venv, refusing a venv whose setup did not finish (the Makefile's stamp file)."""
    python = Path(venv) / "bin" / "python"
    if not (Path(venv) / ".installed").exists() or not python.exists():
        raise AppWorldNotInstalledError(
            f"AppWorld's venv is missing or incomplete ({venv}): run `{MAKE_TARGET}` in the repository root (it "
            "installs requirements-appworld.txt into .venv-appworld and runs `appworld install`, offline after pip; "
            "`make test` runs it first)")
    return python


def base_prefix(venv: Path) -> Path:
    """The installation of the Python a venv was made from (its pyvenv.cfg's `home` is that installation's bin/): the
    sandbox must see it, since the venv's python is a link into it."""
    for line in (Path(venv) / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).resolve().parent
    raise AppWorldNotInstalledError(f"{venv}/pyvenv.cfg names no home: rebuild the venv with `{MAKE_TARGET}`")


def data_paths(data: Path) -> list[Path]:
    """The folders a server must read for a data root's `data/`: the folder itself and the folders its entries and
    its tasks' entries link into (a run's overlay root links the source data's, `validation.overlay_root`)."""
    paths = {data.resolve()}
    for folder in (data, data / "tasks"):
        if folder.is_dir():
            paths |= {entry.resolve().parent for entry in folder.iterdir() if entry.is_symlink()}
    return sorted(paths)


@dataclass
class AppWorldServerConfig:
    """How to run one AppWorld environment server."""

    root: Path
    """The data root: the folder that contains `data/` (what AppWorld calls APPWORLD_ROOT): the official download or
    a synthetic world (`synthetic.build_synthetic_world`)."""
    venv: Path = APPWORLD_VENV
    """AppWorld's venv (`make appworld`)."""
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    """The OS-level sandbox the server runs in (`core/sandbox.py`); mode "none" is the opt-in without isolation."""
    start_timeout_s: float = 90.0
    """Seconds to wait for the server to answer GET / (about 4 s when idle, slower on busy cores)."""
    request_timeout_s: float = 120.0
    """The client's timeout for one request (see `AppWorldClient.timeout_s`)."""
    max_idle_memory_mb: int = 1024
    """A server whose resident memory is above this between episodes is recycled (`recycle_reason`): code that filled
    memory leaves the next episode a fresh server. A fresh server holds ~250 MB, ~300 MB after a task."""


class AppWorldServer:
    """One AppWorld environment server in its sandbox; a context manager (`with AppWorldServer(config) as server:`).

    `client` stays the same object across restarts (its socket follows the server), so environments holding the
    server keep working after `ensure_running` or `recycle`; the new server holds no task, so they `reset`."""

    def __init__(self, config: AppWorldServerConfig):
        self.config = config
        self.client = AppWorldClient("", timeout_s=config.request_timeout_s, log_tail=self.log_tail)
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._folder: Path | None = None
        self._log_path: Path | None = None
        self._baseline: Footprint | None = None
        self._idle_threads = 0  # threads it held when last found idle (`recycle_reason`)

    def start(self) -> AppWorldServer:
        """Start the server in its sandbox and wait until it answers; raises AppWorldServerError (with its log) if it
        does not, SandboxUnavailableError (one line) if the sandbox cannot run here."""
        if self.process is not None:
            raise RuntimeError(f"AppWorld server already started at {self.client.address}")
        venv = Path(self.config.venv).resolve()
        python = appworld_python(venv)
        data = Path(self.config.root).resolve() / "data"
        if not data.is_dir():
            raise FileNotFoundError(f"{self.config.root} has no data/ folder: set the data root to the folder that "
                                    "contains AppWorld's data/ (docs/appworld.md)")
        if self.config.sandbox.mode == "bwrap":
            check_sandbox()
        # The log lies outside the scratch root, where the sandboxed code cannot write.
        self._folder = Path(tempfile.mkdtemp(prefix="appworld_server_"))
        scratch = self._folder / "root"
        scratch.mkdir()
        (scratch / "data").symlink_to(data, target_is_directory=True)
        self._log_path = self._folder / "server.log"
        sandbox = Sandbox(self.config.sandbox, scratch, read_only=(venv, base_prefix(venv), *data_paths(data)),
                          env={"APPWORLD_ROOT": str(scratch), "APPWORLD_CACHE": str(venv / "appworld-cache")})
        socket_path = scratch / SOCKET_NAME
        # -I: nothing of the kit's environment (PYTHONPATH, user site) on AppWorld's sys.path.
        command = sandbox.command([str(python), "-I", "-c", SERVE, str(socket_path)])
        with open(self._log_path, "ab") as server_log:
            self.process = subprocess.Popen(command, cwd=scratch, stdin=subprocess.DEVNULL, stdout=server_log,
                                            stderr=subprocess.STDOUT, **sandbox.popen_kwargs())
        self.client.socket_path = str(socket_path)
        self.client.active_task = None
        try:
            self._wait_healthy()
        except AppWorldServerError:
            self.stop()
            raise
        self._baseline = process_footprint(self.process.pid)
        self._idle_threads = self._baseline.threads
        atexit.register(self.stop)
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AppWorldServerError(f"AppWorld server exited with status {self.process.returncode} while "
                                          f"starting\n--- end of the server log ---\n{self.log_tail()}", "down")
            if self.client.healthy():
                return
            time.sleep(0.25)
        raise AppWorldServerError(f"AppWorld server at {self.client.address} did not answer within "
                                  f"{self.config.start_timeout_s:g} s\n--- end of the server log ---\n"
                                  f"{self.log_tail()}", "timeout")

    @property
    def pid(self) -> int | None:
        """The sandbox's outermost process (killing it ends the sandbox); None when stopped."""
        return None if self.process is None else self.process.pid

    def running(self) -> bool:
        """The process has not exited (no request: cheap enough to ask before every execution)."""
        return self.process is not None and self.process.poll() is None

    def footprint(self) -> Footprint:
        """What the sandbox holds now (all zero when stopped)."""
        return Footprint(0, 0, 0.0, 0.0) if self.process is None else process_footprint(self.process.pid)

    def alive(self) -> bool:
        """The process runs and answers GET /."""
        return self.process is not None and self.process.poll() is None and self.client.healthy()

    def leftovers(self, now: Footprint) -> str | None:
        """The processes code left running in the sandbox after its execution, given the sandbox's `footprint()`
        then (a `sleep 300 &` included: detached processes stay in the sandbox's tree), or None. The server itself
        runs none."""
        if self.process is None or self._baseline is None:
            return None
        extra = now.processes - self._baseline.processes
        return f"the code left {extra} processes running in the AppWorld server's sandbox" if extra > 0 else None

    def busy_while_idle(self) -> bool:
        """Whether the sandbox spends CPU while no request runs (watched for `IDLE_PROBE_S`): a thread the code left
        spinning. Call it between requests."""
        if self.process is None:
            return False
        before = process_footprint(self.process.pid).cpu_seconds
        time.sleep(IDLE_PROBE_S)
        return process_footprint(self.process.pid).cpu_seconds - before > IDLE_PROBE_S / 2

    def recycle_reason(self) -> str | None:
        """Why this server should not serve another episode, or None: threads beyond the server's own
        (`THREAD_SLACK`), resident memory above `max_idle_memory_mb`, half of its CPU-seconds limit spent (so that the
        limit ends runaway code, not a server that served many episodes), three quarters of its open-files limit
        held (AppWorld keeps every task it loaded open: a server that validated a few score of tasks then refused
        the next with "Too many open files"), or CPU spent while it waits for a request
        (watched for `IDLE_PROBE_S` when it holds more threads than when last found idle). Call it between
        episodes."""
        if self.process is None or self._baseline is None:
            return None
        now = process_footprint(self.process.pid)
        if now.threads > self._baseline.threads + THREAD_SLACK:
            return f"it runs {now.threads} threads ({self._baseline.threads} when it started)"
        if now.memory_mb > self.config.max_idle_memory_mb:
            return f"it holds {now.memory_mb:.0f} MB (> {self.config.max_idle_memory_mb} MB)"
        if now.cpu_seconds > self.config.sandbox.limits.cpu_seconds / 2:
            return f"it spent {now.cpu_seconds:.0f} CPU seconds (half of its limit)"
        if now.open_files > self.config.sandbox.limits.open_files * 3 // 4:
            return (f"it holds {now.open_files} open files (limit {self.config.sandbox.limits.open_files}; AppWorld "
                    "keeps each task it loaded open)")
        if now.threads > self._idle_threads:  # watched only when it has more threads than when last found idle
            if self.busy_while_idle():
                return "it spends CPU while idle (a thread left spinning)"
            self._idle_threads = now.threads
        return None

    def ensure_running(self) -> bool:
        """Restart the server if it died or hangs; True if it was restarted (it then holds no task: reset the env).
        Call it from the server's own worker between requests (after an AppWorldServerError): AppWorld runs code on
        the server's event loop, so while it executes a request even GET / waits, and the server looks hung."""
        if self.alive():
            return False
        log.warning("AppWorld server at %s is dead or hung; restarting it. End of its log:\n%s", self.client.address,
                    self.log_tail())
        self.restart()
        return True

    def restart(self) -> None:
        """Stop the server, sandbox and all, and start a fresh one (the recycling of a server code touched)."""
        self.stop()
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        """Kill the sandbox (every process in it) and remove its scratch root. Safe to call twice."""
        atexit.unregister(self.stop)
        if self.process is not None:
            kill_sandbox(self.process)
            self.process = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (uvicorn's and AppWorld's output, tracebacks of refused requests included)."""
        if self._log_path is None or not self._log_path.exists():
            return "(no server log)"
        with open(self._log_path, "rb") as server_log:  # its end only: code can print up to the file-size limit
            server_log.seek(max(server_log.seek(0, 2) - 4 * chars, 0))
            text = server_log.read().decode(errors="replace")
        return text[-chars:] if text else "(the server log is empty)"

    def __enter__(self) -> AppWorldServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
