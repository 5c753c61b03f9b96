"""`python -m coevolve_lib sweep`: choose a profile's GRPO recipe by measurement. Each cell of a sweep file
(`configs/sweeps/<name>.yaml`) is a set of overrides on top of the sweep's base; every cell is one training run of
the study machinery (`coevolve_lib/studies/run.py`: runs named by config, reused, resumed, `--jobs` at a time), measured
the same way.

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

import pandas as pd

from coevolve_lib import profiles
from coevolve_lib.core.paths import FIGURES_DIR, RESULTS_DIR
from coevolve_lib.studies.plots import plot_learning_curves
from coevolve_lib.studies.report import study_table
from coevolve_lib.studies.run import run_study, run_summaries
from coevolve_lib.studies.sweep import load_sweep, sweep_study, sweep_table


def main(argv: list[str] | None = None) -> int:
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
