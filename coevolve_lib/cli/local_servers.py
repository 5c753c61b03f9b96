"""Real OpenAI-compatible servers on loopback, started and stopped by the kit: `transformers serve` (transformers' own,
the `serving` extras `make setup` installs), `vllm serve` and `trl vllm-serve` (vLLM's, from `.venv-vllm/`, `make
vllm`). They are the servers the tests talk to (not the kit's own, `coevolve_lib/cli/openai_server.py`), and the
endpoint `python -m coevolve_lib record-explorer` records an offline explorer's calls from.

Start-up and shutdown are bounded: the server must answer `/health` within its start budget, and is stopped with
SIGTERM, then SIGKILL after `STOP_S`. Its log (stdout and stderr) is kept in a file. It runs in the repository root, so
that a model folder given relative to it is the model's name in requests (`openai:coevolve_lib/data/warm_start/tiny`),
the same on every machine (a recording's keys hold it)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from coevolve_lib.core.config import RunError
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.sandbox import DIES_WITH_PARENT

TRANSFORMERS_START_S = 90
"""Longest `transformers serve` may take to answer /health (it loads the forced model first: seconds on CPU)."""
VLLM_START_S = 420
"""Longest `vllm serve` may take to answer /health: 45-90 s measured on 2 cores with `--enforce-eager` (its engine
process starts, loads, profiles memory and allocates the KV cache), several times that beside other work."""
STOP_S = 10
"""Seconds a server may take to stop after SIGTERM before it is killed."""
VLLM_VENV = REPO_ROOT / ".venv-vllm"
"""vLLM's own venv (`make vllm`): its pins differ from the kit's main venv in two packages (docs/training.md)."""
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
"""vLLM's CPU settings for a shared 2-core machine: 1 GiB of KV cache (the default takes a fixed share of memory) and
no OpenMP thread pinning (vLLM would reserve and bind cores other processes are using)."""
SERVED_CONTEXT = 8192
"""`--max-model-len` of a served model: the kit's longest prompts with full tool docs fit (BFCL's longest first prompt
is 5,202 Qwen tokens), and vLLM needs room for one such sequence in its KV cache."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def transformers_serve(model_folder: str | Path, log_path: Path, port: int | None = None):
    """Serve `model_folder` (a local model folder, preloaded) with `transformers serve` on a loopback port (`port`,
    else a free one); yields `(base_url, log_path, process)`."""
    binary = Path(sys.executable).with_name("transformers")
    if not binary.exists():
        raise RunError(f"{binary} is not installed: `make setup` installs transformers with its serving extras")
    port = port or free_port()
    command = [str(binary), "serve", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--log-level",
               "info", str(model_folder)]
    with _served("transformers serve", command, {"OMP_NUM_THREADS": "1"}, port, log_path, TRANSFORMERS_START_S) as up:
        yield up


def _vllm_venv_command(name: str) -> str:
    """A command of vLLM's venv (`vllm`, `trl`); a RunError naming `make vllm` when that venv is not built."""
    binary = VLLM_VENV / "bin" / name
    if not binary.exists():
        raise RunError(f"{binary} is not installed: `make vllm` builds vLLM's CPU venv (docs/training.md)")
    return str(binary)


@contextlib.contextmanager
def vllm_serve(model_folder: str | Path, log_path: Path, port: int | None = None):
    """Serve `model_folder` with `vllm serve` from `.venv-vllm/` on a loopback port, as a GPU user serves a checkpoint
    for evaluation (docs/training.md section 6: the hermes tool-call parser) but in float32 and eager mode (no
    torch.compile warm-up: minutes on 2 cores); yields `(base_url, log_path, process)`."""
    port = port or free_port()
    command = [_vllm_venv_command("vllm"), "serve", str(model_folder), "--host", "127.0.0.1", "--port", str(port),
               "--dtype", "float32", "--max-model-len", str(SERVED_CONTEXT), "--enable-auto-tool-choice",
               "--tool-call-parser", "hermes", "--enforce-eager"]
    with _served("vllm serve", command, VLLM_CPU_ENV, port, log_path, VLLM_START_S) as up:
        yield up


@contextlib.contextmanager
def trl_vllm_serve(model_folder: str | Path, log_path: Path, port: int | None = None):
    """`trl vllm-serve` from `.venv-vllm/` (TRL's server for GRPO's server mode, which in TRL 1.16 runs vLLM's own
    server with TRL's weight-transfer settings) on a loopback port, float32 and eager; yields `(base_url, log_path,
    process)`, `base_url` without `/v1` (TRL's `VLLMClient` takes the server's root)."""
    port = port or free_port()
    command = [_vllm_venv_command("trl"), "vllm-serve", "--model", str(model_folder), "--host", "127.0.0.1", "--port",
               str(port), "--dtype", "float32", "--max-model-len", str(SERVED_CONTEXT), "--enforce-eager"]
    with _served("trl vllm-serve", command, VLLM_CPU_ENV, port, log_path, VLLM_START_S) as (base_url, log, server):
        yield base_url.removesuffix("/v1"), log, server


@contextlib.contextmanager
def _served(name: str, command: list[str], env: dict, port: int, log_path: Path, start_s: float):
    """Run `command` until the block ends; yields once `/health` on `port` answers (a RuntimeError with the log's end
    when the server exits first or takes longer than `start_s`)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    with open(log_path, "w") as log:
        # its own session (its group is stopped whole), and killed with the kit however the kit ends
        server = subprocess.Popen([*DIES_WITH_PARENT, *command], stdout=log, stderr=subprocess.STDOUT, env=env,
                                  cwd=REPO_ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + start_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"{name} exited with {server.returncode}: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer /health in {start_s} s: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", log_path, server
    finally:
        _stop(server)


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (vLLM's engine runs in a child process), then, once the server has ended
    or after `STOP_S`, SIGKILL to whatever of the group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=STOP_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()
