"""vLLM's CPU build against the kit's own rollout engines, same model, same prompts, side by side; start-up apart.

Run in vLLM's venv (`make vllm`); each engine runs in a process of its own, one after the other (the same machine):

(a) rollouts: `run_rollouts` in token-level mode, as GRPO training calls it, on the first `--tasks` D_0 tasks of the
    tiny data-engine profile x `--samples`, sampling at T = 0.9, with the kit's `kv_cache` engine on the model, or with
    the `vllm` engine on a `vllm.LLM` answering each model step (the call TRL's colocated `VLLMGeneration` makes), its
    weights kept for TRL's sync (`rollout.vllm_cpu.keep_weights_loadable`, what colocated training runs) or packed
    (vLLM's own CPU path). Counted: generated tokens (the records' `completion_mask`) over the `run_rollouts` wall time,
    environments included.
(b) plain: `--prompts` prompts x `--new-tokens` tokens, EOS ignored, greedy: `vllm.LLM.generate` (packed or kept
    weights) against transformers' `generate`.

vLLM runs in float32 (as the kit's CPU runs; vLLM's own `auto` would downcast a float32 checkpoint to bfloat16), in
eager mode (`--compiled` lets it compile: tens of seconds more start-up) and in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as under TRL's colocate, so that the weight workaround reaches the engine).

    .venv-vllm/bin/python benchmarks/bench_vllm.py --model coevolve_lib/data/warm_start/tiny
    .venv-vllm/bin/python benchmarks/bench_vllm.py --model standin-qwen3-4b --tasks 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from coevolve_lib.cli.local_servers import VLLM_CPU_ENV

ROLLOUT_ENGINES = ["kv_cache", "vllm-kept", "vllm-packed"]
PLAIN_ENGINES = ["transformers", "vllm-kept", "vllm-packed"]
PROMPTS = ["Explain in detail how a {} works.".format(w) for w in
           ("bicycle", "compiler", "refrigerator", "kernel", "database", "telescope", "battery", "router")]


def vllm_llm(model_path: str, kept: bool, compiled: bool):
    from vllm import LLM

    from coevolve_lib.rollout.vllm_cpu import keep_weights_loadable

    if kept:
        keep_weights_loadable()
    return LLM(model=model_path, dtype="float32", max_model_len=4096, enforce_eager=not compiled, seed=0)


class LLMGeneration:
    """The shape of TRL's colocated `VLLMGeneration.generate` (one process, no tensor parallelism) over a vllm.LLM."""

    mode, tensor_parallel_size = "colocate", 1

    def __init__(self, llm, max_tokens: int):
        from vllm import SamplingParams

        self.llm, self.params = llm, SamplingParams(temperature=0.9, top_p=1.0, max_tokens=max_tokens)

    def generate(self, prompts, images, num_generations):
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], self.params, use_tqdm=False)
        return prompts, [list(o.outputs[0].token_ids) for o in outputs], None, None


def one(args) -> dict:
    """One engine's figures (run in its own process)."""
    from types import SimpleNamespace

    import torch

    from coevolve_lib.core.model_specs import load_chat_model, local_model
    from coevolve_lib.core.models import GenerationConfig

    torch.set_num_threads(args.threads)
    model_path = local_model(args.model)
    start = time.perf_counter()
    llm = vllm_llm(model_path, args.engine == "vllm-kept", args.compiled) if args.engine.startswith("vllm") else None
    policy = load_chat_model(args.model, dtype="float32")
    startup = time.perf_counter() - start
    if args.part == "plain":
        ids = [policy.tokenizer(p)["input_ids"] for p in PROMPTS[:args.prompts]]
        start = time.perf_counter()
        if llm is not None:
            from vllm import SamplingParams

            params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
            outs = llm.generate([{"prompt_token_ids": i} for i in ids], params, use_tqdm=False)
            tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        else:
            policy.tokenizer.padding_side = "left"
            batch = policy.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
            with torch.inference_mode():
                out = policy.model.generate(**batch, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                            do_sample=False, pad_token_id=policy.tokenizer.pad_token_id)
            tokens = (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]
    else:
        from coevolve_lib.core.config import RolloutConfig
        from coevolve_lib.engine.data_engine import DataEngine
        from coevolve_lib.envs.bfcl.episode import Episode, pool_task_to_bfcl
        from coevolve_lib.profiles import data_engine_config
        from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts

        engine = DataEngine(data_engine_config("tiny"), args.scratch, "bfcl")
        engine.initial_pool(progress=False)
        tasks = [pool_task_to_bfcl(t) for t in engine.pool.tasks[:args.tasks]]
        engine.close()
        config = RolloutPhase(RolloutConfig(tool_docs="compact", batch_size=len(tasks) * args.samples),
                              token_level=True, engine="vllm" if llm is not None else "kv_cache",
                              generation=GenerationConfig(max_new_tokens=args.new_tokens, temperature=0.9, seed=0))
        trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1),
                                  vllm_generation=LLMGeneration(llm, args.new_tokens)) if llm is not None else None
        start = time.perf_counter()
        records = run_rollouts(policy, tasks, config, samples_per_task=args.samples, progress=False,
                               new_episode=Episode, trainer=trainer)
        tokens = sum(sum(r["completion_mask"]) for r in records)
    seconds = time.perf_counter() - start
    return {"part": args.part, "engine": args.engine, "model": args.model, "startup_s": round(startup, 1),
            "seconds": round(seconds, 2), "tokens": int(tokens), "tok_per_s": round(tokens / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="coevolve_lib/data/warm_start/tiny",
                        help="a built model (tiny, standin-qwen3-4b, ...) or a model folder")
    parser.add_argument("--tasks", type=int, default=8, help="(a): D_0 tasks")
    parser.add_argument("--samples", type=int, default=4, help="(a): episodes per task")
    parser.add_argument("--prompts", type=int, default=8, help="(b): prompts")
    parser.add_argument("--new-tokens", type=int, default=128, help="(a): cap per reply; (b): tokens per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (vLLM's CPU engine uses its own)")
    parser.add_argument("--compiled", action="store_true", help="let vLLM compile (default: --enforce-eager)")
    parser.add_argument("--part", choices=("rollouts", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", default="runs/bench_vllm", help="folder for the D_0 of (a)")
    args = parser.parse_args()
    if args.engine:
        print(json.dumps(one(args)), flush=True)
        return
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1", **VLLM_CPU_ENV}
    rows = []
    for part, engines in (("rollouts", ROLLOUT_ENGINES), ("plain", PLAIN_ENGINES)):
        for engine in engines:
            command = [sys.executable, __file__, *sys.argv[1:], "--part", part, "--engine", engine]
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                raise SystemExit(f"{part}/{engine} failed:\n{done.stderr[-3000:]}")
            rows.append(json.loads(lines[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'part':<9} {'engine':<13} {'start-up s':>10} {'tokens':>7} {'tok/s':>8} {'x first':>8}")
    for part in ("rollouts", "plain"):
        mine = [r for r in rows if r["part"] == part]
        for r in mine:
            print(f"{part:<9} {r['engine']:<13} {r['startup_s']:>10} {r['tokens']:>7} {r['tok_per_s']:>8} "
                  f"{r['tok_per_s'] / mine[0]['tok_per_s']:>8.2f}")


if __name__ == "__main__":
    main()
