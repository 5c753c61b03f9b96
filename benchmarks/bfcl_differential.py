"""Randomized checker differential: the kit's BFCLEnv against the official `multi_turn_checker` on mutated ground truth.

Each trajectory is one task's ground truth after 1-3 seeded mutations (`bfcl_replay.MUTATIONS`: dropped, duplicated,
swapped, moved and re-argued calls, unknown functions, builtins such as `print`, repeated keywords, turns of only
rejected calls, empty and split turns), graded by both. Prints one line per version and category (trajectories,
how many the official checker passes, disagreements, time) and each disagreement on stderr; exits 1 on any.

    .venv/bin/python benchmarks/bfcl_differential.py [--data-version v3 v4] [--trajectories 2500] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.replay import differential


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-version", nargs="+", choices=sorted(bfcl_backend.BFCL_RELEASES), default=["v3", "v4"])
    parser.add_argument("--category", nargs="+", choices=list(bfcl_backend.CATEGORY_ALIASES),
                        default=list(bfcl_backend.CATEGORY_ALIASES))
    parser.add_argument("--trajectories", type=int, default=2500, help="per version and category")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if len(args.data_version) > 1:  # a process can load one BFCL release only
        common = ["--category", *args.category, "--trajectories", str(args.trajectories), "--seed", str(args.seed)]
        codes = [subprocess.run([sys.executable, __file__, "--data-version", version, *common]).returncode
                 for version in args.data_version]
        return max(codes)
    [version] = args.data_version
    total = 0
    for category in args.category:
        result = differential(version, category, args.trajectories, args.seed)
        for case in result["disagreements"]:
            print(f"DISAGREE {version} {json.dumps(case)}", file=sys.stderr)
        total += len(result["disagreements"])
        print(f"{version} {result['category']:<24} trajectories {result['trajectories']:>6}   "
              f"official passed {result['official_passed']:>5}   disagreements {len(result['disagreements']):>3}   "
              f"{result['seconds']:>6.1f} s", flush=True)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
