"""A feedback round split over processes (`engine.shards.Shards`, issue 28) against the same round on one process:
wall seconds side by side and whether the pools are equal, task for task.

The round: the tiny profile's D_0 (its 13 environments, the schema explorer, deterministic abstraction), then a
"+ Random Exploration" round of `--targets` pool tasks re-explored with `--runs` x `--calls`, each run from a copy of
the same D_0. Two processes are forked with a barrier between the stages, as a 2-process training run's are. With
`--endpoint-delay S` the round's explorer is the LLM explorer (Figs. 9-10) on a real OpenAI-compatible endpoint, the
kit's loopback server answering every call after S seconds with a scripted action, as a remote Qwen3-Max would after
its latency; without it, the offline schema explorer (no waiting: the round is the environments' own work).

    .venv/bin/python benchmarks/bench_sharded_round.py --targets 32 --runs 8 --calls 8
    .venv/bin/python benchmarks/bench_sharded_round.py --targets 16 --runs 4 --calls 6 --endpoint-delay 0.25
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from coevolve_lib import profiles
from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.runtime import configure_process
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.pool_updates.guided import random_round
from coevolve_lib.engine.shards import SINGLE, Shards

SCRIPTED_ACTION = "The listing shows what is here.\n<action>ls()</action>"
"""What the scripted endpoint answers every explorer call (Fig. 9's reply shape: reasoning, then the action)."""


def engine(run_dir: Path, args, llm: bool = False) -> DataEngine:
    config = profiles.data_engine_config("tiny", {"data_engine": {"max_targets": args.targets}})
    config = replace(config, explore=replace(config.explore, runs=args.runs, calls_per_run=args.calls,
                                             explorer="llm" if llm else "schema"),
                     explorer_model="openai:scripted" if llm else None)
    return DataEngine(config, run_dir, "bfcl")


def round_seconds(run_dir: Path, shards: Shards, args, times) -> None:
    data = engine(run_dir, args, llm=args.endpoint_delay is not None)
    data.shards = shards
    start = time.perf_counter()
    random_round(data, 1, progress=False, seed=0)
    times[shards.index] = time.perf_counter() - start


def main() -> None:
    configure_process()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", type=int, default=32, help="pool tasks the round re-explores")
    parser.add_argument("--runs", type=int, default=8, help="exploration runs R per target")
    parser.add_argument("--calls", type=int, default=8, help="calls S per run")
    parser.add_argument("--endpoint-delay", type=float, default=None,
                        help="seconds each explorer call takes on the loopback endpoint (default: offline explorer)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as stack:
        if args.endpoint_delay is not None:
            faults = FaultConfig(always="timeout", delay_s=args.endpoint_delay, scripted_reply=SCRIPTED_ACTION)
            server = stack.enter_context(ChatServer(load_chat_model("tiny"), faults=faults, served_name="scripted"))
            os.environ.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="local")
        base = Path(scratch) / "d0"
        engine(base, args).initial_pool(progress=False)
        one, two = Path(scratch) / "one", Path(scratch) / "two"
        for copy in (one, two):
            shutil.copytree(base, copy)
        context = multiprocessing.get_context("fork")
        times = context.Manager().dict()
        round_seconds(one, SINGLE, args, times)
        single = times[0]
        barrier = context.Barrier(2)
        workers = [context.Process(target=round_seconds, args=(two, Shards(i, 2, barrier.wait), args, times))
                   for i in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        sharded = max(times[0], times[1])
        pools = [(run / "pool.jsonl").read_text() for run in (one, two)]
        report = json.loads((one / "round_001" / "report.json").read_text())
    explorer = "schema explorer" if args.endpoint_delay is None else \
        f"LLM explorer, {args.endpoint_delay:g} s per endpoint call"
    print(f"round of {report['targets']} targets x {args.runs} runs x {args.calls} calls ({explorer}): "
          f"{report['specs']} specs, {report['added_to_pool']} tasks added")
    print("| processes | wall s | ratio |")
    print("| --- | --- | --- |")
    print(f"| 1 | {single:.2f} | 1.00 |")
    print(f"| 2 | {sharded:.2f} | {sharded / single:.2f} |")
    print(f"same pool: {pools[0] == pools[1]}")


if __name__ == "__main__":
    main()
