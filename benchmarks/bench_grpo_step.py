"""GRPO step time of a profile's training run under each rollout engine, side by side in one run.

For every engine of `--engines`, trains the profile for `--steps` steps in a temporary folder (no pool updates, no
evaluation between steps, one torch thread), one after the other so both see the same machine, and prints the mean
step time (`time/train_s`: rollouts + GRPO update) and rollout time (`time/rollout_s`) of steps 2.. (step 1 carries
the first-call costs), with each engine's ratio to the first.

    .venv/bin/python benchmarks/bench_grpo_step.py                       # tiny profile: generate vs kv_cache
    .venv/bin/python benchmarks/bench_grpo_step.py --profile tiny --steps 4 --engines generate,kv_cache
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def train(profile: str, engine: str, steps: int, out: Path) -> list[dict]:
    command = [sys.executable, "-m", "coevolve_lib", "train", "--profile", profile, "--out", str(out), "--quiet",
               "--set", f"training.max_steps={steps}", "--set", "training.pool_updates=none",
               "--set", "training.eval_every=0", "--set", "training.eval_limit=1",
               "--set", "training.eval_pool_tasks=0", "--set", "training.torch_threads=1",
               "--set", f"rollout.engine={engine}"]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"training with engine {engine} failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per engine (the first is not counted)")
    parser.add_argument("--engines", default="generate,kv_cache", help="comma-separated rollout engines")
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            metrics = [m for m in train(args.profile, engine, args.steps, Path(tmp) / engine)
                       if "time/train_s" in m and m["step"] > 1]
            rows[engine] = {"step_s": statistics.mean(m["time/train_s"] for m in metrics),
                            "rollout_s": statistics.mean(m["time/rollout_s"] for m in metrics),
                            "steps": [m["step"] for m in metrics]}
    first = rows[engines[0]]
    print(f"profile {args.profile}: mean of steps {first['steps']} (one torch thread, no pool updates or evaluation)")
    print(f"{'engine':20}{'step s':>9}{'rollout s':>11}{'update s':>10}{'step ratio':>12}")
    for engine, row in rows.items():
        print(f"{engine:20}{row['step_s']:9.2f}{row['rollout_s']:11.2f}{row['step_s'] - row['rollout_s']:10.2f}"
              f"{row['step_s'] / first['step_s']:12.2f}")
    result = {"benchmark": "grpo_step", "profile": args.profile, "steps": args.steps,
              "engines": {e: {k: round(v, 3) for k, v in r.items() if k != "steps"} for e, r in rows.items()}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
