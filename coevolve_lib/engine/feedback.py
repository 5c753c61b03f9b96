"""One CoEvolve feedback round (Fig. 2, stages 2-3) and the initial task set D_0, resumable stage by stage.

A round takes exploration targets (signal trajectories; for D_0, benchmark environments without signals) and:
1. explores each target: context (Fig. 11) + R runs x S steps of (action, observation, run id) triplets;
2. abstracts each (task, signal) group of triplets into task specs (Fig. 12);
3. validates each spec by execution in a fresh environment (and optionally an LLM judge, Fig. 13);
4. appends the accepted tasks to the pool as version `round_index`.

Every finished unit of work is one appended JSON line in the round's folder (`explorations.jsonl`,
`abstractions.jsonl`, `verdicts.jsonl`); a killed round started again skips what is there and redoes at most the
unit that was cut. The pool commit is idempotent per round, and `report.json` (written last, atomically) marks the
round done. Costs (LLM calls, tokens, seconds) are kept per stage, for the paper's Table 7 feedback-time ratio.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm.auto import tqdm

from coevolve_lib.core.config import ExploreConfig, SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.environment import RoundSteps
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.records import append_jsonl, read_jsonl, write_json_atomic
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import group_triplets
from coevolve_lib.engine.pool import TaskPool, content_keys
from coevolve_lib.engine.tasks import accept_unvalidated, to_pool_task


@dataclass
class FeedbackConfig:
    """Settings of one round's exploration and synthesis."""

    explore: ExploreConfig = field(default_factory=ExploreConfig)
    """Context builder, explorer, runs R and steps S."""
    synthesis: SynthesisConfig = field(default_factory=SynthesisConfig)
    """Abstraction mode, minimum steps, optional judge."""
    max_targets: int | None = 32
    """Signal trajectories re-explored per round (the paper leaves it open); None = all."""
    seed: int = 0
    """Seed of target selection."""
    excluded: frozenset[str] = frozenset()
    """Content keys (`engine.pool.content_keys`) of held-out tasks: a validated task that shares one is rejected as
    `heldout_leak`, so no round can add a test task to the pool."""


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


def screen_heldout(spec: dict, verdict: dict, excluded: frozenset[str]) -> dict:
    """`verdict`, or, when the task it accepts shares a content key with a held-out task (`excluded`), that verdict
    turned into a `heldout_leak` rejection."""
    if not (verdict["accepted"] and excluded):
        return verdict
    task = {"initial_config": spec["initial_config"], "query": spec["query"],
            "reference_actions": verdict["reference_actions"]}
    if not content_keys(task) & excluded:
        return verdict
    return {**verdict, "accepted": False, "reason": "heldout_leak", "reasons": ["heldout_leak"],
            "detail": "its environment and actions, or environment and query, are a held-out task's"}


def _target_key(target: ExplorationTarget) -> str:
    return target.signal_id or f"unguided/{target.task_id}"


def feedback_round(round_index: int, round_dir: str | Path, targets: list[ExplorationTarget], pool: TaskPool,
                   config: FeedbackConfig, steps: RoundSteps, model: ChatModel | None = None,
                   max_new_tasks: int | None = None, progress: bool = True, report_extra: dict | None = None) -> dict:
    """Run (or resume, or return the finished report of) one round; returns its report.

    `steps`: the environment's explore / abstract / validate (`Environment.round_steps`); `report_extra` joins the
    report."""
    round_dir = Path(round_dir)
    report_path = round_dir / "report.json"
    if report_path.exists():
        return json.loads(report_path.read_text())
    start = time.perf_counter()
    costs = {"explore": Cost(), "abstract": Cost(), "validate": Cost()}
    wall_seconds = {}

    # Stage 2: exploration, one line per target (context + triplets + cost together).
    stage_start = time.perf_counter()
    explorations = {e["key"]: e for e in read_jsonl(round_dir / "explorations.jsonl")}
    for target in tqdm(targets, desc=f"round {round_index}: explore", disable=not progress):
        key = _target_key(target)
        if key not in explorations:
            context, triplets, cost = steps.explore(target, config.explore, model)
            explorations[key] = {"key": key, "source": target.source(context), "signal": target.signal,
                                 "context": context, "triplets": triplets, "cost": cost}
            append_jsonl(round_dir / "explorations.jsonl", explorations[key])
    wanted = [explorations[_target_key(t)] for t in targets]
    for exploration in wanted:
        costs["explore"].merge(Cost.from_record(exploration["cost"]))
    wall_seconds["explore"] = round(time.perf_counter() - stage_start, 2)
    stage_start = time.perf_counter()

    # Stage 3a: abstraction, one line per (task, signal) group.
    sources = {(e["source"]["task_id"], e["source"]["signal_id"]): e for e in wanted}
    groups = group_triplets([t for e in wanted for t in e["triplets"]])
    abstractions = {a["key"]: a for a in read_jsonl(round_dir / "abstractions.jsonl")}
    for group_key, triplets in tqdm(groups.items(), desc=f"round {round_index}: abstract", disable=not progress):
        key = f"{group_key[0]}|{group_key[1]}"
        if key not in abstractions:
            specs, cost = steps.abstract(group_key, triplets, sources[group_key]["source"], config.synthesis, model)
            abstractions[key] = {"key": key, "group": list(group_key), "specs": specs, "cost": cost}
            append_jsonl(round_dir / "abstractions.jsonl", abstractions[key])
    specs = [spec for a in abstractions.values() for spec in a["specs"]]
    for a in abstractions.values():
        costs["abstract"].merge(Cost.from_record(a["cost"]))
    wall_seconds["abstract"] = round(time.perf_counter() - stage_start, 2)
    stage_start = time.perf_counter()

    # Stage 3b: validation by execution, one line per spec; duplicates of the pool or of this round are rejected.
    verdicts = {v["spec_id"]: v for v in read_jsonl(round_dir / "verdicts.jsonl")}
    known = set(pool.ids) | {v["task_id"] for v in verdicts.values() if v["accepted"]}
    pending = [spec for spec in specs if spec["spec_id"] not in verdicts]
    if pending and config.synthesis.validate and steps.prepare_validation is not None:
        steps.prepare_validation(pending)
    for spec in tqdm(specs, desc=f"round {round_index}: validate", disable=not progress):
        if spec["spec_id"] not in verdicts:
            verdict = (steps.validate(spec, config.synthesis, model, known_task_ids=known) if config.synthesis.validate
                       else accept_unvalidated(spec, config.synthesis, known))
            verdict = screen_heldout(spec, verdict, config.excluded)
            verdicts[spec["spec_id"]] = verdict
            append_jsonl(round_dir / "verdicts.jsonl", verdict)
            if verdict["accepted"]:
                known.add(verdict["task_id"])
    for verdict in verdicts.values():
        costs["validate"].merge(Cost.from_record(verdict.get("cost", {})))
    wall_seconds["validate"] = round(time.perf_counter() - stage_start, 2)

    # Stage 3c: append the accepted tasks (in a deterministic order) to the pool.
    accepted = []
    for spec in specs:
        verdict = verdicts[spec["spec_id"]]
        if not verdict["accepted"]:
            continue
        exploration = sources[(spec["source"]["task_id"], spec["source"]["signal_id"])]
        accepted.append(to_pool_task(spec, verdict, round_index, provenance_extra={
            "signal": exploration["signal"], "context": exploration["context"]}))
    if max_new_tasks is not None:  # keep the cap diverse: every source's first task, then every second, ...
        rank = Counter()
        ranked = []
        for order, task in enumerate(accepted):
            origin = task["provenance"]["origin_task"]
            ranked.append((rank[origin], order, task))
            rank[origin] += 1
        accepted = [task for _, _, task in sorted(ranked, key=lambda item: item[:2])][:max_new_tasks]
    pool.add_round(accepted, round_index)  # idempotent: a resumed round adds nothing twice

    rejections = Counter(v["reason"] for v in verdicts.values() if not v["accepted"])
    report = {
        "round": round_index,
        "targets": len(targets),
        "signal_types": dict(Counter(t.signal_type or "unguided" for t in targets)),
        "triplets": sum(len(e["triplets"]) for e in wanted),
        "valid_triplets": sum(t["valid"] for e in wanted for t in e["triplets"]),
        "specs": len(specs),
        "accepted": sum(v["accepted"] for v in verdicts.values()),
        "acceptance_rate": round(sum(v["accepted"] for v in verdicts.values()) / len(specs), 4) if specs else None,
        "accept_reasons": dict(Counter(v["reason"] for v in verdicts.values() if v["accepted"])),
        "rejection_reasons": dict(rejections),
        "heldout_leaks": rejections.get("heldout_leak", 0),  # always reported: 0 is a measurement too
        "added_to_pool": sum(t["pool_version"] == round_index for t in pool.tasks),
        "pool_size": len(pool),
        "pool_version": pool.version,
        "cost": {stage: {**c.as_dict(), "wall_seconds": wall_seconds[stage]} for stage, c in costs.items()},
        "seconds": round(time.perf_counter() - start, 2),
        **(report_extra or {}),
    }
    write_json_atomic(report_path, report)
    return report


def synthesize_initial(tasks, pool: TaskPool, round_dir: str | Path, config: FeedbackConfig,
                       target: Callable[..., ExplorationTarget], steps: RoundSteps, size: int = 100,
                       model: ChatModel | None = None, progress: bool = True) -> dict:
    """D_0: unguided exploration of the environments of `tasks` (benchmark *train* tasks: only their initial
    states are used, never their queries or answers as training tasks), abstracted and validated through the
    same path as a signal round, capped at `size` tasks (the paper's N = 100). `target(task)` makes a task's
    exploration target and `steps` runs the stages (`Environment.target`, `Environment.round_steps`)."""
    report_path = Path(round_dir) / "report.json"
    if report_path.exists():  # a finished D_0, before its targets are made (an AppWorld target asks the server)
        return json.loads(report_path.read_text())
    unguided = replace(config, explore=replace(config.explore, guided=False), max_targets=None)
    return feedback_round(0, round_dir, [target(task) for task in tasks], pool, unguided, steps, model, size, progress)
