"""Start, watch, restart and stop AppWorld's environment server in its own venv (`.venv-appworld`, `make appworld`).

Why a separate process in a separate venv: AppWorld pins pydantic<2 (the kit runs pydantic 2), keeps one global task
world per process and runs the agent's code in its own sandbox; the kit never imports `appworld` and never executes the
agent's code itself. One server holds one task at a time, so run one server per worker.

`appworld serve environment` binds 0.0.0.0; the manager starts the same FastAPI app with uvicorn bound to 127.0.0.1.
Each server runs in its own scratch APPWORLD_ROOT whose `data` is a link to the real data root: AppWorld writes its
experiment outputs (and wipes a task's outputs on every initialize) under APPWORLD_ROOT/experiments, so servers that
share a data root must not share that folder, and the data root (e.g. the official download) stays untouched.
AppWorld stops on SIGINT (SIGTERM did not stop it within 5 s when measured), so `stop` sends SIGINT, then SIGKILL.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.envs.appworld.client import AppWorldClient, AppWorldServerError

log = logging.getLogger(__name__)

APPWORLD_VENV = REPO_ROOT / ".venv-appworld"
MAKE_TARGET = "make appworld"
SERVE = ("import os, sys, uvicorn; from appworld.serve.environment import app; "
         "uvicorn.run(app, host=sys.argv[1], port=int(sys.argv[2]), log_level='warning'); os._exit(0)")
"""AppWorld's environment server under uvicorn on loopback. After uvicorn's graceful shutdown, `os._exit` skips the
interpreter's final garbage collection over AppWorld's task world (5 s after a task ran, when measured), as
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


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS's pick); `start` retries with another if it is taken before use."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class AppWorldServerConfig:
    """How to run one AppWorld environment server."""

    root: Path
    """The data root: the folder that contains `data/` (what AppWorld calls APPWORLD_ROOT): the official download or
    a synthetic world (`synthetic.build_synthetic_world`)."""
    venv: Path = APPWORLD_VENV
    """AppWorld's venv (`make appworld`)."""
    port: int | None = None
    """Port on 127.0.0.1; None picks a free one (and another one if it is taken by the time the server binds)."""
    start_timeout_s: float = 90.0
    """Seconds to wait for the server to answer GET / (about 4 s when idle, slower on busy cores)."""
    stop_timeout_s: float = 10.0
    """Seconds to wait after SIGINT before SIGKILL."""
    request_timeout_s: float = 120.0
    """The client's timeout for one request (see `AppWorldClient.timeout_s`)."""


class AppWorldServer:
    """One AppWorld environment server process; a context manager (`with AppWorldServer(config) as server:`).

    `client` stays the same object across restarts (its URL follows the server), so environments holding the server
    keep working after `ensure_running` restarted a dead one; the restarted server holds no task, so they `reset`."""

    def __init__(self, config: AppWorldServerConfig):
        self.config = config
        self.client = AppWorldClient("http://127.0.0.1:0", timeout_s=config.request_timeout_s, log_tail=self.log_tail)
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._scratch: Path | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str:
        return self.client.base_url

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> AppWorldServer:
        """Start the server and wait until it answers; raises AppWorldServerError (with its log) if it does not."""
        if self.process is not None:
            raise RuntimeError(f"AppWorld server already started at {self.url}")
        python = appworld_python(self.config.venv)
        data = Path(self.config.root).resolve() / "data"
        if not data.is_dir():
            raise FileNotFoundError(f"{self.config.root} has no data/ folder: set the data root to the folder that "
                                    "contains AppWorld's data/ (docs/appworld.md)")
        self._scratch = Path(tempfile.mkdtemp(prefix="appworld_server_"))
        (self._scratch / "data").symlink_to(data, target_is_directory=True)
        self._log_path = self._scratch / "server.log"
        tries = 1 if self.config.port is not None else 3
        for attempt in range(tries):
            port = self.config.port or free_port()
            self._launch(python, port)
            try:
                self._wait_healthy()
                break
            except AppWorldServerError:
                self._kill()
                if attempt == tries - 1 or "address already in use" not in self.log_tail().lower():
                    self._cleanup()
                    raise
        atexit.register(self.stop)
        return self

    def _launch(self, python: Path, port: int) -> None:
        env = {**os.environ, "APPWORLD_ROOT": str(self._scratch),
               "APPWORLD_CACHE": str(Path(self.config.venv).resolve() / "appworld-cache")}
        with open(self._log_path, "ab") as log:
            # -I: nothing of the kit's environment (PYTHONPATH, user site) on AppWorld's sys.path.
            self.process = subprocess.Popen([str(python), "-I", "-c", SERVE, "127.0.0.1", str(port)], cwd=self._scratch,
                                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self.client.base_url = f"http://127.0.0.1:{port}"
        self.client.active_task = None

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AppWorldServerError(f"AppWorld server exited with status {self.process.returncode} while "
                                          f"starting\n--- end of the server log ---\n{self.log_tail()}", "down")
            if self.client.healthy():
                return
            time.sleep(0.25)
        raise AppWorldServerError(f"AppWorld server at {self.url} did not answer within {self.config.start_timeout_s:g}"
                                  f" s\n--- end of the server log ---\n{self.log_tail()}", "timeout")

    def alive(self) -> bool:
        """The process runs and answers GET /."""
        return self.process is not None and self.process.poll() is None and self.client.healthy()

    def ensure_running(self) -> bool:
        """Restart the server if it died or hangs; True if it was restarted (it then holds no task: reset the env).
        Call it from the server's own worker between requests (after an AppWorldServerError): AppWorld runs code on
        the server's event loop, so while it executes a request even GET / waits, and the server looks hung."""
        if self.alive():
            return False
        log.warning("AppWorld server at %s is dead or hung; restarting it. End of its log:\n%s", self.url,
                    self.log_tail())
        self.restart()
        return True

    def restart(self) -> None:
        """Stop (or reap) the server and start a fresh one, on the same port when the config fixes one."""
        self.stop()
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        """SIGINT, then SIGKILL after `stop_timeout_s`; removes the scratch root. Safe to call twice."""
        atexit.unregister(self.stop)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(self.config.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._kill()
        self._kill()
        self._cleanup()

    def _kill(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None

    def _cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (uvicorn's and AppWorld's output, tracebacks of refused requests included)."""
        if self._log_path is None or not self._log_path.exists():
            return "(no server log)"
        text = self._log_path.read_text(errors="replace")
        return text[-chars:] if text else "(the server log is empty)"

    def __enter__(self) -> AppWorldServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
