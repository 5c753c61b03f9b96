"""The paper's Table 10 adaptive data-generation baselines on the kit's GRPO-on-a-task-pool loop (BFCL), selected by
`training.pool_updates`: `curriculum`, `rest`, `reflexion`. The paper (appendix A.3) only names them (Reflexion, Shinn
et al. 2023; ReST, Gulcehre et al. 2023; "Curriculum Learning") and gives no implementation details; each is built
here as its own paper defines it, adapted to a loop whose unit of data is a validated BFCL task in a pool.

What every baseline shares with the other variants (so the tables compare like with like): the same D_0, policy,
GRPO steps, tasks per step, K rollouts per task and reward; a round every F steps where CoEvolve has its feedback
round, reading only what the loop already recorded (the steps' rollouts), never extra rollouts; at most
`data_engine.max_targets` source trajectories per round, as the `signals` and `random` rounds; new tasks only through
the environment's validation by execution (`RoundSteps.validate`, the same duplicate check) into the append-only pool as
version t, used from the step after the round. Each round writes `round_NNN/report.json` (plus its own files) and
its counts reach metrics.jsonl (`feedback/*`) and summary.json (`rounds`).

curriculum  Bengio, Louradour, Collobert & Weston 2009, "Curriculum learning" (ICML): train on a sequence of
            distributions Q_lambda that start with easy examples and re-weight towards the whole target distribution
            (lambda = 1: uniform). Adapted: no new tasks; the pool is D_0 throughout. Difficulty = the policy's own
            recorded failure rate on the task (its success over every GRPO rollout so far, shrunk towards the
            pool's mean by `curriculum_prior` pseudo-episodes; ties: fewer reference calls, then the id; a task never
            drawn gets the mean). The weights are 0/1: GRPO draws uniformly among the easiest c(t) share of the pool,
            with a competence c(t) = c_0 + (1 - c_0) t / max_steps growing linearly to the whole pool (the linear
            competence schedule of Platanios et al. 2019), re-chosen every F steps from the success rates recorded
            so far. Before the first round no success is known: the easiest c_0 share by reference length.
rest        Gulcehre et al. 2023, "Reinforced Self-Training (ReST) for Language Modeling" (arXiv:2308.08998): Grow
            (sample outputs of the current policy for the training inputs) then Improve (keep the samples whose
            reward is >= a threshold tau and train on them with an offline objective). Adapted, as data: Grow = the
            window's GRPO rollouts (sampled from the current policy on pool tasks at T = 0.9; no extra sampling);
            Improve's filter = reward >= `rest_threshold` (1.0: successful episodes); each kept trajectory (one per
            distinct call sequence of a task, round-robin over tasks, at most `max_targets`) replaces exploration:
            its executed calls are the triplets that the kit's abstraction turns into task specs, and validation by
            execution admits them to the pool. Improve's "train on the filtered data" is the next F GRPO steps
            drawing from the grown pool, not an offline SFT pass (an extra update per round would give this
            variant more gradient steps than the others, and a supervised pass over ZeRO-3 shards on the main process
            does not fit the loop). One threshold, not ReST's increasing sequence: with the binary reward there is
            one meaningful threshold. A trajectory equal to its task's reference actions abstracts to an existing
            task (deterministic abstraction) and is rejected as a duplicate; the report counts them.
reflexion   Shinn et al. 2023, "Reflexion: Language Agents with Verbal Reinforcement Learning" (NeurIPS,
            arXiv:2303.11366): after a failed trial a self-reflection model writes verbal feedback from the trajectory
            and the evaluator's (binary) outcome; it is kept in a bounded memory (Omega = 1-3) and the next trial
            of the same task runs with it in context. Adapted as data generation: every F steps, the window's
            failed tasks (one failed rollout each, its latest; a seeded draw of at most `max_targets` tasks) get a
            reflection written by the reflector, with Reflexion's reflection prompt (`prompts/reflexion.txt`): the
            trajectory's calls and observations and the outcome "failed" (never the checker's message or the
            reference, which would leak the answer). The task is re-posed with its reflections appended to the query
            (same initial state, same reference actions, so the same checker and reward), validated, and added to
            the pool; the "next trial" is GRPO drawing it. A re-posed task that fails again gets the new reflection
            added to its memory (the last `reflexion_memory` are kept). The reflector is the policy itself
            (`reflexion_reflector: policy`, greedy; as in Reflexion, the agent reflects on its own trial; offline,
            the tiny policy writes text of little meaning) or `data_engine.explorer_model` (`explorer`).

Model output (reflections, trajectories) is data only: it is put into prompts and queries, parsed by `safe_calls`
during validation, and never evaluated or executed as Python.
"""

from __future__ import annotations

import json
import math
import random
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from coevolve_lib.core.config import BaselineSettings
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.extensions import check_class, find
from coevolve_lib.core.llm_calls import llm_scope
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.records import append_jsonl, read_json, read_jsonl, write_json_atomic, write_jsonl_atomic
from coevolve_lib.engine.contexts import ExplorationTarget, trajectory_calls
from coevolve_lib.engine.explore import TRIPLET_SCHEMA
from coevolve_lib.engine.feedback import feedback_round, screen_heldout, write_round
from coevolve_lib.engine.tasks import content_id, to_pool_task
from coevolve_lib.prompts import clip, load_prompt

BASELINES = ("curriculum", "rest", "reflexion")
"""The `training.pool_updates` values this module implements."""
REFLECTIONS_HEADER = "Reflections on your earlier attempts at this task:"
"""Starts the block of reflections appended to a re-posed task's query."""


def _round_dir(run_dir: Path, round_index: int) -> Path:
    return Path(run_dir) / f"round_{round_index:03d}"


def _report(round_index: int, pool, **fields) -> dict:
    """A round report with the keys every round has (training/loop.py reads them), plus the baseline's own."""
    base = {"round": round_index, "targets": 0, "signal_types": {}, "specs": 0, "accepted": 0,
            "rejection_reasons": {}, "added_to_pool": sum(t["pool_version"] == round_index for t in pool.tasks),
            "pool_size": len(pool), "pool_version": pool.version}
    report = {**base, **fields}
    return {**report, "heldout_leaks": report["rejection_reasons"].get("heldout_leak", 0)}


# ------------------------------------------------------------------------------------------------ curriculum

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


def curriculum_round(engine, round_index: int, step: int, rollouts: list[dict], max_steps: int,
                     settings: BaselineSettings, minimum: int) -> dict:
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


# ------------------------------------------------------------------------------------------------ ReST

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
    """ReST's stand-in for exploration (`RoundSteps.explore`): the policy's own executed calls and
    observations, as the triplets of one run."""
    record, marker = target.trajectory, target.signal
    triplets = [{"schema": TRIPLET_SCHEMA, "run_id": marker["signal_id"], "step": index, "action": call,
                 "observation": observation, "valid": not target.is_error(observation),
                 "task_id": target.task_id, "signal_id": marker["signal_id"], "signal_type": "rest",
                 "explorer": "policy"}
                for index, (_, call, observation) in enumerate(trajectory_calls(record))]
    return None, triplets, Cost().as_dict()


def rest_round(engine, round_index: int, rollouts: list[dict], settings: BaselineSettings,
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
    return feedback_round(round_index, round_dir, targets, engine.pool, engine.feedback_config(),
                          replace(engine.round_steps(), explore=trajectory_triplets), engine.explorer_model,
                          progress=progress, report_extra={"baseline": "rest", "counts": counts},
                          shards=engine.shards)


# ------------------------------------------------------------------------------------------------ Reflexion

def reflexion_targets(rollouts: list[dict], pool_ids: set[str], max_targets: int | None, seed: int) -> list[str]:
    """Rollout ids to reflect on: per pool task with a failed rollout in `rollouts`, its latest failed one (highest
    step, then lowest sample index); a seeded draw of at most `max_targets` tasks."""
    latest: dict[str, dict] = {}
    for record in rollouts:
        if record["success"] or record["task_id"] not in pool_ids:
            continue
        key = (record["step"], -record["sample_index"])
        current = latest.get(record["task_id"])
        if current is None or key > (current["step"], -current["sample_index"]):
            latest[record["task_id"]] = record
    order = sorted(latest)
    random.Random(seed).shuffle(order)
    if max_targets is not None:
        order = order[:max_targets]
    return [latest[task_id]["rollout_id"] for task_id in order]


def base_query(task: dict) -> tuple[str, list[str]]:
    """(the task's query without reflections, its reflections so far): a re-posed task keeps both in provenance."""
    memory = task.get("provenance", {}).get("reflexion") or {}
    return memory.get("base_query", task["query"]), list(memory.get("reflections", []))


def reposed_query(query: str, reflections: list[str]) -> str:
    """The task's query with its reflections appended (Reflexion's memory in the agent's context)."""
    return query + "\n\n" + REFLECTIONS_HEADER + "\n" + "\n".join(f"{i}. {r}" for i, r in enumerate(reflections, 1))


def render_attempt(record: dict, observation_chars: int = 200, max_calls: int = 30) -> tuple[str, str]:
    """(the trial's calls and observations as text, its outcome): only what the agent saw and that it failed."""
    calls = trajectory_calls(record)
    lines = [f"- {clip(call, 200)} -> {clip(observation, observation_chars)}" for _, call, observation in
             calls[:max_calls]]
    if len(calls) > max_calls:
        lines.append(f"- ... {len(calls) - max_calls} more calls")
    if not calls:
        last = next((m.get("content") or "" for m in reversed(record.get("messages", []))
                     if m.get("role") == "assistant"), "")
        lines.append(f"- (no function call was made; your last reply was: {clip(last, 300)!r})")
    cap = {"turn_step_cap": " (too many steps in one turn)", "episode_step_cap": " (too many steps)",
           "completion_cap": " (the attempt ran out of tokens)"}.get(record.get("terminated"), "")
    return "\n".join(lines), f"failed: the task was not completed{cap}"


def reflection_prompt(task: dict, record: dict) -> str:
    query, reflections = base_query(task)
    attempt, outcome = render_attempt(record)
    return load_prompt("reflexion").format(
        task=query, attempt=attempt, outcome=outcome,
        reflections="\n".join(f"{i}. {r}" for i, r in enumerate(reflections, 1)) or "(none)")


def clean_reflection(text: str, limit: int) -> str:
    """The reflection as one paragraph: whitespace collapsed, cut to `limit` characters (at a word when possible)."""
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return text


def reflexion_spec(task: dict, reflection: str, record: dict, memory: int) -> dict:
    """The taskspec/v1 of `task` re-posed with `reflection` added to its memory (the last `memory` kept)."""
    query, reflections = base_query(task)
    reflections = (reflections + [reflection])[-memory:]
    new_query = reposed_query(query, reflections)
    actions = list(task["reference_actions"])
    return {
        "schema": "taskspec/v1",
        "spec_id": content_id(task["initial_config"], new_query, actions),
        "intent": task["intent"], "query": new_query, "action_sequence": actions,
        "completion_criterion": task["completion_criterion"], "initial_config": task["initial_config"],
        "involved_classes": list(task["involved_classes"]), "data_version": task["data_version"],
        "source": {"task_id": task["task_id"], "signal_id": f"reflexion/{record['rollout_id']}",
                   "signal_type": "reflexion", "context_id": None, "run_ids": [record["rollout_id"]]},
        "abstraction": "reflexion",
        "reflexion": {"base_query": query, "reflections": reflections},
    }


def reflexion_round(engine, round_index: int, rollouts: list[dict], settings: BaselineSettings,
                    reflector: ChatModel | None, progress: bool = True) -> dict:
    """One Reflexion round over the window's rollouts: reflect on failed trials, re-pose the tasks with their
    reflections, validate, grow the pool (version round_index). Reflections are appended to `reflections.jsonl`
    as they come, and the chosen rollouts frozen in `targets.json`, so a killed round resumes."""
    round_dir = _round_dir(engine.run_dir, round_index)
    if (round_dir / "report.json").exists():
        return read_json(round_dir / "report.json")
    started = time.perf_counter()
    pool_tasks = {t["task_id"]: t for t in engine.pool.tasks}
    by_id = {r["rollout_id"]: r for r in rollouts}
    seed = engine.config.explore.seed + round_index
    _, chosen = engine.frozen_targets(round_index, lambda: reflexion_targets(
        rollouts, set(pool_tasks), engine.config.max_targets, seed))
    records = [by_id[i] for i in chosen if i in by_id]
    done = {r["key"]: r for r in read_jsonl(round_dir / "reflections.jsonl")}
    missing = [r for r in records if r["rollout_id"] not in done]
    cost = Cost()
    if missing:
        if reflector is None:
            raise ValueError("pool_updates=reflexion needs a reflector: the policy, or data_engine.explorer_model with "
                             "training.baselines.reflexion_reflector=explorer")
        prompts = [[{"role": "user", "content": reflection_prompt(pool_tasks[r["task_id"]], r)}] for r in missing]
        config = GenerationConfig(max_new_tokens=settings.reflexion_max_new_tokens, temperature=0.0, seed=seed)
        with llm_scope(reflector, f"round {round_index}/reflect"):  # one batch: written only once it returns
            generations = cost.generate(reflector, prompts, config)
        for record, generation in zip(missing, generations):
            done[record["rollout_id"]] = {"key": record["rollout_id"], "task_id": record["task_id"],
                                          "reflector": reflector.name, "raw": generation.text,
                                          "reflection": clean_reflection(generation.text, settings.reflexion_chars),
                                          "error": generation.error}
            append_jsonl(round_dir / "reflections.jsonl", done[record["rollout_id"]])
    validate = engine.round_steps().validate
    known = set(engine.pool.ids)
    excluded = engine.feedback_config().excluded
    verdicts, accepted, rejections = [], [], Counter()
    for record in records:
        entry = done[record["rollout_id"]]
        if entry["error"] or not entry["reflection"]:
            rejections["reflector_error" if entry["error"] else "empty_reflection"] += 1
            continue
        spec = reflexion_spec(pool_tasks[record["task_id"]], entry["reflection"], record, settings.reflexion_memory)
        verdict = validate(spec, engine.config.synthesis, engine.explorer_model, known_task_ids=known)
        verdict = screen_heldout(spec, verdict, excluded)
        verdicts.append(verdict)
        if not verdict["accepted"]:
            rejections[verdict["reason"]] += 1
            continue
        known.add(verdict["task_id"])
        accepted.append(to_pool_task(spec, verdict, round_index, provenance_extra={
            "signal": None, "reflexion": {**spec["reflexion"], "reflector": entry["reflector"],
                                          "rollout_id": record["rollout_id"]}}))
    write_jsonl_atomic(round_dir / "verdicts.jsonl", verdicts)
    engine.pool.add_round(accepted, round_index)
    failed_tasks = {r["task_id"] for r in rollouts if not r["success"]}
    report = _report(round_index, engine.pool, baseline="reflexion", targets=len(records),
                     signal_types={"reflexion": len(records)} if records else {},
                     specs=len(verdicts), accepted=len(accepted), rejection_reasons=dict(rejections),
                     cost={"reflect": cost.as_dict()},
                     counts={"window_rollouts": len(rollouts), "failed_tasks": len(failed_tasks),
                             "reflections": sum(bool(done[r["rollout_id"]]["reflection"]) for r in records),
                             "memory_max": max((len(a["provenance"]["reflexion"]["reflections"]) for a in accepted),
                                               default=0)})
    write_round(round_dir, report, time.perf_counter() - started)
    return report


# ------------------------------------------------------------------------------------------------ the registry

@dataclass
class RoundInputs:
    """What a pool update reads at the end of a feedback period (only what the loop already recorded)."""

    engine: object
    """The run's `DataEngine` (its pool, environment, round steps)."""
    round_index: int
    step: int
    max_steps: int
    signals: list[dict]
    """The period's signal records."""
    rollouts: list[dict]
    """The period's GRPO rollouts."""
    history: Callable[[], list[dict]]
    """Every GRPO rollout recorded so far (read on demand: only the curriculum needs it)."""
    settings: BaselineSettings
    reflector: Callable[[], ChatModel | None]
    """Who writes reflections (made on demand: only Reflexion needs one)."""
    seed: int
    """The training seed."""
    tasks_per_step: int
    progress: bool = True


class PoolUpdate(ABC):
    """What `training.pool_updates` names: what happens to the pool every F steps. A new one is one subclass and one
    `@register_pool_update` in the kit, or in a package of your own, found as an entry point of the
    `coevolve_lib.pool_updates` group or a `module:Class` reference in the profile (`pool_update`)."""

    name: ClassVar[str]
    has_rounds: ClassVar[bool] = True
    """False: nothing happens every F steps (the static pool)."""
    sharded: ClassVar[bool] = False
    """True: every process of a multi-process run calls `round` and does its share of the round's exploration,
    abstraction and validation (`engine.feedback.Shards`, through `engine.shards`); False: the main process runs the
    round alone while the others wait."""

    def start(self, engine, settings: BaselineSettings, max_steps: int, tasks_per_step: int) -> None:
        """Before the first GRPO step (D_0 built)."""

    @abstractmethod
    def round(self, inputs: RoundInputs) -> dict:
        """Run (or resume) one round; its report (the feedback round's fields: targets, specs, added_to_pool, ...)."""

    def admitted(self, run_dir: Path, round_index: int) -> list[str] | None:
        """The task ids GRPO may draw after `round_index` (None: the whole pool)."""
        return None


POOL_UPDATES: dict[str, PoolUpdate] = {}
"""Pool update name -> the update (`training.pool_updates`)."""


def register_pool_update(cls: type[PoolUpdate]) -> type[PoolUpdate]:
    POOL_UPDATES[cls.name] = cls()
    return cls


def pool_update(name: str) -> PoolUpdate:
    """The pool update `name` gives (`core.extensions.find`: a registered one, an installed entry point of the
    `coevolve_lib.pool_updates` group, or a `module:Class` reference), kept under `name`. A ValueError in one line
    otherwise."""
    found = find("pool_updates", name, POOL_UPDATES, "pool update")
    if not isinstance(found, PoolUpdate):
        found = POOL_UPDATES[name] = check_class(found, PoolUpdate, name, "pool update")()
    return found


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
        return inputs.engine.signal_feedback_round(inputs.round_index, inputs.signals, inputs.rollouts,
                                                   progress=inputs.progress)


@register_pool_update
class RandomExploration(PoolUpdate):
    """The paper's "+ Random Exploration": as many pool tasks drawn at random, re-explored unguided."""

    name = "random"
    sharded = True

    def round(self, inputs: RoundInputs) -> dict:
        return inputs.engine.random_feedback_round(inputs.round_index, progress=inputs.progress, seed=inputs.seed)


@register_pool_update
class Curriculum(PoolUpdate):
    """Easiest first by the policy's recorded success, widening to the whole pool (no new tasks)."""

    name = "curriculum"

    def start(self, engine, settings, max_steps, tasks_per_step):
        curriculum_round(engine, 0, 0, [], max_steps, settings, tasks_per_step)  # by reference length

    def round(self, inputs: RoundInputs) -> dict:  # the success rates of every step so far, not only the window's
        return curriculum_round(inputs.engine, inputs.round_index, inputs.step, inputs.history(), inputs.max_steps,
                                inputs.settings, minimum=inputs.tasks_per_step)

    def admitted(self, run_dir, round_index):
        return admitted_ids(run_dir, round_index)


@register_pool_update
class ReST(PoolUpdate):
    """The policy's own rollouts with reward >= the threshold, abstracted and validated into new tasks."""

    name = "rest"
    sharded = True

    def round(self, inputs: RoundInputs) -> dict:
        return rest_round(inputs.engine, inputs.round_index, inputs.rollouts, inputs.settings, progress=inputs.progress)


@register_pool_update
class Reflexion(PoolUpdate):
    """Failed tasks re-posed with the reflector's verbal self-reflection in the query."""

    name = "reflexion"

    def round(self, inputs: RoundInputs) -> dict:
        return reflexion_round(inputs.engine, inputs.round_index, inputs.rollouts, inputs.settings,
                               inputs.reflector(), progress=inputs.progress)
