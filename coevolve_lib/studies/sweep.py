"""`python -m coevolve_lib sweep`: choose a profile's GRPO recipe by measurement. Each cell of a sweep file
(`configs/sweeps/<name>.yaml`) is a set of overrides on top of the sweep's base; every cell is one training run of
the study machinery (`coevolve_lib/studies/run.py`: runs named by config, reused, resumed, `--jobs` at a time), measured the
same way.

    python -m coevolve_lib sweep --sweep tiny-grpo --jobs 2      # configs/sweeps/tiny-grpo.yaml

For every cell it reports greedy success on both held-out sets and on the fixed D_0 sample at each evaluation step
(so one run also answers "how many steps"), GRPO's health (the zero-variance share of the drawn and the trained groups,
the policy's token entropy) and the wall time, beside the starting policy. Rows go to
`results/<profile>/sweep/<sweep>_seeds<..>.json` (results/v2), the table to the terminal and the learning curves to
`figures/<profile>/sweep/`.

A sweep file:

    profile: tiny
    seeds: [0]
    base: [training.pool_updates=none, training.eval_every=8]     # every cell's overrides start with these
    cells:
      center: []
      lr_3e-4: [training.learning_rate=3.0e-4]
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
import yaml

from coevolve_lib.core import profiles
from coevolve_lib.core.paths import FIGURES_DIR, RESULTS_DIR
from coevolve_lib.core.results import HELDOUT_TITLES
from coevolve_lib.studies.run import Study, Variant, run_study, run_summaries

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
        sweep = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise profiles.ConfigError(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    unknown = set(sweep) - {"profile", "seeds", "base", "cells"}
    cells = sweep.get("cells")
    if unknown or not isinstance(cells, dict) or not cells:
        raise profiles.ConfigError(f"{path}: a sweep holds profile, seeds, base and a non-empty `cells` mapping"
                                   + (f" (unknown keys {sorted(unknown)})" if unknown else ""))
    sweep = {"name": path.stem, "profile": sweep.get("profile", "tiny"), "seeds": list(sweep.get("seeds", [0])),
             "base": list(sweep.get("base", [])), "cells": {str(k): list(v or []) for k, v in cells.items()}}
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


def main(argv: list[str] | None = None) -> int:
    from coevolve_lib.studies.report import plot_learning_curves, study_table

    parser = profiles.profile_parser("python -m coevolve_lib sweep", __doc__, "training.max_steps=16")
    parser.add_argument("--sweep", required=True, help="a sweep file, or its name in configs/sweeps/")
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at once, one torch thread each (default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        raise profiles.ConfigError(f"--jobs must be >= 1 (got {args.jobs})")
    sweep = load_sweep(args.sweep)
    if args.set:  # on top of the file's base; every cell checked again
        sweep["base"] += args.set
        for overrides in sweep["cells"].values():
            profiles.run_config(sweep["profile"], [*sweep["base"], *overrides])
    study = sweep_study(sweep)
    results_dir = RESULTS_DIR / sweep["profile"] / "sweep"
    seeds = sweep["seeds"]
    results = run_study(study, sweep["profile"], seeds, sweep["base"], progress=not args.quiet, jobs=args.jobs,
                        results_path=results_dir / f"{sweep['name']}_seeds{'-'.join(map(str, seeds))}.json")
    summaries = run_summaries(study, sweep["profile"], seeds, sweep["base"])
    figure = FIGURES_DIR / sweep["profile"] / "sweep" / f"{sweep['name']}.png"
    plot_learning_curves(summaries, figure)
    rank_by = profiles.run_config(sweep["profile"], sweep["base"]).data_engine.heldout.rank_by
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 60):
        table = study_table(results, (), "BFCL", rank_by=rank_by)
        print(table.drop(columns=[c for c in table.columns if c.startswith("paper") or c == "scale"]).to_string())
        print(sweep_table(summaries).to_string())
    print(f"learning curves: {figure}")
    return 0
