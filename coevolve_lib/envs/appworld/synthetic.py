"""A small synthetic AppWorld world, built at test time by AppWorld's own code, cached by the builder's version.

AppWorld's task data downloads only from AWS S3, so offline the kit's AppWorld path (server, client, env, metrics) is
tested on a world that `envs/appworld/world_builder.py` builds inside AppWorld's venv: api_docs, base and task
databases, two scenarios (`synnote`: create a note, 3 tasks; `synask`: answer a question, 2 tasks) with AppWorld-format
ground truth, and splits `train`, `dev` and `synthetic` (all five). Nothing AppWorld generates is committed: the world
goes to `<cache>/appworld_synthetic/<builder version>/` (about 17 MB; its build time: docs/log.md), and a changed
builder gets a new folder. Each task's known correct solution is in `solutions.json` beside `data/`, outside AppWorld's
data.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.paths import CACHE_DIR
from coevolve_lib.envs.appworld.server import APPWORLD_VENV, appworld_python

BUILDER = Path(__file__).with_name("world_builder.py")
SYNTHETIC_SPLIT = "synthetic"
"""The split holding every synthetic task (`train` and `dev` split them 3 / 2)."""


def builder_version() -> str:
    """The builder script's content hash: the cache key of the world it builds."""
    return hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:12]


@dataclass(frozen=True)
class SyntheticWorld:
    root: Path
    """The data root (contains `data/`): what `AppWorldServerConfig.root` and APPWORLD_ROOT take."""
    splits: dict[str, list[str]]
    """Task ids per split, as in `data/datasets/<split>.txt`."""
    solutions: dict[str, str]
    """Each task's known correct solution code (Python calling `apis.*`), for tests."""


def build_synthetic_world(cache_dir: Path | None = None, venv: Path = APPWORLD_VENV,
                          timeout_s: float = 600) -> SyntheticWorld:
    """The synthetic world under `<cache_dir>/<builder version>/`, built there first if it is not yet (in a side
    folder renamed into place when complete, so a killed build is never taken for a world)."""
    root = Path(cache_dir or CACHE_DIR / "appworld_synthetic") / builder_version()
    if not (root / "world.json").exists():
        partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        env = {**os.environ, "APPWORLD_CACHE": str(Path(venv).resolve() / "appworld-cache")}
        # -I: the script's folder (which holds the kit's `appworld.py`) and PYTHONPATH stay off AppWorld's sys.path.
        result = subprocess.run([str(appworld_python(venv)), "-I", str(BUILDER), str(partial)], env=env, cwd=partial,
                                capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise RuntimeError(f"building the synthetic AppWorld world failed (status {result.returncode}):\n"
                               f"{result.stderr[-3000:]}")
        try:
            partial.rename(root)
        except OSError:  # another process finished the same build first
            shutil.rmtree(partial, ignore_errors=True)
    world = json.loads((root / "world.json").read_text())
    return SyntheticWorld(root=root, splits=world["splits"],
                          solutions=json.loads((root / "solutions.json").read_text()))
