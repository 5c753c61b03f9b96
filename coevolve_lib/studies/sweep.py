"""GRPO recipe sweeps (`python -m coevolve_lib sweep`, coevolve_lib/cli/sweep.py, whose help shows a sweep file): a
sweep file (`configs/sweeps/<name>.yaml`) read and checked, as a study of the study machinery
(`coevolve_lib/studies/run.py`: one variant per cell, the starting policy as its zero-shot row), and its table:
per cell, greedy success on both held-out sets and the D_0 sample at each evaluation step, and GRPO's health."""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
import yaml

from coevolve_lib import profiles
from coevolve_lib.core.config import Seeds
from coevolve_lib.core.results import HELDOUT_TITLES
from coevolve_lib.core.user_yaml import load_yaml_file
from coevolve_lib.studies.run import Study, Variant

SWEEPS_DIR = profiles.CONFIGS_DIR / "sweeps"


def load_sweep(name_or_path: str) -> dict:
    """A sweep file by name (configs/sweeps/<name>.yaml) or path, checked: profile, seeds, base, cells."""
    path = Path(name_or_path)
    if not path.suffix:
        path = SWEEPS_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        choices = sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml"))
        raise profiles.ConfigError(f"no sweep {name_or_path!r}: give a file or one of {choices}")
    try:
        sweep = load_yaml_file(path) or {}
    except yaml.YAMLError as error:
        raise profiles.ConfigError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(sweep, dict):  # a YAML list or string
        sweep = {"cells": None}
    unknown = set(sweep) - {"profile", "seeds", "base", "cells"}
    cells = sweep.get("cells")
    if unknown or not isinstance(cells, dict) or not cells:
        raise profiles.ConfigError(f"{path}: a sweep holds profile, seeds, base and a non-empty `cells` mapping"
                                   + (f" (unknown keys {sorted(map(str, unknown))})" if unknown else ""))
    strings = list[str]  # the base's and each cell's `section.field=value` overrides
    sweep = {"name": path.stem, "profile": sweep.get("profile", "tiny"),
             "seeds": profiles.checked(f"{path}: seeds", sweep.get("seeds", [0]), Seeds),
             "base": profiles.checked(f"{path}: base", sweep.get("base") or [], strings),
             "cells": {str(k): profiles.checked(f"{path}: cells.{k}", v or [], strings) for k, v in cells.items()}}
    for overrides in sweep["cells"].values():  # every cell's config is checked before anything runs
        profiles.run_config(sweep["profile"], [*sweep["base"], *overrides])
    return sweep


def sweep_study(sweep: dict) -> Study:
    """The sweep as a study: one variant per cell, the starting policy as its zero-shot row."""
    return Study(f"sweep_{sweep['name']}", (),
                 tuple(Variant(cell, tuple(overrides)) for cell, overrides in sweep["cells"].items()),
                 zero_shot="starting policy")


def cell_health(summary: dict) -> dict:
    """GRPO's health over a run: the mean zero-variance share of the drawn and the trained groups, the policy's
    token entropy at the start and the end, and the wall time."""
    def mean(values):
        values = [v for v in values if v is not None]
        return round(statistics.mean(values), 3) if values else None

    entropy = [v for v in summary.get("entropy_curve", []) if v is not None]
    time = summary["time"]
    return {"zero_std drawn": mean(summary.get("zero_std_drawn_curve", [])),
            "zero_std trained": mean(summary.get("zero_std_trained_curve", [])),
            "entropy first/last": f"{entropy[0]:.3f} / {entropy[-1]:.3f}" if entropy else "-",
            "wall s": round(sum(time.get(k) or 0 for k in ("train_s", "eval_s", "feedback_s")))}


def sweep_table(summaries: dict[str, list[dict]]) -> pd.DataFrame:
    """One row per cell (and seed): greedy success on each held-out set and the D_0 sample at every evaluation step
    (`a -> b -> c`), then `cell_health`."""
    rows = []
    for cell, runs in summaries.items():
        for summary in runs:
            curve = summary["eval_curve"]
            row = {"cell": cell, "seed": summary["seed"], "steps": summary["steps"],
                   "eval steps": " / ".join(str(e["step"]) for e in curve)}
            for name, title in [*HELDOUT_TITLES.items(), ("d0", "D_0 sample")]:
                values = [e.get(f"eval/{name}_greedy_success") for e in curve]
                if any(v is not None for v in values):
                    row[f"{title} %"] = " -> ".join("-" if v is None else f"{v:.1f}" for v in values)
            rows.append({**row, **cell_health(summary)})
    return pd.DataFrame(rows).set_index(["cell", "seed"])
