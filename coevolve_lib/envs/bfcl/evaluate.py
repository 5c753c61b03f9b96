"""BFCL's metric: multi-turn success rate of a chat model over a split, as the paper reports it.

`python -m coevolve_lib evaluate --model tiny --set environment.category=base --split val --out results/x.json`
(`cli.evaluate`)

Each finished episode is appended to `<out>.rollouts.jsonl` as it ends; a killed run started again with the
same arguments keeps those episodes and runs only the remaining tasks. The results JSON (schema `results/v2`,
coevolve_lib/core/results.py) records the scale (model, profile, data version, eval set, n, seed) beside the value, plus
per-task outcomes.
"""

from __future__ import annotations

import time
from pathlib import Path

from coevolve_lib.core.config import EvalConfig
from coevolve_lib.core.paths import repo_relative
from coevolve_lib.core.records import append_jsonl, config_hash, read_jsonl
from coevolve_lib.core.results import write_result
from coevolve_lib.envs.bfcl.backend import normalize_category
from coevolve_lib.envs.bfcl.episode import Episode
from coevolve_lib.envs.bfcl.settings import BFCLSettings
from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks
from coevolve_lib.rollout.agent import RolloutPhase, rollout_phase, run_rollouts
from coevolve_lib.rollout.evaluation import EvaluationError, load_evaluated_model


def evaluation_tasks(cfg: EvalConfig) -> list:
    bfcl = BFCLSettings(**cfg.environment)
    tasks = split_tasks(load_tasks(bfcl.data_version, normalize_category(bfcl.category)), cfg.split,
                        seed=cfg.split_seed)
    return tasks[: cfg.limit] if cfg.limit is not None else tasks


def eval_set(cfg: EvalConfig) -> str:
    """The name results give the tasks `cfg` evaluates on: `<benchmark>/<data version>/<category>/<split>`."""
    bfcl = BFCLSettings(**cfg.environment)
    return f"{cfg.environment_name}/{bfcl.data_version}/{normalize_category(bfcl.category)}/{cfg.split}"


def evaluate(cfg: EvalConfig, out: str | Path, model=None, progress: bool = True, resume: bool = True,
             experiment: str = "zero_shot", rollout: RolloutPhase | None = None) -> dict:
    """Run the evaluation and write the results JSON to `out`; returns the result.

    With `resume`, episodes already in `<out>.rollouts.jsonl` from the same settings are kept (a killed run
    goes on where it stopped); without it, that file is started afresh.
    """
    out = Path(out)
    rollouts_path = out.with_suffix(".rollouts.jsonl")
    if not resume:
        rollouts_path.unlink(missing_ok=True)
    # A given rollout config (the training loop's) is part of what the episodes are: recorded and hashed with them.
    settings = {**cfg.recorded(), **({"rollout_config": rollout.recorded()} if rollout else {})}
    # Episodes are reusable across runs that differ only in how many tasks they take.
    episode_hash = config_hash({k: v for k, v in settings.items() if k != "limit"})
    tasks = evaluation_tasks(cfg)
    wanted = {t.id for t in tasks}
    done = {r["task_id"]: r for r in read_jsonl(rollouts_path)
            if r.get("config_hash") == episode_hash and r["task_id"] in wanted}
    remaining = [t for t in tasks if t.id not in done]
    start = time.perf_counter()
    if remaining:
        model = model or load_evaluated_model(cfg)
        phase = rollout or rollout_phase(cfg.rollout, temperature=cfg.temperature, seed=cfg.seed)

        def keep(record: dict) -> None:
            done[record["task_id"]] = record
            if record["terminated"] != "model_error":  # a resumed run asks the model again
                append_jsonl(rollouts_path, {**record, "config_hash": episode_hash})

        run_rollouts(model, remaining, phase, Episode, on_record=keep, progress=progress)
    outcomes = [done[t.id] for t in tasks]
    if not outcomes:
        raise EvaluationError(f"no task to evaluate ({eval_set(cfg)}, limit {cfg.limit})")
    if all(r["terminated"] == "model_error" for r in outcomes):
        raise EvaluationError(f"every episode ended in a model error (the first: {outcomes[0]['error_message']}); "
                              "is the model's endpoint up?")
    correct = sum(r["success"] for r in outcomes)
    row = {
        "benchmark": cfg.environment_name, "data_version": BFCLSettings(**cfg.environment).data_version,
        "eval_set": eval_set(cfg),
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


