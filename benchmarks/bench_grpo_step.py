"""GRPO step time of a profile's training run under several variants, side by side in one run.

Each variant (a name and `section.field=value` overrides) trains the profile for `--steps` steps in a temporary folder
(no pool updates, no evaluation between steps), one after the other so that all see the same machine, and prints the
mean step time (`time/train_s`: rollouts + GRPO update), the rollout time (`time/rollout_s`) and the update time of
steps 2.. (step 1 carries the first-call costs), with each variant's ratio to the first.

    .venv/bin/python benchmarks/bench_grpo_step.py                      # tiny, 8 trained groups: beta 0 vs 1e-3
    .venv/bin/python benchmarks/bench_grpo_step.py --threads 1 --variant kv:rollout.engine=kv_cache \\
        --variant generate:rollout.engine=generate                     # the rollout engines
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_VARIANTS = ["beta 0 (no reference forward):training.beta=0",
                    "beta 1e-3 (the paper's KL):training.beta=0.001"]
BASE = ["training.pool_updates=none", "training.eval_every=0", "training.eval_limit=0", "training.eval_pool_tasks=0",
        "data_engine.heldout.new_tasks.size=0", "data_engine.heldout.new_envs.size=0"]
"""What every variant drops: pool updates and evaluations are not the step."""


def train(profile: str, overrides: list[str], steps: int, threads: int, out: Path) -> list[dict]:
    sets = [part for o in [*BASE, f"training.max_steps={steps}", *overrides] for part in ("--set", o)]
    command = [sys.executable, "-m", "coevolve_lib", "train", "--profile", profile, "--out", str(out), "--quiet", *sets]
    env = {**os.environ, "COEVOLVE_TORCH_THREADS": str(threads), "COEVOLVE_MAX_TORCH_THREADS": str(threads)}
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=False)
    if done.returncode:
        raise SystemExit(f"training failed ({' '.join(overrides)}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per variant (the first is not counted)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run (default 2: both cores)")
    parser.add_argument("--set", action="append", default=["training.tasks_per_step=8", "training.draw_factor=1"],
                        metavar="SECTION.FIELD=VALUE",
                        help="an override of every variant (default: 8 trained groups, no dynamic sampling)")
    parser.add_argument("--variant", action="append", metavar="NAME:OVERRIDE[,OVERRIDE]",
                        help=f"a variant (repeatable; default: {DEFAULT_VARIANTS})")
    args = parser.parse_args(argv)
    variants = {}
    for text in args.variant or DEFAULT_VARIANTS:
        name, _, overrides = text.rpartition(":")
        variants[name or overrides] = [o for o in overrides.split(",") if o]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, overrides) in enumerate(variants.items()):
            metrics = [m for m in train(args.profile, [*args.set, *overrides], args.steps, args.threads,
                                        Path(tmp) / str(index)) if "time/train_s" in m and m["step"] > 1]
            step = statistics.mean(m["time/train_s"] for m in metrics)
            rollout = statistics.mean(m["time/rollout_s"] for m in metrics)
            rows[name] = {"step_s": step, "rollout_s": rollout, "update_s": step - rollout,
                          "episodes": statistics.mean(m["train/episodes"] for m in metrics),
                          "trained_groups": statistics.mean(m["train/groups_trained"] for m in metrics),
                          "steps": [m["step"] for m in metrics]}
    first = next(iter(rows.values()))
    print(f"profile {args.profile} ({' '.join(args.set)}): mean of steps {first['steps']}, {args.threads} torch "
          "thread(s), no pool updates or evaluation")
    print(f"{'variant':34}{'episodes':>9}{'trained':>9}{'step s':>9}{'rollout s':>11}{'update s':>10}{'ratio':>8}")
    for name, row in rows.items():
        print(f"{name:34}{row['episodes']:9.0f}{row['trained_groups']:9.0f}{row['step_s']:9.2f}{row['rollout_s']:11.2f}"
              f"{row['update_s']:10.2f}{row['step_s'] / first['step_s']:8.2f}")
    result = {"benchmark": "grpo_step", "profile": args.profile, "steps": args.steps, "threads": args.threads,
              "overrides": args.set,
              "variants": {n: {k: round(v, 3) for k, v in r.items() if k != "steps"} for n, r in rows.items()}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
