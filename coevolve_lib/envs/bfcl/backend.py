"""Access to one installed `bfcl-eval` wheel: its data files, executable backend classes and official checker.

BFCL v3 (what the paper used) and v4 ship in different releases of the same `bfcl_eval` package, and their
backend classes differ, so each data version is installed `--no-deps` into its own folder under the cache
(`python -m coevolve_lib setup`) and a process imports exactly one of them. Asking for the other version
later in the same process is an error with a clear message, never a silent mix of data and backends.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from functools import cache
from pathlib import Path

from coevolve_lib.core.paths import CACHE_DIR

BFCL_RELEASES = {"v3": "2025.6.8", "v4": "2026.3.23"}
"""bfcl-eval release that carries each data version (v3 = the multi-turn data before July 2025)."""

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORY_ALIASES = {c.removeprefix("multi_turn_"): c for c in CATEGORIES}
CLASSES = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
           "VehicleControlAPI")
"""The stateful backend classes of BFCL multi-turn (v3 and v4)."""

_loaded_version: str | None = None


def normalize_category(category: str) -> str:
    """Accept `base` or `multi_turn_base` (etc.); raise ValueError naming the valid choices otherwise."""
    full = CATEGORY_ALIASES.get(category, category)
    if full not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; choose from {sorted(CATEGORY_ALIASES)}")
    return full


def install_dir(version: str) -> Path:
    if version not in BFCL_RELEASES:
        raise ValueError(f"unknown BFCL data version {version!r}; choose from {sorted(BFCL_RELEASES)}")
    return CACHE_DIR / "bfcl" / version


@cache
def use_version(version: str):
    """Import `bfcl_eval` from the folder of `version` (once per process) and return the package module.

    Cached (a failure is not), because envs look classes up on every reset and path checks are slow."""
    global _loaded_version
    root = install_dir(version)
    if _loaded_version is not None and _loaded_version != version:
        raise RuntimeError(
            f"this process already loaded BFCL {_loaded_version}; BFCL {version} needs a new process "
            "(the two data versions ship different backend code under the same package name)"
        )
    if not (root / "bfcl_eval").is_dir():
        raise FileNotFoundError(
            f"BFCL {version} (bfcl-eval=={BFCL_RELEASES[version]}) is not installed in {root}; "
            "run `make setup` or `python -m coevolve_lib setup`"
        )
    if _loaded_version is None:
        # Importing bfcl_eval.utils would create result/ and score/ folders under this root; keep them in the cache.
        os.environ.setdefault("BFCL_PROJECT_ROOT", str(CACHE_DIR / "bfcl" / "project_root"))
        sys.path.insert(0, str(root))
        _loaded_version = version
    package = importlib.import_module("bfcl_eval")
    if Path(package.__file__).resolve().parent != (root / "bfcl_eval").resolve():
        raise RuntimeError(f"bfcl_eval was imported from {package.__file__}, not from {root}; uninstall it from "
                           "site-packages")
    return package


def data_dir(version: str) -> Path:
    return Path(use_version(version).__file__).parent / "data"


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@cache
def read_entries(version: str, category: str) -> tuple[list[dict], list[dict]]:
    """The question entries and possible-answer entries of one category, in file order."""
    category = normalize_category(category)
    prefix = f"BFCL_{version}_{category}.json"
    d = data_dir(version)
    return _read_jsonl(d / prefix), _read_jsonl(d / "possible_answer" / prefix)


@cache
def _release_constant(version: str, name: str):
    """A constant that one release keeps in `executable_backend_config` and the other in another module."""
    use_version(version)
    for module in ("bfcl_eval.constants.executable_backend_config",
                   "bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils",
                   "bfcl_eval.constants.category_mapping"):
        try:
            value = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if value is not None:
            return value
    raise RuntimeError(f"bfcl-eval {BFCL_RELEASES[version]} defines no {name}")


@cache
def func_docs(version: str, class_name: str) -> tuple[dict, ...]:
    """The function docs (Gorilla schema) of one backend class."""
    file_name = _release_constant(version, "MULTI_TURN_FUNC_DOC_FILE_MAPPING")[class_name]
    return tuple(_read_jsonl(data_dir(version) / "multi_turn_func_doc" / file_name))


@cache
def backend_class(version: str, class_name: str) -> type:
    """The executable backend class (e.g. GorillaFileSystem) of this data version."""
    module = _release_constant(version, "CLASS_FILE_PATH_MAPPING")[class_name]
    return getattr(importlib.import_module(module), class_name)


@cache
def stateless_classes(version: str) -> frozenset[str]:
    return frozenset(_release_constant(version, "STATELESS_CLASSES"))


def checker_module(version: str):
    """The release's `multi_turn_checker` module. The kit reuses its pure per-turn sub-checkers
    (`state_checker`, `response_checker`, `is_empty_execute_response`), which touch no globals."""
    use_version(version)
    return importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")


def official_checker(version: str):
    """The release's own `multi_turn_checker` and `multi_turn_utils` module (used only to compare verdicts)."""
    checker = checker_module(version)
    utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    return checker.multi_turn_checker, utils
