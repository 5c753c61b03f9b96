"""Reflexion (Table 10), our reading for a task pool (`training.pool_updates=reflexion`).

Shinn et al. 2023, "Reflexion: Language Agents with Verbal Reinforcement Learning" (NeurIPS, arXiv:2303.11366): after a
failed trial a self-reflection model writes verbal feedback from the trajectory and the evaluator's (binary) outcome;
it is kept in a bounded memory (Omega = 1-3) and the next trial of the same task runs with it in context. Adapted as
data generation: every F steps, the window's failed tasks (one failed rollout each, its latest; a seeded draw of at
most `max_targets` tasks) get a reflection written by the reflector, with Reflexion's reflection prompt
(`prompts/reflexion.txt`): the trajectory's calls and observations and the outcome "failed" (never the checker's
message or the reference, which would leak the answer). The task is re-posed with its reflections appended to the
query (same initial state, same reference actions, so the same checker and reward), validated, and added to the pool;
the "next trial" is GRPO drawing it. A re-posed task that fails again gets the new reflection added to its memory (the
last `reflexion_memory` are kept). The reflector is the policy itself (`reflexion_reflector: policy`, greedy; as in
Reflexion, the agent reflects on its own trial; offline, the tiny policy writes text of little meaning) or
`data_engine.explorer_model` (`explorer`).
"""

from __future__ import annotations

import random
import time
from collections import Counter

from coevolve_lib.core.config import BaselinesConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.llm_calls import llm_scope
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.records import append_jsonl, read_json, read_jsonl, write_jsonl_atomic
from coevolve_lib.engine.contexts import trajectory_calls
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.feedback import screen_heldout, write_round
from coevolve_lib.engine.pool_updates.base import PoolUpdate, RoundInputs, _report, _round_dir, register_pool_update
from coevolve_lib.engine.tasks import carried_fields, content_id, to_pool_task
from coevolve_lib.prompts import clip, load_prompt

REFLECTIONS_HEADER = "Reflections on your earlier attempts at this task:"
"""Starts the block of reflections appended to a re-posed task's query."""


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
        **carried_fields(task),
    }


def reflexion_round(engine: DataEngine, round_index: int, rollouts: list[dict], settings: BaselinesConfig,
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
    validate = engine.round_stages().validate
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


@register_pool_update
class Reflexion(PoolUpdate):
    """Failed tasks re-posed with the reflector's verbal self-reflection in the query."""

    name = "reflexion"

    def round(self, inputs: RoundInputs) -> dict:
        return reflexion_round(inputs.data_engine, inputs.round_index, inputs.rollouts, inputs.settings,
                               inputs.reflector(), progress=inputs.progress)
