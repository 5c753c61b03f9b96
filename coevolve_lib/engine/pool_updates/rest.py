"""ReST (Table 10), our reading for a task pool (`training.pool_updates=rest`).

Gulcehre et al. 2023, "Reinforced Self-Training (ReST) for Language Modeling" (arXiv:2308.08998): Grow (sample
outputs of the current policy for the training inputs) then Improve (keep the samples whose reward is >= a threshold
tau and train on them with an offline objective). Adapted, as data: Grow = the window's GRPO rollouts (sampled from the
current policy on pool tasks at T = 0.9; no extra sampling); Improve's filter = reward >= `rest_threshold` (1.0:
successful episodes); each kept trajectory (one per distinct call sequence of a task, round-robin over tasks, at most
`max_targets`) replaces exploration: its executed calls are the triplets that the kit's abstraction turns into task
specs, and validation by execution admits them to the pool (on AppWorld, whose records keep code, not each call's
result, the calls its code makes with literal arguments are run again from the task's start state:
`RoundStages.replay`). Improve's "train on the filtered data" is the next F GRPO
steps drawing from the grown pool, not an offline SFT pass (an extra update per round would give this variant more
gradient steps than the others, and a supervised pass over ZeRO-3 shards on the main process does not fit the loop).
One threshold, not ReST's increasing sequence: with the binary reward there is one meaningful threshold. A trajectory
equal to its task's reference actions abstracts to an existing task (deterministic abstraction) and is rejected as a
duplicate; the report counts them.
"""

from __future__ import annotations

import random
from dataclasses import replace

from coevolve_lib.core.config import BaselinesConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.engine.contexts import ExplorationTarget, trajectory_calls
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.explore import TRIPLET_SCHEMA
from coevolve_lib.engine.feedback import feedback_round
from coevolve_lib.engine.pool_updates.base import PoolUpdate, RoundInputs, register_pool_update


def rest_filter(rollouts: list[dict], threshold: float, pool_ids: set[str], max_targets: int | None,
                seed: int) -> list[dict]:
    """Improve's filter: rollouts of pool tasks with reward >= `threshold` that executed at least one call, one per
    distinct call sequence of a task; taken round-robin over the tasks (in a seeded order) so that a small budget
    covers many tasks, at most `max_targets`."""
    by_task: dict[str, dict[tuple, dict]] = {}
    for record in sorted(rollouts, key=lambda r: (r["step"], r["rollout_id"])):
        calls = tuple(call for _, call, _ in trajectory_calls(record))
        if record["reward"] >= threshold and calls and record["task_id"] in pool_ids:
            by_task.setdefault(record["task_id"], {}).setdefault(calls, record)
    order = sorted(by_task)
    random.Random(seed).shuffle(order)
    queues = [list(by_task[task_id].values()) for task_id in order]
    chosen = []
    while any(queues) and (max_targets is None or len(chosen) < max_targets):
        for queue in queues:
            if queue and (max_targets is None or len(chosen) < max_targets):
                chosen.append(queue.pop(0))
    return chosen


def rest_marker(record: dict) -> dict:
    """The record that stands where a signal would (its id keys the exploration and the abstraction group)."""
    return {"signal_id": f"rest/{record['rollout_id']}", "type": "rest", "task_id": record["task_id"],
            "rollout_id": record["rollout_id"], "step": record["step"], "evidence": {"reward": record["reward"]}}


def trajectory_triplets(target: ExplorationTarget, explore_config=None, model=None) -> tuple[None, list[dict], dict]:
    """ReST's stand-in for exploration (`RoundStages.explore`): the policy's own executed calls and
    observations, as the triplets of one run."""
    record, marker = target.trajectory, target.signal
    triplets = [{"schema": TRIPLET_SCHEMA, "run_id": marker["signal_id"], "step": index, "action": call,
                 "observation": observation, "valid": not target.is_error(observation),
                 "task_id": target.task_id, "signal_id": marker["signal_id"], "signal_type": "rest",
                 "explorer": "policy"}
                for index, (_, call, observation) in enumerate(trajectory_calls(record))]
    return None, triplets, Cost().as_dict()


def rest_round(engine: DataEngine, round_index: int, rollouts: list[dict], settings: BaselinesConfig,
               progress: bool = True) -> dict:
    """One ReST round over the window's rollouts: filter, abstract, validate, grow the pool (version round_index).
    The kept rollout ids are frozen in `targets.json` before anything else, so a resumed round finishes them."""
    pool_tasks = {t["task_id"]: t for t in engine.pool.tasks}
    by_id = {r["rollout_id"]: r for r in rollouts}
    seed = engine.config.explore.seed + round_index
    round_dir, chosen = engine.frozen_targets(round_index, lambda: [r["rollout_id"] for r in rest_filter(
        rollouts, settings.rest_threshold, set(pool_tasks), engine.config.max_targets, seed)])
    records = [by_id[i] for i in chosen if i in by_id]
    targets = [engine.pool_target(pool_tasks[r["task_id"]], rest_marker(r), r) for r in records]
    passed = [r for r in rollouts if r["reward"] >= settings.rest_threshold]
    counts = {"window_rollouts": len(rollouts), "filtered_rollouts": len(passed),
              "filtered_tasks": len({r["task_id"] for r in passed}), "trajectories_used": len(records),
              "threshold": settings.rest_threshold}
    stages = engine.round_stages()
    return feedback_round(round_index, round_dir, targets, engine.pool, engine.feedback_config(),
                          replace(stages, explore=stages.replay or trajectory_triplets), engine.explorer_model,
                          progress=progress, report_extra={"baseline": "rest", "counts": counts},
                          shards=engine.shards)


@register_pool_update
class ReST(PoolUpdate):
    """The policy's own rollouts with reward >= the threshold, abstracted and validated into new tasks."""

    name = "rest"
    sharded = True

    def round(self, inputs: RoundInputs) -> dict:
        return rest_round(inputs.data_engine, inputs.round_index, inputs.rollouts, inputs.settings,
                          progress=inputs.progress)
