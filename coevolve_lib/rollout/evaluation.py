"""What every evaluation shares, whatever its environment: per-task outcomes of pool tasks (held-out sets, D_0
samples), the pass@k estimate, loading the evaluated model, and the error of an evaluation that measured nothing.
The benchmark's own metric is its environment's (`Environment.evaluate`)."""

from __future__ import annotations

import math
from pathlib import Path

from coevolve_lib.core.config import ConfigError, EvalConfig, RunError
from coevolve_lib.core.environment import Environment
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.records import append_jsonl, read_jsonl
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts


class EvaluationError(RunError):
    """An evaluation that measured nothing (no task, or every episode ended in a model error): no result is written."""


def load_evaluated_model(cfg: EvalConfig):
    """The evaluated chat model; a name that resolves to nothing is a user error, in one line."""
    try:
        options = ({"base_url": cfg.base_url, "deadline_s": cfg.deadline_s, "batch_deadline_s": cfg.batch_deadline_s}
                   if cfg.model.startswith("openai:") else {})
        return load_chat_model(cfg.model, **options)
    except (OSError, ValueError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot load model {cfg.model!r}: {first_line}") from None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c succeeded (Chen et al., 2021): the chance that at least
    one of k samples drawn without replacement from the n succeeds."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def task_outcomes(model, tasks: list[dict], rollout: RolloutPhase, environment: Environment, samples: int = 1,
                  progress: bool = False, records_path: str | Path | None = None) -> dict[str, list[int]]:
    """Success (1/0) of each of `samples` episodes per pool task (task/v1 records), by task id, rolled out in
    `environment` (`Environment.rollout_tasks`, `Environment.new_episode`). With `records_path` (an evaluation's
    `<out>.rollouts.jsonl`) it resumes: the episodes are appended there a batch of `rollout.batch_size` tasks at a
    time, and a task whose `samples` episodes are there is not rolled out again."""
    done: dict[str, list[dict]] = {}
    for record in read_jsonl(records_path) if records_path else []:
        done.setdefault(record.get("task_id"), []).append(record)
    todo = [t for t in tasks if len(done.get(t["task_id"], [])) < samples]
    step = len(todo) if records_path is None else max(1, rollout.batch_size)
    for start in range(0, len(todo), step or 1):
        chunk = todo[start:start + step]
        records = run_rollouts(model, environment.rollout_tasks(chunk), rollout, environment.new_episode,
                               samples_per_task=samples, progress=progress)
        done.update({task["task_id"]: [] for task in chunk})  # a task cut short by a kill is rolled out whole again
        for record in records:
            done[record["task_id"]].append(record)
            if records_path:
                append_jsonl(records_path, record)
    return {t["task_id"]: [int(r["success"]) for r in done.get(t["task_id"], [])][-samples:] for t in tasks}
