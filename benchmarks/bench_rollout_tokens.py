"""Generated tokens/s of the rollout engine in multi-turn BFCL rollouts against plain batched `generate`.

(a) engine: `run_rollouts` in token-level mode (as `train.PoolRollouts` calls it) on N D_0 pool tasks x K samples,
    sampling at T=0.9, all episodes in one batch of live episodes (`--batch`). Each step re-feeds every live
    episode's whole conversation ids and runs the replies' tool calls in the BFCL environments. Counted: the tokens
    the model generated (sum of the records' `completion_mask`) over the wall time of the `run_rollouts` call.
(b) plain: `model.generate` on the same model under `torch.inference_mode`, the same number of sequences batched the
    same way (chunks of `--batch`), left-padded prompts equal to the episodes' first prompts, sampling at the same
    temperature, every sequence forced to the same length (min_new_tokens = max_new_tokens) so that the total
    generated tokens equal the engine's (rounded up to a whole token per sequence). Counted: those tokens over the
    wall time of the generate calls (ids copied back to the host included, as the engine does).

Each repetition runs (a) then (b) with (b) matched to (a)'s token total, so both see the same machine load; the
ratio engine/plain (target >= 0.7) is printed for the best and the median of the repetitions, with a breakdown of
the engine's time (inside model calls / outside: templates, tokenization, environments) and its batch shapes.

    .venv/bin/python benchmarks/bench_rollout_tokens.py [--model tiny] [--device cpu] [--tasks 16] [--samples 4]
    .venv/bin/python benchmarks/bench_rollout_tokens.py --model smollm2-135m --device cuda --tasks 32 --samples 8

`--model` takes a built model ("tiny", "smollm2-135m") or a model folder, e.g. the tiny profile's warm-started policy
`runs/data_engine_tiny/warm_start`, which makes tool calls (several model steps per episode; the random-init tiny
model mostly answers without calls, so its episodes are mostly one step). Tasks: the first N tasks of `--pool`
(a pool.jsonl), or of a D_0 pool built on the fly (the tiny data-engine profile, a few seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from dataclasses import dataclass, field

from coevolve_lib.agent import RolloutConfig, run_rollouts
from coevolve_lib.models import GenerationConfig, generation_attention, load_chat_model
from coevolve_lib.records import read_jsonl
from coevolve_lib.pool import pool_task_to_bfcl


def load_pool_tasks(pool: str | None, count: int) -> list:
    """The first `count` D_0 tasks of a pool file, or of a D_0 pool built in a temporary folder."""
    if pool:
        tasks = [t for t in read_jsonl(pool) if t.get("pool_version", 0) == 0] or read_jsonl(pool)
    else:
        from coevolve_lib.profiles import data_engine_config
        from coevolve_lib.engine import DataEngine

        with tempfile.TemporaryDirectory() as tmp:
            engine = DataEngine(data_engine_config("tiny", d0_size=max(count, 8)), tmp)
            engine.initial_pool(progress=False)
            tasks = list(engine.pool.tasks)
    if len(tasks) < count:
        raise SystemExit(f"the pool has {len(tasks)} tasks, fewer than --tasks {count}")
    return [pool_task_to_bfcl(t) for t in tasks[:count]]


@dataclass
class CallStats:
    """What the engine's model calls did during one `run_rollouts` (batch shapes and time)."""

    calls: int = 0
    seconds: float = 0.0
    prefill_tokens: int = 0  # batch x padded prompt width, summed over calls
    decode_slots: int = 0  # batch x longest reply, summed over calls (what a padded batch decodes)
    generated: int = 0
    batches: list = field(default_factory=list)


def instrument(model) -> CallStats:
    """Wrap `model.generate_from_ids` (an instance attribute shadowing the method) to record every call."""
    stats = CallStats()
    inner = type(model).generate_from_ids.__get__(model)

    def generate_from_ids(prompts, config=GenerationConfig()):
        start = time.perf_counter()
        out = inner(prompts, config)
        stats.seconds += time.perf_counter() - start
        stats.calls += 1
        stats.batches.append(len(prompts))
        stats.prefill_tokens += len(prompts) * max(map(len, prompts))
        lengths = [g.completion_tokens for g in out]
        stats.decode_slots += len(prompts) * max(lengths)
        stats.generated += sum(lengths)
        return out

    model.generate_from_ids = generate_from_ids
    return stats


def run_engine(model, tasks, args) -> tuple[list[dict], float, CallStats]:
    config = RolloutConfig(
        token_level=True, tool_docs=args.tool_docs, max_batch_size=args.batch,
        generation=GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature),
        max_completion_tokens=args.max_completion_tokens)
    stats = instrument(model)
    try:
        start = time.perf_counter()
        records = run_rollouts(model, tasks, config, samples_per_task=args.samples, progress=False)
        seconds = time.perf_counter() - start
    finally:
        del model.generate_from_ids
    return records, seconds, stats


def run_plain(model, prompts: list[list[int]], length: int, batch: int, temperature: float) -> float:
    """Seconds to generate exactly `length` new tokens for every prompt, in left-padded chunks of `batch`."""
    import torch
    from transformers import GenerationConfig as HFGenerationConfig

    tokenizer, device = model.tokenizer, model.model.device
    pad = tokenizer.pad_token_id
    hf_config = HFGenerationConfig(max_new_tokens=length, min_new_tokens=length, do_sample=temperature > 0,
                                   temperature=temperature if temperature > 0 else None,
                                   top_p=1.0 if temperature > 0 else None, top_k=0 if temperature > 0 else None,
                                   eos_token_id=model.stop_ids, pad_token_id=pad)
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        width = max(map(len, chunk))
        with torch.inference_mode(), generation_attention(device):  # the attention kernels the engine uses
            input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=device)
            attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=device)
            sequences = model.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                             generation_config=hf_config)
            new = sequences[:, width:].tolist()
        assert all(len(row) == length for row in new), "plain generate stopped early"
    return time.perf_counter() - start


def model_steps(record: dict) -> int:
    """Model calls of one episode: every reply, with or without tool calls, is one assistant message."""
    return sum(m["role"] == "assistant" for m in record["messages"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2-135m, or a model folder")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, or auto")
    parser.add_argument("--dtype", default=None, help="torch dtype (default: float32 on CPU, bfloat16 on CUDA)")
    parser.add_argument("--pool", default=None, help="a pool.jsonl to take tasks from (default: build D_0)")
    parser.add_argument("--tasks", type=int, default=16, help="N pool tasks")
    parser.add_argument("--samples", type=int, default=4, help="K episodes per task")
    parser.add_argument("--batch", type=int, default=None, help="live episodes per model call (default: N x K)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="most tokens per model reply")
    parser.add_argument("--max-completion-tokens", type=int, default=4096, help="most tokens after the first prompt")
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--tool-docs", choices=["full", "compact", "none"], default="none",
                        help="tool docs in the prompt (none: a model trained on the tools, as the tiny profile)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    args.batch = args.batch or args.tasks * args.samples

    import torch

    options = {"device": args.device}
    if args.dtype:
        options["dtype"] = getattr(torch, args.dtype)
    model = load_chat_model(args.model, **options)
    tasks = load_pool_tasks(args.pool, args.tasks)

    # Warm-up (first-call costs: kernels, caches, the continuation template) for both paths, not timed.
    warm = argparse.Namespace(**{**vars(args), "samples": 1, "max_new_tokens": 8})
    warm_records, _, _ = run_engine(model, tasks[:2], warm)
    run_plain(model, [r["prompt_ids"] for r in warm_records], 8, args.batch, args.temperature)

    rows = []
    for _ in range(args.repeats):
        records, engine_s, stats = run_engine(model, tasks, args)
        generated = sum(sum(r["completion_mask"]) for r in records)
        assert generated == sum(r["completion_tokens"] for r in records) == stats.generated
        prompts = [r["prompt_ids"] for r in records]
        length = max(1, math.ceil(generated / len(prompts)))
        plain_s = run_plain(model, prompts, length, args.batch, args.temperature)
        rows.append({"engine_tok_s": generated / engine_s, "plain_tok_s": length * len(prompts) / plain_s,
                     "engine_s": engine_s, "plain_s": plain_s, "tokens": generated, "plain_tokens": length * len(prompts),
                     "steps": statistics.mean(map(model_steps, records)), "calls": stats.calls,
                     "model_s": stats.seconds, "prefill_tokens": stats.prefill_tokens,
                     "decode_slots": stats.decode_slots,
                     "first_prompt": statistics.mean(map(len, prompts)),
                     "tool_calls": sum(len(s["calls"]) for r in records for s in r["steps"])})

    engine = [r["engine_tok_s"] for r in rows]
    plain = [r["plain_tok_s"] for r in rows]
    ratio_best = max(engine) / max(plain)
    ratio_median = statistics.median(engine) / statistics.median(plain)
    mean = lambda key: statistics.mean(r[key] for r in rows)  # noqa: E731
    device = str(model.model.device) + (f" ({torch.cuda.get_device_name(model.model.device)})"
                                        if model.model.device.type == "cuda" else f" ({torch.get_num_threads()} thr)")
    print(f"model {args.model} ({model.model.dtype}) on {device}; {args.tasks} tasks x {args.samples} samples = "
          f"{len(records)} episodes, batch {args.batch}, T={args.temperature}, max_new_tokens {args.max_new_tokens}, "
          f"tool_docs {args.tool_docs}")
    print(f"episodes: {mean('steps'):.2f} model steps (turns) each, {mean('tool_calls') / len(records):.2f} tool calls, "
          f"first prompt {mean('first_prompt'):.0f} tokens; {mean('tokens'):.0f} generated tokens per run")
    print(f"engine: {mean('calls'):.1f} model calls per run, {100 * mean('model_s') / mean('engine_s'):.0f}% of its "
          f"time inside them; prefill {mean('prefill_tokens'):.0f} tokens, padded decode slots "
          f"{mean('decode_slots'):.0f} ({100 * mean('tokens') / mean('decode_slots'):.0f}% used)")
    print(f"{'':8}{'best tok/s':>12}{'median':>10}   runs")
    print(f"{'engine':8}{max(engine):12.0f}{statistics.median(engine):10.0f}   {', '.join(f'{x:.0f}' for x in engine)}")
    print(f"{'plain':8}{max(plain):12.0f}{statistics.median(plain):10.0f}   {', '.join(f'{x:.0f}' for x in plain)}")
    print(f"ratio engine/plain  {ratio_best:.2f} (best)  {ratio_median:.2f} (median)   target >= 0.7")
    if mean("steps") < 1.5:
        print("note: the episodes are mostly one model step (this model makes few tool calls), so this is close to a "
              "single-turn measurement; a tool-calling policy (e.g. runs/data_engine_tiny/warm_start) is multi-turn")
    result = {"benchmark": "rollout_tokens", "model": args.model, "dtype": str(model.model.dtype).split(".")[-1],
              "device": device, "tasks": args.tasks, "samples": args.samples, "episodes": len(records),
              "batch": args.batch, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
              "tool_docs": args.tool_docs, "repeats": args.repeats, "avg_turns": round(mean("steps"), 3),
              "engine_tok_s_best": round(max(engine), 1), "engine_tok_s_median": round(statistics.median(engine), 1),
              "plain_tok_s_best": round(max(plain), 1), "plain_tok_s_median": round(statistics.median(plain), 1),
              "ratio_best": round(ratio_best, 3), "ratio_median": round(ratio_median, 3), "target": 0.7}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
