"""Curriculum learning (Table 10), our reading for a task pool (`training.pool_updates=curriculum`).

Bengio, Louradour, Collobert & Weston 2009, "Curriculum learning" (ICML): train on a sequence of distributions
Q_lambda that start with easy examples and re-weight towards the whole target distribution (lambda = 1: uniform).
Adapted: no new tasks; the pool is D_0 throughout. Difficulty = the policy's own recorded failure rate on the task
(its success over every GRPO rollout so far, shrunk towards the pool's mean by `curriculum_prior` pseudo-episodes;
ties: fewer reference calls, then the id; a task never drawn gets the mean). The weights are 0/1: GRPO draws uniformly
among the easiest c(t) share of the pool, with a competence c(t) = c_0 + (1 - c_0) t / max_steps growing linearly to
the whole pool (the linear competence schedule of Platanios et al. 2019), re-chosen every F steps from the success
rates recorded so far. Before the first round no success is known: the easiest c_0 share by reference length.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from coevolve_lib.core.config import BaselinesConfig
from coevolve_lib.core.records import read_json, write_json_atomic
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.feedback import write_round
from coevolve_lib.engine.pool_updates.base import PoolUpdate, RoundInputs, _report, _round_dir, register_pool_update


def success_counts(rollouts: list[dict]) -> dict[str, tuple[int, int]]:
    """task id -> (successful episodes, episodes) over `rollouts` (the checker's verdict, `success`)."""
    counts: dict[str, list[int]] = {}
    for record in rollouts:
        entry = counts.setdefault(record["task_id"], [0, 0])
        entry[0] += bool(record["success"])
        entry[1] += 1
    return {task_id: (s, n) for task_id, (s, n) in counts.items()}


def competence(step: int, max_steps: int, start: float) -> float:
    """c(t) = c_0 + (1 - c_0) t / T, capped at 1: the share of the pool the curriculum admits after step t."""
    return min(1.0, start + (1.0 - start) * step / max_steps)


def curriculum_selection(tasks: list[dict], counts: dict[str, tuple[int, int]], share: float, prior: float,
                         minimum: int) -> dict:
    """The easiest `share` of `tasks` (at least `minimum`, at most all), easiest first.

    A task's estimated success is (s + prior * m) / (n + prior) over its n recorded episodes with s successes, m
    being the mean success of every recorded episode (0 when none); a task never drawn gets m. Ties: fewer
    reference calls (longer tasks are harder: success multiplies over calls), then the task id."""
    successes = sum(s for s, _ in counts.values())
    episodes = sum(n for _, n in counts.values())
    mean = successes / episodes if episodes else 0.0
    ranking = []
    for task in tasks:
        s, n = counts.get(task["task_id"], (0, 0))
        estimate = (s + prior * mean) / (n + prior) if n + prior > 0 else mean
        ranking.append({"task_id": task["task_id"], "estimate": round(estimate, 6), "successes": s, "episodes": n,
                        "calls": len(task["reference_actions"])})
    ranking.sort(key=lambda r: (-r["estimate"], r["calls"], r["task_id"]))
    count = min(len(ranking), max(minimum, math.ceil(share * len(ranking) - 1e-9)))
    return {"competence": round(share, 6), "mean_success": round(mean, 6), "admitted": count,
            "admitted_ids": [r["task_id"] for r in ranking[:count]], "ranking": ranking}


def curriculum_round(engine: DataEngine, round_index: int, step: int, rollouts: list[dict], max_steps: int,
                     settings: BaselinesConfig, minimum: int) -> dict:
    """Re-choose the tasks GRPO draws from (round 0: before training, from no outcomes): writes
    `round_NNN/curriculum.json` (the ranking and the admitted ids) and, for rounds >= 1, an empty pool round and
    `report.json`. `rollouts`: every recorded GRPO rollout up to `step`. A finished round is read back."""
    started = time.perf_counter()
    round_dir = _round_dir(engine.run_dir, round_index)
    path = round_dir / "curriculum.json"
    if round_index and (round_dir / "report.json").exists():
        return read_json(round_dir / "report.json")
    if path.exists():
        selection = read_json(path)
    else:
        selection = curriculum_selection([t for t in engine.pool.tasks], success_counts(rollouts),
                                         competence(step, max_steps, settings.curriculum_start),
                                         settings.curriculum_prior, minimum)
        write_json_atomic(path, {"round": round_index, "step": step, **selection})
    if round_index == 0:
        return selection
    engine.pool.add_round([], round_index)  # no new tasks; the round is still committed (and resumes as one)
    admitted = selection["ranking"][:selection["admitted"]]
    report = _report(round_index, engine.pool, baseline="curriculum", counts={
        "competence": selection["competence"], "admitted": selection["admitted"],
        "tasks_seen": sum(r["episodes"] > 0 for r in selection["ranking"]),
        "mean_success": selection["mean_success"],
        "admitted_mean_estimate": round(sum(r["estimate"] for r in admitted) / max(len(admitted), 1), 6)})
    write_round(round_dir, report, time.perf_counter() - started)
    return report


def admitted_ids(run_dir: Path, round_index: int) -> list[str]:
    """The task ids a curriculum round admitted (read from its `curriculum.json`)."""
    return json.loads((_round_dir(run_dir, round_index) / "curriculum.json").read_text())["admitted_ids"]


@register_pool_update
class Curriculum(PoolUpdate):
    """Easiest first by the policy's recorded success, widening to the whole pool (no new tasks)."""

    name = "curriculum"

    def start(self, engine, settings, max_steps, tasks_per_step):
        curriculum_round(engine, 0, 0, [], max_steps, settings, tasks_per_step)  # by reference length

    def round(self, inputs: RoundInputs) -> dict:  # the success rates of every step so far, not only the window's
        return curriculum_round(inputs.data_engine, inputs.round_index, inputs.step, inputs.history(), inputs.max_steps,
                                inputs.settings, minimum=inputs.tasks_per_step)

    def admitted(self, run_dir, round_index):
        return admitted_ids(run_dir, round_index)
