"""Throughput of grading BFCL ground truth: the kit's BFCLEnv against the official `multi_turn_checker`.

Both graders do the same work per task: one full grading of the ground truth (execute it on fresh model-side
instances, execute it again on ground-truth instances, compare state and responses each turn). Prints tasks/s
for both and the kit/official ratio (best and median of a few repeats; the machine may be shared).

    .venv/bin/python benchmarks/bench_bfcl_replay.py [--data-version v3] [--category base] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.replay import kit_verdict, official_verdict
from coevolve_lib.envs.bfcl.tasks import load_tasks


def tasks_per_second(grade, tasks) -> float:
    start = time.perf_counter()
    for task in tasks:
        assert grade(task, task.ground_truth), task.id
    return len(tasks) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-version", choices=sorted(bfcl_backend.BFCL_RELEASES), default="v3")
    parser.add_argument("--category", choices=list(bfcl_backend.CATEGORY_ALIASES), default="base")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tasks = load_tasks(args.data_version, args.category)
    kit_verdict(tasks[0], tasks[0].ground_truth)  # warm imports and caches for both graders
    official_verdict(tasks[0], tasks[0].ground_truth)
    kit, official = [], []
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        kit.append(tasks_per_second(kit_verdict, tasks))
        official.append(tasks_per_second(official_verdict, tasks))
    print(f"BFCL {args.data_version} {bfcl_backend.normalize_category(args.category)}: {len(tasks)} tasks, "
          f"GT grading, best of {args.repeats}")
    print(f"kit       {max(kit):8.1f} tasks/s   (runs: {', '.join(f'{x:.0f}' for x in kit)})")
    print(f"official  {max(official):8.1f} tasks/s   (runs: {', '.join(f'{x:.0f}' for x in official)})")
    print(f"ratio kit/official  {max(kit) / max(official):.2f} (best)  "
          f"{statistics.median(kit) / statistics.median(official):.2f} (median)")


if __name__ == "__main__":
    main()
