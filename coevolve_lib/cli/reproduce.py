"""`python -m coevolve_lib reproduce`: regenerate the paper's tables and figures by running the numbered notebooks
with papermill, in order, for one profile.

    python -m coevolve_lib reproduce --profile tiny                      # everything (`make reproduce`)
    python -m coevolve_lib reproduce --profile tiny --only table5,fig3   # the notebooks that make these
    python -m coevolve_lib reproduce --profile tiny --seeds 0,1,2        # three training seeds
    python -m coevolve_lib reproduce --profile paper-qwen3-4b --list     # every run the tables need, with commands

- Parameters: each notebook gets `profile` and, when it has one, `seeds`, plus what `configs/reproduce.yaml` lists for
  the profile (e.g. the tiny profile's shorter ablation runs); a profile not listed there runs the notebooks on their
  defaults, which are the paper's settings.
- Outputs: results go to `results/<profile>/` (JSON, and `tables.md` with every table beside the paper's numbers),
  figures to `figures/<profile>/` (PNG and PDF), each executed notebook to `runs/reproduce/<profile>/`.
- Shared runs: training runs live in folders named by their config (coevolve_lib/studies/run.py), so a run two tables
  need is trained once.
- Skips and resumes: a notebook that finished with the same parameters and the same notebook file is skipped
  (`--force` runs it again; the tables are assembled again whenever another notebook ran); a killed notebook runs
  again and its training runs resume from their checkpoints.
- Paper profiles on a machine without CUDA: nothing is trained; the driver prints the launch command of every run not
  finished yet, then assembles the tables from the runs that exist (the others are "not run").
"""

from __future__ import annotations

import sys

from papermill.exceptions import PapermillExecutionError

from coevolve_lib import profiles
from coevolve_lib.core.config import Seeds
from coevolve_lib.core.paths import shown_path
from coevolve_lib.studies.reproduce import Driver


def _list_argument(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _seeds_argument(text: str) -> list[int]:
    try:
        seeds = [int(item) for item in _list_argument(text)]
    except ValueError:
        raise profiles.ConfigError(f"--seeds: {text!r} is not a comma-separated list of integers") from None
    return profiles.checked("--seeds", seeds, Seeds)


def main(argv: list[str] | None = None) -> int:
    parser = profiles.ArgumentParser("python -m coevolve_lib reproduce", __doc__)
    parser.add_argument("--profile", default="tiny", help="profile in configs/ (default: tiny)")
    parser.add_argument("--only", help="comma-separated tables/figures, e.g. table5,fig3 (default: all)")
    parser.add_argument("--seeds", help="comma-separated training seeds (default: configs/reproduce.yaml's, else 0)")
    parser.add_argument("--list", action="store_true", help="print the notebooks and every run they need; run nothing")
    parser.add_argument("--dry-run", action="store_true", help="as --list, with each run's launch command")
    parser.add_argument("--force", action="store_true", help="run notebooks again even when complete")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.profile not in profiles.profile_names():
        raise profiles.ConfigError(f"--profile: no profile {args.profile!r}; "
                                   f"choose from {', '.join(profiles.profile_names())}")
    driver = Driver(args.profile, _seeds_argument(args.seeds) if args.seeds else None,
                    _list_argument(args.only) if args.only else None, args.force, args.quiet)
    if args.list or args.dry_run:
        print(driver.describe(with_commands=args.dry_run))
        return 0
    try:
        return driver.run()
    except PapermillExecutionError as exc:
        message = " ".join(str(exc.evalue).split())
        print(f"python -m coevolve_lib reproduce: error: a notebook stopped in cell {exc.exec_count}: "
              f"{exc.ename}: {message} (executed notebooks in {shown_path(driver.out_dir)})", file=sys.stderr)
        return 2 if exc.ename == "ConfigError" else 1
