"""Evaluation of a chat model on BFCL multi-turn: success rate over a split, as the paper reports it.

`python -m coevolve_lib evaluate --model tiny --data-version v3 --category base --split val --out results/x.json`

Each finished episode is appended to `<out>.rollouts.jsonl` as it ends; a killed run started again with the
same arguments keeps those episodes and runs only the remaining tasks. The results JSON (schema `results/v2`,
coevolve_lib/core/results.py) records the scale (model, profile, data version, eval set, n, seed) beside the value, plus
per-task outcomes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core import profiles
from coevolve_lib.core.config import EvalConfig
from coevolve_lib.rollout.agent import RolloutConfig, rollout_config, run_rollouts
from coevolve_lib.envs.bfcl.benchmark import load_tasks, split_tasks
from coevolve_lib.envs.bfcl.backend import normalize_category
from coevolve_lib.core.models import load_chat_model
from coevolve_lib.core.paths import repo_relative
from coevolve_lib.engine.pool import pool_task_to_bfcl
from coevolve_lib.core.records import append_jsonl, config_hash, read_jsonl
from coevolve_lib.core.results import metric_row, write_result


class EvaluationError(RuntimeError):
    """An evaluation that measured nothing (no task, or every episode ended in a model error): no result is written."""


def evaluation_tasks(cfg: EvalConfig) -> list:
    if cfg.benchmark != "bfcl":
        raise ValueError(f"benchmark {cfg.benchmark!r} is not available offline; only 'bfcl' is")
    tasks = split_tasks(load_tasks(cfg.data_version, normalize_category(cfg.category)), cfg.split, seed=cfg.split_seed)
    return tasks[: cfg.limit] if cfg.limit is not None else tasks


def _load_model(cfg: EvalConfig):
    """The evaluated chat model; a name that resolves to nothing is a user error, in one line."""
    try:
        return load_chat_model(cfg.model, **({"base_url": cfg.base_url} if cfg.base_url else {}))
    except (OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise profiles.ConfigError(f"cannot load model {cfg.model!r}: {first_line}") from None


def eval_set(cfg: EvalConfig) -> str:
    """The name results give the tasks `cfg` evaluates on: `<benchmark>/<data version>/<category>/<split>`."""
    return f"{cfg.benchmark}/{cfg.data_version}/{normalize_category(cfg.category)}/{cfg.split}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c succeeded (Chen et al., 2021): the chance that at least
    one of k samples drawn without replacement from the n succeeds."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def task_outcomes(model, tasks: list[dict], rollout: RolloutConfig, samples: int = 1,
                  progress: bool = False, engine=None) -> dict[str, list[int]]:
    """Success (1/0) of each of `samples` episodes per pool task (task/v1 records), by task id; `engine`: the data
    engine whose environment runs them (`rollout_tasks`, `episodes`; default: BFCL)."""
    env_tasks = engine.rollout_tasks(tasks) if engine else [pool_task_to_bfcl(t) for t in tasks]
    records = run_rollouts(model, env_tasks, rollout, samples_per_task=samples, progress=progress,
                           new_episode=engine.episodes() if engine else None)
    outcomes: dict[str, list[int]] = {t["task_id"]: [] for t in tasks}
    for record in records:
        outcomes[record["task_id"]].append(int(record["success"]))
    return outcomes


def evaluate(cfg: EvalConfig, out: str | Path, model=None, progress: bool = True,
             resume: bool = True, experiment: str = "zero_shot") -> dict:
    """Run the evaluation and write the results JSON to `out`; returns the result.

    With `resume`, episodes already in `<out>.rollouts.jsonl` from the same settings are kept (a killed run
    goes on where it stopped); without it, that file is started afresh.
    """
    out = Path(out)
    rollouts_path = out.with_suffix(".rollouts.jsonl")
    if not resume:
        rollouts_path.unlink(missing_ok=True)
    settings = asdict(cfg)
    # Episodes are reusable across runs that differ only in how many tasks they take.
    episode_hash = config_hash({k: v for k, v in settings.items() if k != "limit"})
    tasks = evaluation_tasks(cfg)
    wanted = {t.id for t in tasks}
    done = {r["task_id"]: r for r in read_jsonl(rollouts_path)
            if r.get("config_hash") == episode_hash and r["task_id"] in wanted}
    remaining = [t for t in tasks if t.id not in done]
    start = time.perf_counter()
    if remaining:
        model = model or _load_model(cfg)
        rollout_cfg = rollout_config(cfg.rollout, temperature=cfg.temperature, seed=cfg.seed)

        def keep(record: dict) -> None:
            done[record["task_id"]] = record
            if record["terminated"] != "model_error":  # a resumed run asks the model again
                append_jsonl(rollouts_path, {**record, "config_hash": episode_hash})

        run_rollouts(model, remaining, rollout_cfg, on_record=keep, progress=progress)
    outcomes = [done[t.id] for t in tasks]
    if not outcomes:
        raise EvaluationError(f"no task to evaluate ({cfg.category} {cfg.split}, limit {cfg.limit})")
    if all(r["terminated"] == "model_error" for r in outcomes):
        raise EvaluationError(f"every episode ended in a model error (the first: {outcomes[0]['error_message']}); "
                              "is the model's endpoint up?")
    correct = sum(r["success"] for r in outcomes)
    row = {
        "benchmark": cfg.benchmark, "data_version": cfg.data_version, "eval_set": eval_set(cfg),
        "metric": "multi_turn_success_rate",
        "k": 1, "temperature": cfg.temperature, "seed": cfg.seed, "n": len(outcomes), "correct": correct,
        "value": round(100.0 * correct / len(outcomes), 2),
        "per_task": [{"task_id": r["task_id"], "success": r["success"], "error_type": r["error_type"],
                      "terminated": r["terminated"], "steps": len(r["steps"]),
                      "completion_tokens": r["completion_tokens"]} for r in outcomes],
    }
    return write_result(out, experiment=experiment, profile=cfg.profile, model=cfg.model,
                        config_hash=config_hash(settings), config=settings, metrics=[row],
                        details={"model_errors": sum(r["terminated"] == "model_error" for r in outcomes),
                                 "resumed_episodes": len(tasks) - len(remaining),
                                 "seconds": round(time.perf_counter() - start, 2),
                                 "rollouts_path": repo_relative(rollouts_path)})


def _evaluate_appworld(cfg: EvalConfig, out: str, progress: bool) -> int:
    """TGC / SGC on an AppWorld split (APPWORLD_ROOT's data, else the synthetic world), greedy, one episode per task."""
    from coevolve_lib.envs.appworld.agent import evaluate_appworld
    from coevolve_lib.envs.appworld.environment import appworld_source_root

    rollout = rollout_config(cfg.rollout, temperature=cfg.temperature, seed=cfg.seed)
    result = evaluate_appworld(_load_model(cfg), cfg.split, appworld_source_root(), rollout, out=out, limit=cfg.limit,
                               profile=cfg.profile, experiment="zero_shot", progress=progress)
    tgc, sgc = metric_row(result, "tgc"), metric_row(result, "sgc")
    print(f"{cfg.model} on {tgc['eval_set']}: TGC {tgc['value']:.2f}% ({tgc['correct']}/{tgc['n']}), SGC "
          f"{sgc['value']}% of {sgc['n']} scenarios (environment errors {result['details']['environment_errors']})")
    print(json.dumps({"model": result["model"], "eval_set": tgc["eval_set"], "tgc": tgc["value"], "sgc": sgc["value"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = profiles.ArgumentParser("python -m coevolve_lib evaluate", __doc__)
    parser.add_argument("--profile", default="tiny", help="profile in configs/ giving the defaults (default: tiny)")
    parser.add_argument("--model", help="tiny, smollm2-135m, a local path/hub id, or openai:<model>")
    parser.add_argument("--benchmark", help="bfcl or appworld (APPWORLD_ROOT's data, else the synthetic world)")
    parser.add_argument("--data-version", help="v3 or v4")
    parser.add_argument("--category", help="base, miss_func, miss_param or long_context")
    parser.add_argument("--split", help="BFCL: val, train or all; AppWorld: dev, test_normal, test_challenge")
    parser.add_argument("--limit", help="first N tasks of the split")
    parser.add_argument("--all-tasks", action="store_true", help="ignore the profile's limit: the whole split")
    parser.add_argument("--seed", help="sampling seed")
    parser.add_argument("--temperature", help="evaluation temperature (default: the profile's, 0)")
    parser.add_argument("--max-new-tokens", help="tokens per reply (rollout section)")
    parser.add_argument("--tool-format", help="auto, native or prompt (rollout section)")
    parser.add_argument("--tool-docs", help="full, compact or none (rollout section)")
    parser.add_argument("--batch-size", help="episodes batched per model call (rollout section)")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint for openai: models")
    parser.add_argument("--out", required=True, help="results JSON path (episodes go to <out>.rollouts.jsonl)")
    parser.add_argument("--no-resume", action="store_true", help="start afresh instead of keeping finished episodes")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    # Values stay strings here: the config validates and converts them, with one error line per bad value.
    given = {k: v for k, v in vars(args).items() if v is not None and k != "quiet"}
    evaluation = {k: given[k] for k in ("model", "benchmark", "data_version", "category", "split", "limit", "seed",
                                        "temperature", "base_url") if k in given}
    rollout = {k: given[k] for k in ("max_new_tokens", "tool_format", "tool_docs", "batch_size") if k in given}
    if args.all_tasks:
        evaluation["limit"] = None
    cfg = profiles.run_config(args.profile, {"evaluation": evaluation, "rollout": rollout}).evaluation
    try:
        if cfg.benchmark == "appworld":
            return _evaluate_appworld(cfg, args.out, progress=not args.quiet)
        result = evaluate(cfg, args.out, resume=not args.no_resume, progress=not args.quiet)
    except EvaluationError as exc:
        print(f"python -m coevolve_lib evaluate: error: {exc}", file=sys.stderr)
        return 1
    row = metric_row(result)
    print(f"{cfg.model} on {row['eval_set']} (n={row['n']}, T={row['temperature']}): {row['value']:.2f}% "
          f"({row['correct']}/{row['n']}; model errors {result['details']['model_errors']})")
    print(json.dumps({"model": result["model"], **{k: row[k] for k in ("eval_set", "n", "value")}}))
    return 0
