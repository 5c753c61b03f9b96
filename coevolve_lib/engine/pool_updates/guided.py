"""The kit's own pool updates: the static pool (GRPO on D_0), CoEvolve's signal-guided round and the paper's
"+ Random Exploration" (Table 3), each round a `feedback_round` over targets the run's data engine makes."""

from __future__ import annotations

import random
from dataclasses import replace

from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.feedback import feedback_round
from coevolve_lib.engine.pool_updates.base import PoolUpdate, RoundInputs, register_pool_update


def select_targets(signals: list[dict], rollouts_by_id: dict[str, dict], max_targets: int | None,
                   seed: int = 0) -> list[tuple[dict, dict]]:
    """(signal, trajectory) pairs to explore: one per (signal type, task), taken round-robin over the types in a
    seeded order so that every type is represented when the budget is small (boundary signals mark all K
    rollouts of a group, and would otherwise crowd out the rest)."""
    by_type: dict[str, list[tuple[dict, dict]]] = {}
    seen = set()
    for signal in signals:
        key = (signal["type"], signal["task_id"])
        trajectory = rollouts_by_id.get(signal["rollout_id"])
        if key in seen or trajectory is None:
            continue
        seen.add(key)
        by_type.setdefault(signal["type"], []).append((signal, trajectory))
    rng = random.Random(seed)
    for pairs in by_type.values():
        rng.shuffle(pairs)
    chosen = []
    while any(by_type.values()) and (max_targets is None or len(chosen) < max_targets):
        for signal_type in sorted(by_type):
            if by_type[signal_type] and (max_targets is None or len(chosen) < max_targets):
                chosen.append(by_type[signal_type].pop())
    return chosen


def signal_round(engine: DataEngine, round_index: int, signals: list[dict], rollouts: list[dict],
                 progress: bool = True) -> dict:
    """One signal-guided round over the selected signal trajectories; the pool grows to version round_index.

    The chosen (signal, trajectory) pairs are written to the round's `targets.json` before any exploration, and
    a restarted round reuses them: a run resumed from an earlier checkpoint (whose replayed steps may sample
    differently) finishes the round it was in, instead of mixing two target sets."""
    pool_tasks = {t["task_id"]: t for t in engine.pool.tasks}
    round_dir, pairs = engine.frozen_targets(round_index, lambda: select_targets(
        [s for s in signals if s["task_id"] in pool_tasks], {r["rollout_id"]: r for r in rollouts},
        engine.config.max_targets, seed=engine.config.explore.seed + round_index))
    targets = [engine.pool_target(pool_tasks[s["task_id"]], s, r) for s, r in pairs]
    return feedback_round(round_index, round_dir, targets, engine.pool, engine.feedback_config(), engine.round_stages(),
                          engine.explorer_model, progress=progress, shards=engine.shards)


def random_round(engine: DataEngine, round_index: int, progress: bool = True, seed: int = 0) -> dict:
    """One round of the paper's "+ Random Exploration" baseline (Table 3; its details are not given): as many
    targets as a signal round may have (`max_targets`), drawn uniformly from the pool instead of from weakness
    signals, each re-explored unguided (no context), then abstracted and validated the same way. The draw
    follows the training `seed` too, so each seed of a study draws its own targets. The drawn task ids are
    written before exploring, so a resumed round finishes the same targets."""
    pool_tasks = {t["task_id"]: t for t in engine.pool.tasks}
    count = len(pool_tasks) if engine.config.max_targets is None else engine.config.max_targets
    rng = random.Random(engine.config.explore.seed + 1_000_003 * seed + round_index)
    round_dir, chosen = engine.frozen_targets(
        round_index, lambda: rng.sample(sorted(pool_tasks), min(count, len(pool_tasks))))
    targets = [engine.pool_target(pool_tasks[task_id]) for task_id in chosen]
    unguided = replace(engine.feedback_config(), explore=replace(engine.config.explore, guided=False))
    return feedback_round(round_index, round_dir, targets, engine.pool, unguided, engine.round_stages(),
                          engine.explorer_model, progress=progress, shards=engine.shards)


@register_pool_update
class StaticPool(PoolUpdate):
    """Static GRPO: D_0 throughout."""

    name = "none"
    has_rounds = False

    def round(self, inputs: RoundInputs) -> dict:
        raise RuntimeError("the static pool has no rounds")


@register_pool_update
class SignalGuided(PoolUpdate):
    """CoEvolve: signal-guided re-exploration of the period's weakness trajectories."""

    name = "signals"
    sharded = True

    def round(self, inputs: RoundInputs) -> dict:
        return signal_round(inputs.data_engine, inputs.round_index, inputs.signals, inputs.rollouts,
                            progress=inputs.progress)


@register_pool_update
class RandomExploration(PoolUpdate):
    """The paper's "+ Random Exploration": as many pool tasks drawn at random, re-explored unguided."""

    name = "random"
    sharded = True

    def round(self, inputs: RoundInputs) -> dict:
        return random_round(inputs.data_engine, inputs.round_index, progress=inputs.progress, seed=inputs.seed)
