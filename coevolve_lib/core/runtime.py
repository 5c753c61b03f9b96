"""Process-wide settings for the kit's entry points (the CLI, the notebooks, the tests), never set on import.

`configure_process()` sets offline-first defaults before torch or transformers are imported: no model hub access
unless the user asked for it, and one OpenMP thread (the default is much slower on a loaded 2-core machine:
docs/log.md; a run's `training.torch_threads` or $COEVOLVE_TORCH_THREADS raises it). Values already in the
environment win.
`announce` is the one line on stderr with which a long stage starts.
"""

import os
import sys

DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "TRL_EXPERIMENTAL_SILENCE": "1",
}


def configure_process() -> None:
    """Set the kit's defaults for every variable the environment does not set already."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)


def announce(progress: bool, message: str) -> None:
    """One line on stderr when a long stage starts (with progress on)."""
    if progress:
        print(f"[coevolve] {message}", file=sys.stderr, flush=True)
