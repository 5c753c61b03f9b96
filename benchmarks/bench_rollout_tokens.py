"""Generated tokens/s of the rollout engines on multi-turn BFCL episodes, against the true lower bound and against
plain batched `generate`, all in one run.

(a) engines: `run_rollouts` in token-level mode (as `train.PoolRollouts` calls it) on N D_0 pool tasks x K samples,
    sampling at T=0.9, all episodes live at once (`--batch`), once per engine of `--engines` (default: `kv_cache`,
    the CPU engine, and `generate`, the re-feeding engine it replaced). Counted: the tokens the model generated (sum
    of the records' `completion_mask`) over the wall time of the `run_rollouts` call, environments included.
(b) bound: the least work those episodes need, on the first engine's episodes: every prompt and tool-result token
    prefilled once (packed into full rows, no padding), then every generated token decoded once in full batches
    (all episodes decoding together, `ceil(generated / episodes)` steps, each row attending to a context as long as
    the middle of its episode, sampled as the engines sample). No environment, template or bookkeeping time.
(c) plain: `model.generate` on the same number of sequences from the episodes' first prompts, every sequence forced
    to the same length so the total equals the engine's generated tokens (the figure the README used to report).

Each repetition runs (a), (b), (c) back to back, so all see the same machine load; the ratios engine/bound (target
>= 0.7) and engine/plain are printed per engine for the median and the best repetition, with the engines' batch
shapes.

    .venv/bin/python benchmarks/bench_rollout_tokens.py --model coevolve_lib/data/warm_start/tiny
    .venv/bin/python benchmarks/bench_rollout_tokens.py --model smollm2-135m --pool bfcl --tasks 8 --samples 3
    .venv/bin/python benchmarks/bench_rollout_tokens.py --model smollm2-135m --device cuda --tasks 32 --samples 8 \
        --engines continuous_batching,generate

`--model` takes a built model ("tiny", "smollm2-135m") or a model folder, e.g. the tiny profile's warm-started policy
`coevolve_lib/data/warm_start/tiny`, which makes tool calls (several model steps per episode; the random-init tiny
model mostly answers without calls, so its episodes are mostly one step). Tasks: the first N tasks of `--pool`
(a pool.jsonl), of BFCL's multi-turn train split (`--pool bfcl`: SmolLM2 makes no tool calls, but every user turn
is a model step), or of a D_0 pool built on the fly (the tiny data-engine profile, a few seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time

from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import GenerationConfig, generation_attention
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.envs.bfcl.episode import Episode, pool_task_to_bfcl
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.rollout.engines import ENGINES, sample_tokens


def load_pool_tasks(pool: str | None, count: int) -> list:
    """The first `count` D_0 tasks of a pool file, of BFCL's multi-turn base train split (`pool="bfcl"`: 2-5 user
    turns each, so a model that makes no tool calls still has multi-turn episodes), or of a D_0 pool built in a
    temporary folder."""
    if pool == "bfcl":
        from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks

        return split_tasks(load_tasks("v3", "multi_turn_base"), "train")[:count]
    if pool:
        tasks = [t for t in read_jsonl(pool) if t.get("pool_version", 0) == 0] or read_jsonl(pool)
    else:
        from coevolve_lib.engine.data_engine import DataEngine
        from coevolve_lib.profiles import data_engine_config

        with tempfile.TemporaryDirectory() as tmp:
            engine = DataEngine(data_engine_config("tiny", d0_size=max(count, 8)), tmp, "bfcl")
            engine.initial_pool(progress=False)
            tasks = list(engine.pool.tasks)
    if len(tasks) < count:
        raise SystemExit(f"the pool has {len(tasks)} tasks, fewer than --tasks {count}")
    return [pool_task_to_bfcl(t) for t in tasks[:count]]


def generation_config(args) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=0)


def run_engine(model, tasks, args, engine: str) -> tuple[list[dict], float]:
    config = RolloutPhase(RolloutConfig(tool_docs=args.tool_docs, batch_size=args.batch), token_level=True,
                          engine=engine, generation=generation_config(args),
                          max_completion_tokens=args.max_completion_tokens)
    start = time.perf_counter()
    records = run_rollouts(model, tasks, config, samples_per_task=args.samples, progress=False, new_episode=Episode)
    return records, time.perf_counter() - start


def run_bound(model, records: list[dict], args) -> dict:
    """Seconds of the least work the episodes need: (1) their prompt and tool-result tokens, packed into full rows
    as long as an average episode, prefilled once; (2) their generated tokens decoded once, all episodes in one
    batch, each row after a context as long as the middle of its episode."""
    import torch
    from transformers import DynamicCache

    device = model.model.device
    given = [t for r in records for t in r["prompt_ids"] + [i for i, m in zip(r["completion_ids"], r["completion_mask"])
                                                            if not m]]
    row = max(1, round(statistics.mean(len(r["prompt_ids"]) + len(r["completion_ids"]) for r in records)))
    rows = [given[i:i + row] for i in range(0, len(given) - row + 1, row)]
    rest = given[len(rows) * row:]
    generated = sum(sum(r["completion_mask"]) for r in records)
    steps = max(1, math.ceil(generated / len(records)))
    contexts = [(r["prompt_ids"] + r["completion_ids"])[:len(r["prompt_ids"]) + len(r["completion_ids"]) // 2]
                for r in records]
    generation = generation_config(args)
    generator = torch.Generator(device=device).manual_seed(0) if args.temperature > 0 else None
    with torch.inference_mode(), generation_attention(model.model):
        start = time.perf_counter()
        for i in range(0, len(rows), args.batch):
            model.model(input_ids=torch.tensor(rows[i:i + args.batch], device=device), logits_to_keep=1)
        if rest:
            model.model(input_ids=torch.tensor([rest], device=device), logits_to_keep=1)
        prefill_s = time.perf_counter() - start
        # The decode contexts are prefilled untimed (their tokens were counted above).
        width = max(map(len, contexts))
        pad = model.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(c)) + c for c in contexts], device=device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts], device=device)
        output = model.model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        cache, lengths = output.past_key_values or DynamicCache(), mask.sum(1)
        tokens = sample_tokens(output.logits[:, -1].float(), generation, generator)
        start = time.perf_counter()
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            output = model.model(input_ids=tokens[:, None], attention_mask=mask, position_ids=lengths[:, None],
                                 past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache, lengths = output.past_key_values, lengths + 1
            tokens = sample_tokens(output.logits[:, -1].float(), generation, generator).tolist()
            tokens = torch.tensor(tokens, device=device)  # copied to the host and back, as any engine must
        decode_s = time.perf_counter() - start
    return {"seconds": prefill_s + decode_s, "prefill_s": prefill_s, "decode_s": decode_s,
            "prefill_tokens": len(given), "decode_steps": steps, "tokens": generated}


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
        with torch.inference_mode(), generation_attention(model.model):  # the attention kernels the engines use
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
    parser.add_argument("--pool", default=None,
                        help="a pool.jsonl to take tasks from, or `bfcl` (BFCL's multi-turn train tasks); default: "
                             "build D_0")
    parser.add_argument("--tasks", type=int, default=16, help="N pool tasks")
    parser.add_argument("--samples", type=int, default=4, help="K episodes per task")
    parser.add_argument("--batch", type=int, default=None, help="live episodes at once (default: N x K)")
    parser.add_argument("--engines", default="kv_cache,generate",
                        help=f"comma-separated rollout engines, the first one's episodes set the bound ({ENGINES})")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="most tokens per model reply")
    parser.add_argument("--max-completion-tokens", type=int, default=4096, help="most tokens after the first prompt")
    parser.add_argument("--temperature", type=float, default=0.9)
    parser.add_argument("--tool-docs", choices=["full", "compact", "none"], default="none",
                        help="tool docs in the prompt (none: a model trained on the tools, as the tiny profile)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    args.batch = args.batch or args.tasks * args.samples
    engines = args.engines.split(",")
    if unknown := [e for e in engines if e not in ENGINES]:
        parser.error(f"unknown engine(s) {unknown}; choose from {ENGINES}")

    import torch

    options = {"device": args.device}
    if args.dtype:
        options["dtype"] = getattr(torch, args.dtype)
    model = load_chat_model(args.model, **options)
    tasks = load_pool_tasks(args.pool, args.tasks)

    # Warm-up (first-call costs: kernels, caches, the continuation template) for every path, not timed.
    warm = argparse.Namespace(**{**vars(args), "samples": 1, "max_new_tokens": 8})
    for engine in engines:
        warm_records, _ = run_engine(model, tasks[:2], warm, engine)
    run_bound(model, warm_records, warm)
    run_plain(model, [r["prompt_ids"] for r in warm_records], 8, args.batch, args.temperature)

    runs = []
    for _ in range(args.repeats):
        run = {}
        for engine in engines:
            records, seconds = run_engine(model, tasks, args, engine)
            generated = sum(sum(r["completion_mask"]) for r in records)
            run[engine] = {"tok_s": generated / seconds, "seconds": seconds, "tokens": generated,
                           "steps": statistics.mean(map(model_steps, records)), "episodes": len(records)}
            if engine == engines[0]:
                first = records
        bound = run_bound(model, first, args)
        run["bound"] = {**bound, "tok_s": bound["tokens"] / bound["seconds"]}
        prompts = [r["prompt_ids"] for r in first]
        length = max(1, math.ceil(bound["tokens"] / len(prompts)))
        plain_s = run_plain(model, prompts, length, args.batch, args.temperature)
        run["plain"] = {"tok_s": length * len(prompts) / plain_s, "seconds": plain_s}
        runs.append(run)

    median = lambda name: statistics.median(r[name]["tok_s"] for r in runs)  # noqa: E731
    best = lambda name: max(r[name]["tok_s"] for r in runs)  # noqa: E731
    mean = lambda name, key: statistics.mean(r[name][key] for r in runs)  # noqa: E731
    device = str(model.model.device) + (f" ({torch.cuda.get_device_name(model.model.device)})"
                                        if model.model.device.type == "cuda" else f" ({torch.get_num_threads()} thr)")
    print(f"model {args.model} ({model.model.dtype}) on {device}; {args.tasks} tasks x {args.samples} samples = "
          f"{len(first)} episodes, batch {args.batch}, T={args.temperature}, max_new_tokens {args.max_new_tokens}, "
          f"tool_docs {args.tool_docs}, {args.repeats} repetitions")
    print(f"episodes ({engines[0]}): {mean(engines[0], 'steps'):.2f} model steps each, first prompt "
          f"{statistics.mean(map(len, prompts)):.0f} tokens; {mean('bound', 'tokens'):.0f} generated tokens per run")
    print(f"bound: {mean('bound', 'prefill_tokens'):.0f} prompt and tool-result tokens prefilled in "
          f"{mean('bound', 'prefill_s'):.2f} s, {mean('bound', 'decode_steps'):.0f} decode steps of "
          f"{len(first)} rows in {mean('bound', 'decode_s'):.2f} s")
    print(f"{'':22}{'median tok/s':>13}{'best':>8}{'/ bound':>9}{'/ plain':>9}   runs (tok/s)")
    for name in engines + ["bound", "plain"]:
        ratios = f"{median(name) / median('bound'):9.2f}{median(name) / median('plain'):9.2f}"
        each = ", ".join(f"{r[name]['tok_s']:.0f}" for r in runs)
        print(f"{name:22}{median(name):13.0f}{best(name):8.0f}{ratios}   {each}")
    print("ratios are of the medians; target: engine / bound >= 0.7")
    if mean(engines[0], "steps") < 1.5:
        print("note: the episodes are mostly one model step (this model makes few tool calls), so this is close to a "
              "single-turn measurement; a tool-calling policy (e.g. coevolve_lib/data/warm_start/tiny) is multi-turn")
    result = {"benchmark": "rollout_tokens", "model": args.model, "dtype": str(model.model.dtype).split(".")[-1],
              "device": device, "tasks": args.tasks, "samples": args.samples, "episodes": len(first),
              "batch": args.batch, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
              "tool_docs": args.tool_docs, "repeats": args.repeats, "avg_turns": round(mean(engines[0], "steps"), 3),
              "tok_s_median": {name: round(median(name), 1) for name in engines + ["bound", "plain"]},
              "ratio_to_bound": {name: round(median(name) / median("bound"), 3) for name in engines},
              "ratio_to_plain": {name: round(median(name) / median("plain"), 3) for name in engines},
              "target": 0.7}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
