"""`python -m coevolve_lib train`: train a profile's policy with the CoEvolve loop (`training.loop`) into a run folder
(default: runs/train_<profile>; a run folder that exists is resumed), or print the run plan with --dry-run
(`training.plan.plan`: the resolved config, the launch commands, each recipe's memory per GPU; loads nothing). A run
whose recipe does not fit its GPUs (`training.memory`) is refused in one line that names one that fits, the dry run
too (after printing the plan)."""

from __future__ import annotations

import json
import sys

from coevolve_lib import profiles
from coevolve_lib.core.llm_calls import recording_warning
from coevolve_lib.core.paths import RUNS_DIR, checked_output, profile_label
from coevolve_lib.training import loop
from coevolve_lib.training.memory import GPU_MEMORY_GB, memory_refusal
from coevolve_lib.training.plan import plan


def main(argv: list[str] | None = None) -> int:
    parser = profiles.profile_parser("python -m coevolve_lib train", f"{__doc__}\n\n{loop.__doc__}",
                                     "training.max_steps=20")
    parser.add_argument("--out", help="run folder (default: runs/train_<profile>)")
    parser.add_argument("--gpu", choices=GPU_MEMORY_GB, help="the GPUs the run is planned for: their memory "
                        "(training.launch.gpu_memory_gb; the paper profiles plan for the paper's h20, 96 GB)")
    parser.add_argument("--dry-run", action="store_true", help="resolve the config and print the plan; load nothing")
    parser.add_argument("--no-resume", action="store_true", help="refuse to continue an existing run folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.gpu:  # a --set like any other, so the printed commands carry it
        args.set = [f"training.launch.gpu_memory_gb={GPU_MEMORY_GB[args.gpu]:g}", *args.set]
    run = profiles.run_config_from_args(args)
    out_dir = checked_output(args.out or RUNS_DIR / f"train_{profile_label(args.profile)}")
    if out_dir.exists() and not out_dir.is_dir():  # found now, not after D_0 is built
        raise profiles.ConfigError(f"--out {out_dir} is a file; give a run folder (a new one, or a run to resume)")
    if args.dry_run:
        resolved = plan(run, out_dir, args.set)
        print(json.dumps(resolved, indent=2, default=str))
        refusal = memory_refusal(run, resolved["training_memory"])
        if refusal:  # the plan is printed whole; the recipe is refused, naming one that fits
            print(f"python -m coevolve_lib train: error: {refusal}", file=sys.stderr)
            return 1
        return 0
    summary = loop.train(run, out_dir, resume=not args.no_resume, progress=not args.quiet)
    if summary:
        print(json.dumps({k: summary[k] for k in ("profile", "steps", "signals_total", "pool_size_start",
                                                  "pool_size_end", "time", "llm_calls") if k in summary}, default=str))
        if summary.get("llm_calls", {}).get("over_bound"):
            print(recording_warning(summary["llm_calls"]), file=sys.stderr)
    return 0
