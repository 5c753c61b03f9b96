"""Where the kit keeps what it builds and writes.

COEVOLVE_CACHE, COEVOLVE_RESULTS_DIR, COEVOLVE_FIGURES_DIR and COEVOLVE_RUNS_DIR override the defaults (the tests point
the last three at a scratch folder, so that running the notebooks under nbval never rewrites committed results)."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
LIBRARY_DATA = REPO_ROOT / "coevolve_lib" / "data"
"""What the library ships beside its code: the held-out sets' ids, the warm starts."""
CACHE_DIR = Path(os.environ.get("COEVOLVE_CACHE", REPO_ROOT / ".cache"))
MODELS_DIR = CACHE_DIR / "models"
RESULTS_DIR = Path(os.environ.get("COEVOLVE_RESULTS_DIR", REPO_ROOT / "results"))
FIGURES_DIR = Path(os.environ.get("COEVOLVE_FIGURES_DIR", REPO_ROOT / "figures"))
RUNS_DIR = Path(os.environ.get("COEVOLVE_RUNS_DIR", REPO_ROOT / "runs"))


def is_profile_path(name: str) -> bool:
    """Whether a profile is given as a file's path (it ends in .yaml / .yml or names a folder), not as a name of
    configs/ (`profiles.profile_path`)."""
    return "/" in name or os.sep in name or name.endswith((".yaml", ".yml"))


def profile_label(profile: str) -> str:
    """A profile's name in folder and file names: its own name, or a path profile's file stem."""
    return Path(profile).stem if is_profile_path(profile) else profile


def repo_relative(path: str | Path) -> str:
    """`path` relative to the repository root, `../...` when it lies outside the checkout (e.g. a test's folder):
    results must not name a machine's folders."""
    return os.path.relpath(Path(path).expanduser().resolve(), REPO_ROOT)


def shown_path(path: str | Path) -> str:
    """How a path is printed or names a model: relative to the repository root when it lies inside it, else as given
    (a hub id such as `Qwen/Qwen3-4B-Instruct-2507` stays what it is)."""
    resolved = Path(path).expanduser().resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)


KIT_FOLDERS = ("coevolve_lib", "configs", "tests", "notebooks", "benchmarks", "docs", "shared", ".git", ".ci")
"""The repository's own folders: no command writes into them (`checked_output`)."""


def checked_output(path: str | Path, option: str = "--out") -> Path:
    """`path` as a place a command may write: a ConfigError naming `option` when it is the repository root, lies in
    one of `KIT_FOLDERS`, or is one of the repository's own top-level files (a result written over a source file
    replaces it; one over `.git/config` breaks git). Elsewhere, in the repository's runs/, results/ or figures/ or
    outside it, as given."""
    from coevolve_lib.core.config import ConfigError  # config's own imports come first: no cycle

    resolved = Path(path).expanduser().resolve()
    inside = next((name for name in KIT_FOLDERS if resolved.is_relative_to((REPO_ROOT / name).resolve())), None)
    own_file = resolved.parent == REPO_ROOT and resolved.is_file() and resolved.suffix != ".json"
    if inside or own_file or resolved == REPO_ROOT:
        where = f"inside the kit's own {inside}/" if inside else "one of the kit's own files" if own_file else \
            "the repository itself"
        raise ConfigError(f"{option} {path} is {where}: give a path under runs/ (the default) or outside the "
                         "repository")
    return Path(path)
