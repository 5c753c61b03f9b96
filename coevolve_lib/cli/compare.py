"""`python -m coevolve_lib compare`: run one study of coevolve_lib/studies/catalog.py (default: the paper's Tables 2-3)
at a profile's scale, over several seeds, and print its table beside the paper's numbers.

    python -m coevolve_lib compare --profile tiny --seeds 0 1 2 [--study signals] [--set training.max_steps=20]

Each variant is one training run in `runs/studies/<profile>/`, named by its config: a finished run is reused (also by
the other studies) and a killed one resumes, so a repeated command takes seconds. Measured on the profile's held-out
set (val-split environments, never trained on or explored from; greedy success, and pass@k for the comparison) with
bootstrap 95% confidence intervals over seeds and tasks, and on the BFCL val split (the paper's metric). The rows go to
`results/<study>/<profile>_seeds<..>_steps<n>.json` (results/v2, coevolve_lib/core/results.py).
"""

from __future__ import annotations

from pathlib import Path

from coevolve_lib import profiles
from coevolve_lib.core.config import Seeds
from coevolve_lib.core.paths import FIGURES_DIR
from coevolve_lib.studies.catalog import COEVOLVE, COMPARISON, STUDIES
from coevolve_lib.studies.compare import PAPER_COLUMN, figure_file
from coevolve_lib.studies.plots import plot_learning_curves
from coevolve_lib.studies.report import paired_differences, rounds_table, study_table
from coevolve_lib.studies.run import run_study, run_summaries, variant_run


def main(argv: list[str] | None = None) -> int:
    parser = profiles.profile_parser("python -m coevolve_lib compare", __doc__, "training.max_steps=20")
    parser.add_argument("--study", default=COMPARISON.name, choices=sorted(STUDIES),
                        help=f"which study (default: {COMPARISON.name})")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    parser.add_argument("--out", help="folder of the runs (default: runs/studies/<profile>)")
    parser.add_argument("--results", help="results JSON (default: results/<study>/<profile>_seeds<..>_steps<n>.json)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs trained at once, each on one torch thread (CPU profiles; default 1)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    run = profiles.run_config_from_args(args)  # every value checked before anything runs
    args.seeds = profiles.checked("--seeds", args.seeds, Seeds)
    if args.jobs < 1:
        raise profiles.ConfigError(f"--jobs must be >= 1 (got {args.jobs})")
    if args.results and Path(args.results).is_dir():  # found now, not after every run of the study trained
        raise profiles.ConfigError(f"--results {args.results} is a directory; give the results file's path")
    study = STUDIES[args.study]
    results = run_study(study, args.profile, args.seeds, args.set, args.out, args.results, not args.quiet,
                        jobs=args.jobs)
    summaries = run_summaries(study, args.profile, args.seeds, args.set, args.out)
    steps = variant_run(args.profile, args.set, study.variants[0], args.seeds[0]).training.max_steps
    figure = figure_file(FIGURES_DIR, study, args.profile, args.seeds, steps)
    plot_learning_curves(summaries, figure)
    rank_by = run.data_engine.heldout.rank_by
    print(study_table(results, study.tables[-1:], PAPER_COLUMN, rank_by=rank_by).to_string())
    pairs = [(COEVOLVE.name, v.name) for v in study.variants if v.name != COEVOLVE.name]  # CoEvolve vs the others
    print(paired_differences(results, pairs, rank_by).to_string())
    print(rounds_table(summaries).to_string())
    print(f"learning curves: {figure}")
    return 0
