"""`transformers serve` (transformers' own OpenAI-compatible server, the `serving` extras `make setup` installs) on
loopback: the real server the tests talk to (not the kit's own, `coevolve_lib/cli/openai_server.py`), and the
endpoint `python -m coevolve_lib record-explorer` records an offline explorer's calls from.

Start-up and shutdown are bounded: the server must answer `/health` within `START_S`, and is stopped with SIGTERM,
then SIGKILL after `STOP_S`. Its log (stdout and stderr) is kept in a file. It runs in the repository root, so that
a model folder given relative to it is the model's name in requests (`openai:coevolve_lib/data/warm_start/tiny`),
the same on every machine (a recording's keys hold it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.paths import REPO_ROOT

START_S = 90
"""Longest the server may take to answer /health (it loads the forced model first: seconds on CPU)."""
STOP_S = 10
"""Seconds the server may take to stop after SIGTERM before it is killed."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def transformers_serve(model_folder: str | Path, log_path: Path, port: int | None = None):
    """Serve `model_folder` (a local model folder, preloaded) on a loopback port (`port`, else a free one); yields
    `(base_url, log_path, process)`."""
    port = port or free_port()
    binary = Path(sys.executable).with_name("transformers")
    if not binary.exists():
        raise RunError(f"{binary} is not installed: `make setup` installs transformers with its serving extras")
    command = [str(binary), "serve", "--host", "127.0.0.1", "--port",
               str(port), "--device", "cpu", "--log-level", "info", str(model_folder)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {server.returncode}: "
                                   f"{log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve did not answer /health in {START_S} s: "
                                   f"{log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", log_path, server
    finally:
        server.terminate()
        try:
            server.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
