"""`python -m coevolve_lib bfcl-replay`: replay BFCL ground truth, and perturbed ground truth, through the kit's BFCLEnv
and the official checker (`envs.bfcl.replay`); exit status 0 when the ground truth passes and both agree on every case.

    python -m coevolve_lib bfcl-replay --data-version v3 --category all [--limit N]

The last stdout line is one JSON object, `replay`'s summary:
  {"data_version": ..., "categories": {cat: {"tasks", "gt_passed", "perturbed", "perturbed_rejected",
   "skipped", "agreement", "agreement_total"}}}
Disagreements are listed on stderr.
"""

from __future__ import annotations

import json

from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.replay import replay
from coevolve_lib.profiles import ArgumentParser


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser("python -m coevolve_lib bfcl-replay", __doc__)
    parser.add_argument("--data-version", choices=sorted(bfcl_backend.BFCL_RELEASES), default="v3")
    parser.add_argument("--category", choices=[*bfcl_backend.CATEGORY_ALIASES, "all"], default="all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks of each category")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be >= 1 (got {args.limit})")
    categories = list(bfcl_backend.CATEGORIES) if args.category == "all" else [args.category]
    summary = replay(args.data_version, categories, args.limit, progress=not args.quiet)
    print(json.dumps(summary))
    perfect = all(c["gt_passed"] == c["tasks"] and c["agreement"] == c["agreement_total"]
                  for c in summary["categories"].values())
    return 0 if perfect else 1
