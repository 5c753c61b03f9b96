"""One CoEvolve feedback round (Fig. 2, stages 2-3) and the initial task set D_0, resumable stage by stage.

A round takes exploration targets (signal trajectories; for D_0, benchmark environments without signals) and:
1. explores each target: context (Fig. 11) + R runs x S steps of (action, observation, run id) triplets;
2. abstracts each (task, signal) group of triplets into task specs (Fig. 12);
3. validates each spec by execution in a fresh environment (and optionally an LLM judge, Fig. 13);
4. appends the accepted tasks to the pool as version `round_index`.

Every finished unit of work is one appended JSON line in the round's folder (`explorations.jsonl`,
`abstractions.jsonl`, `verdicts.jsonl`); a killed round started again skips what is there and redoes at most the
unit that was cut. The pool commit is idempotent per round, and `report.json` (written last, atomically) marks the
round done. Costs (LLM calls, tokens) are kept per stage in the report; the round's wall times in `timings.json`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm.auto import tqdm

from coevolve_lib.core.config import (
    ConfigError,
    ExploreConfig,
    RunError,
    SynthesisConfig,
)
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.environment import RoundStages
from coevolve_lib.core.llm_calls import calls_cut_at, llm_scope
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.records import append_jsonl, read_json, write_json_atomic
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import group_triplets
from coevolve_lib.engine.pool import TaskPool, content_keys
from coevolve_lib.engine.shards import SINGLE, Shards
from coevolve_lib.engine.tasks import accept_unvalidated, to_pool_task
from coevolve_lib.engine.tasks import verdict as verdict_record

log = logging.getLogger(__name__)


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
    max_observation_chars: int | None = None
    """Longest observation a triplet keeps (the episodes' `rollout.budget.max_observation_chars`); a longer one is cut
    and counted (`skipped["observation_cap"]` in the stage's cost). None: kept whole."""
    environment_name: str = "the environment"
    """Who runs the round stages, for the line a fault of theirs logs (`environment <name>`)."""
    deadline_s: float | None = None
    """Most seconds this process spends on a round (`data_engine.round_deadline_s`): a unit of work (a target, a
    group, a spec) not started by then is skipped and counted (`round_deadline`), and explorer calls in flight are
    cut at it. None: unbounded."""


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


def screen_shape(spec: dict, verdict: dict, min_calls: int) -> dict:
    """`verdict`, or, when the task it accepts has fewer than `min_calls` reference calls (`too_short`) or an empty
    query (`empty_query`), that verdict turned into a rejection: whatever an environment's validation decides, no such
    task reaches the pool (each would be a free reward)."""
    if not verdict["accepted"]:
        return verdict
    reasons = (["too_short"] if len(verdict["reference_actions"]) < min_calls else []) + \
        (["empty_query"] if not str(spec.get("query") or "").strip() else [])
    if not reasons:
        return verdict
    return {**verdict, "accepted": False, "reason": reasons[0], "reasons": reasons,
            "detail": f"{len(verdict['reference_actions'])} reference calls (at least {min_calls}), query "
                      f"{'empty' if 'empty_query' in reasons else 'given'}"}


KIT_ERRORS = (ConfigError, RunError)
"""What a round step may raise that is no fault of the environment's tools (a bad setting, an endpoint that never
answers): the run stops in one line, as everywhere else."""


def _cut_observations(triplets: list[dict], limit: int | None, cost: Cost) -> list[dict]:
    """The triplets with each observation cut at `limit` characters (`observation_cut` marks a cut one)."""
    if limit is None:
        return triplets
    out = []
    for triplet in triplets:
        observation = triplet.get("observation")
        if isinstance(observation, str) and len(observation) > limit:
            triplet = {**triplet, "observation": observation[:limit], "observation_cut": len(observation)}
            cost.skip("observation_cap")
        out.append(triplet)
    return out


def _cut_verdict_observations(verdict: dict, limit: int | None) -> dict:
    """The verdict with each observation of its execution cut at `limit` characters, as exploration's are
    (`observations_cut` counts the cut ones): an environment's 300,000-character observation made 3.6 MB of 18
    verdicts."""
    observations = verdict.get("observations") or []
    if limit is None or not any(isinstance(o, str) and len(o) > limit for o in observations):
        return verdict
    cut = sum(isinstance(o, str) and len(o) > limit for o in observations)
    return {**verdict, "observations": [o[:limit] if isinstance(o, str) else o for o in observations],
            "observations_cut": cut}


def _target_key(target: ExplorationTarget) -> str:
    return target.signal_id or f"unguided/{target.task_id}"


def _group_key(group: tuple[str, str]) -> str:
    return f"{group[0]}|{group[1]}"


def _stage(shards: Shards, round_dir: Path, stage: str, units: list[tuple[str, object]], key_field: str,
           work: Callable[[object], dict], late: Callable[[object], dict], until: float, desc: str, progress: bool,
           split: bool = True) -> dict[str, dict]:
    """Run one resumable stage: this process's share of the `(key, unit)` pairs not yet recorded, each record
    appended as it is done (`late(unit)`'s skip record for a unit reached after `until`, a `time.perf_counter`
    time); then (several processes) wait for all and read every process's records. Key -> record."""
    done = {record[key_field]: record for record in shards.records(round_dir, stage)}
    todo = [(key, unit) for key, unit in shards.share(units, split) if key not in done]
    for key, unit in tqdm(todo, desc=desc, disable=not (progress and shards.is_main)):
        done[key] = work(unit) if time.perf_counter() < until else late(unit)
        append_jsonl(shards.file(round_dir, stage), done[key])
    if shards.count > 1:
        shards.settle([shards.file(round_dir, stage)])
        done = {record[key_field]: record for record in shards.records(round_dir, stage)}
    return done


def deduplicated(specs: list[dict], verdicts: dict[str, dict]) -> dict[str, dict]:
    """The round's verdicts with a spec that repeats an earlier accepted one (its spec id or its task id is that
    one's task id) turned into a `duplicate` rejection, in spec order: what validating the specs one by one, each
    against the pool and the round's accepted tasks so far, decides. Verdicts made that way pass unchanged; shards
    validate against the pool only and meet here."""
    accepted, out = set(), {}
    for spec in specs:
        verdict = verdicts[spec["spec_id"]]
        if verdict["accepted"] and {spec["spec_id"], verdict["task_id"]} & accepted:
            verdict = {**verdict, "accepted": False, "reason": "duplicate", "reasons": ["duplicate"],
                       "detail": "; ".join(["already in the pool", *filter(None, [verdict["detail"]])])}
        if verdict["accepted"]:
            accepted.add(verdict["task_id"])
        out[spec["spec_id"]] = verdict
    return out


def write_round(round_dir: Path, report: dict, seconds: float, stage_seconds: dict[str, float] | None = None) -> None:
    """A finished round's two files: `timings.json`, the wall seconds it took (in all, and by stage), which no rerun
    repeats, then `report.json`, what it did (written last: it marks the round finished). Keeping the times apart
    keeps every other file of the round the same when it runs again with the same LLM replies (`core.llm_calls`)."""
    stages = {"stage_seconds": {k: round(v, 2) for k, v in stage_seconds.items()}} if stage_seconds else {}
    write_json_atomic(Path(round_dir) / "timings.json", {"seconds": round(seconds, 2), **stages})
    write_json_atomic(Path(round_dir) / "report.json", report)


def round_timings(round_dir: str | Path) -> dict:
    """The wall times of a finished round (`timings.json`, `write_round`); {} for one an older kit wrote, whose
    report held them."""
    path = Path(round_dir) / "timings.json"
    return read_json(path) if path.exists() else {}


_STAGES = {"explore": ("explorations", "exploration"), "abstract": ("abstractions", "abstraction"),
           "validate": ("verdicts", "validation")}
"""A stage's verb (its LLM scope, fault line and bar) -> (the file of its records, its noun in a deadline line)."""


class _Round:
    """One round as its stages share it: what it runs on, its deadline, and what the stages before made."""

    def __init__(self, round_index: int, round_dir: Path, targets: list[ExplorationTarget], pool: TaskPool,
                 config: FeedbackConfig, stages: RoundStages, model: ChatModel | None, progress: bool, shards: Shards):
        self.index, self.dir, self.targets, self.pool = round_index, round_dir, targets, pool
        self.config, self.stages, self.model, self.progress, self.shards = config, stages, model, progress, shards
        self.start = time.perf_counter()
        self.until = self.start + config.deadline_s if config.deadline_s is not None else float("inf")
        self.costs = {"explore": Cost(), "abstract": Cost(), "validate": Cost()}
        self.wall_seconds: dict[str, float] = {}
        self.explorations: list[dict] = []  # explore's, in target order
        self.sources: dict[tuple[str, str], dict] = {}  # (task id, signal id) -> its exploration
        self.drafted: list[dict] = []  # abstract's specs, every draft; `specs` holds each once
        self.specs: list[dict] = []
        self.verdicts: dict[str, dict] = {}  # spec id -> validate's verdict

    def guarded(self, stage: str, units: list[tuple[str, object]], call: Callable[[object], object],
                done: Callable[[object, object], dict], skipped: Callable[[object, str, str, dict], dict],
                key_field: str = "key", split: bool = True) -> dict[str, dict]:
        """`_stage` under the round's one fault guard: a unit's `call(unit)` runs with its LLM calls scoped and cut at
        the deadline, and `done(unit, result)` is its record. A unit whose call raised (a kit error, `KIT_ERRORS`,
        still stops the run) or that the deadline reached first is logged and recorded as `skipped(unit, reason,
        text, cost)`, the cost counting the skip under `reason`, so a resumed round does not retry it."""
        file, noun = _STAGES[stage]
        environment_name = self.config.environment_name

        def skip(unit: object, reason: str, text: str) -> dict:
            cost = Cost()
            cost.skip(reason)
            return skipped(unit, reason, text, cost.as_dict())

        def work(item: tuple[str, object]) -> dict:
            key, unit = item
            try:
                with llm_scope(self.model, f"round {self.index}/{stage}/{key}"), calls_cut_at(self.model, self.until):
                    result = call(unit)
            except KIT_ERRORS:
                raise
            except Exception as error:  # noqa: BLE001 (a tool of any environment may raise anything: this unit is
                # skipped and counted, the round goes on)
                text = f"{type(error).__name__}: {' '.join(str(error).split())[:500]}"
                log.warning("%s: %s of %s raised %s; skipped and counted (environment_error)", environment_name, stage,
                            key, text)
                return skip(unit, "environment_error", text)
            return done(unit, result)

        def late(item: tuple[str, object]) -> dict:
            text = f"not started: the round's {self.config.deadline_s:g} s had passed (data_engine.round_deadline_s)"
            log.warning("%s: %s of %s skipped: %s", environment_name, noun, item[0], text)
            return skip(item[1], "round_deadline", text)

        return _stage(self.shards, self.dir, file, [(key, (key, unit)) for key, unit in units], key_field, work, late,
                      self.until, f"round {self.index}: {stage}", self.progress, split)

    def explore(self) -> None:
        """Stage 2: exploration, one line per target (context + triplets + cost together)."""
        stage_start = time.perf_counter()

        def done(target: ExplorationTarget, result: tuple) -> dict:
            context, triplets, cost = result
            stage_cost = Cost.from_record(cost)
            triplets = _cut_observations(triplets, self.config.max_observation_chars, stage_cost)
            return {"key": _target_key(target), "source": target.source(context), "signal": target.signal,
                    "context": context, "triplets": triplets, "cost": stage_cost.as_dict()}

        def skipped(target: ExplorationTarget, reason: str, text: str, cost: dict) -> dict:
            return {"key": _target_key(target), "source": target.source(None), "signal": target.signal,
                    "context": None, "triplets": [], "cost": cost, "error": text}

        explorations = self.guarded("explore", [(_target_key(t), t) for t in self.targets],
                                    lambda target: self.stages.explore(target, self.config.explore, self.model),
                                    done, skipped)
        self.explorations = [explorations[_target_key(t)] for t in self.targets]
        for exploration in self.explorations:
            self.costs["explore"].merge(Cost.from_record(exploration["cost"]))
        self.wall_seconds["explore"] = time.perf_counter() - stage_start

    def abstract(self) -> None:
        """Stage 3a: abstraction, one line per (task, signal) group; each spec drafted is kept once."""
        stage_start = time.perf_counter()
        self.sources = {(e["source"]["task_id"], e["source"]["signal_id"]): e for e in self.explorations}
        groups = group_triplets([t for e in self.explorations for t in e["triplets"]])

        def draft(item: tuple) -> tuple[list[dict], dict]:
            group_key, triplets = item
            return self.stages.abstract(group_key, triplets, self.sources[group_key]["source"], self.config.synthesis,
                                       self.model)

        def record(item: tuple, specs: list[dict], cost: dict, **error: str) -> dict:
            return {"key": _group_key(item[0]), "group": list(item[0]), "specs": specs, "cost": cost, **error}

        abstractions = self.guarded("abstract", [(_group_key(k), (k, t)) for k, t in groups.items()], draft,
                                    lambda item, result: record(item, *result),
                                    lambda item, reason, text, cost: record(item, [], cost, error=text))
        self.drafted = [spec for key in groups for spec in abstractions[_group_key(key)]["specs"]]
        # A spec drafted again (the same task from another group) is validated once: its repeats are duplicates, and
        # never stand in for its verdict (keyed by spec id, a later "duplicate" verdict replaced the acceptance).
        first_drafts: dict[str, dict] = {}
        for spec in self.drafted:
            first_drafts.setdefault(spec["spec_id"], spec)
        self.specs = list(first_drafts.values())
        for a in abstractions.values():
            self.costs["abstract"].merge(Cost.from_record(a["cost"]))
        self.wall_seconds["abstract"] = time.perf_counter() - stage_start

    def validate(self) -> None:
        """Stage 3b: validation by execution, one line per spec; duplicates of the pool or of this round are rejected.
        An environment that prepares its specs in one batch (AppWorld writes them into its data root) validates on
        the main process only."""
        stage_start = time.perf_counter()
        config, stages, shards = self.config, self.stages, self.shards
        split = stages.prepare_validation is None
        # one validator: later specs see the earlier ones' verdicts (else: `deduplicated`)
        one_validator = shards.count == 1 or not split
        recorded = shards.records(self.dir, "verdicts")
        known = set(self.pool.ids) | ({v["task_id"] for v in recorded if v["accepted"]} if one_validator else set())
        validated = {v["spec_id"] for v in recorded}
        pending = [spec for spec in shards.share(self.specs, split) if spec["spec_id"] not in validated]
        if pending and stages.prepare_validation is not None:
            stages.prepare_validation(pending, config.synthesis)
        unvalidated = stages.accept_unvalidated or accept_unvalidated

        def judge(spec: dict) -> dict:
            return (stages.validate(spec, config.synthesis, self.model, known_task_ids=known)
                    if config.synthesis.validate else unvalidated(spec, config.synthesis, known))

        def done(spec: dict, judged: dict) -> dict:
            judged = screen_heldout(spec, screen_shape(spec, judged, config.synthesis.min_calls), config.excluded)
            judged = _cut_verdict_observations(judged, config.max_observation_chars)
            if judged["accepted"] and one_validator:
                known.add(judged["task_id"])
            return judged

        def skipped(spec: dict, reason: str, text: str, cost: dict) -> dict:  # not validated: rejected for `reason`
            # a fault's verdict counts by its reason alone; a late one's cost counts the skip too
            return verdict_record(spec, spec["spec_id"], spec.get("action_sequence") or [], [reason], "", detail=text,
                                  cost=Cost.from_record(cost) if reason == "round_deadline" else None)

        verdicts = self.guarded("validate", [(spec["spec_id"], spec) for spec in self.specs], judge, done, skipped,
                                key_field="spec_id", split=split)
        self.verdicts = deduplicated(self.specs, verdicts)
        for verdict in self.verdicts.values():
            self.costs["validate"].merge(Cost.from_record(verdict.get("cost", {})))
        self.wall_seconds["validate"] = time.perf_counter() - stage_start

    def commit(self, max_new_tasks: int | None) -> None:
        """Stage 3c: append the accepted tasks (in a deterministic order) to the pool."""
        accepted = []
        for spec in self.specs:
            verdict = self.verdicts[spec["spec_id"]]
            if not verdict["accepted"]:
                continue
            exploration = self.sources[(spec["source"]["task_id"], spec["source"]["signal_id"])]
            accepted.append(to_pool_task(spec, verdict, self.index, provenance_extra={
                "signal": exploration["signal"], "context": exploration["context"]}))
        if max_new_tasks is not None:  # keep the cap diverse: every source's first task, then every second, ...
            rank = Counter()
            ranked = []
            for order, task in enumerate(accepted):
                origin = task["provenance"]["origin_task"]
                ranked.append((rank[origin], order, task))
                rank[origin] += 1
            accepted = [task for _, _, task in sorted(ranked, key=lambda item: item[:2])][:max_new_tasks]
        if self.shards.is_main:
            self.pool.add_round(accepted, self.index)  # idempotent: a resumed round adds nothing twice

    def report(self, report_extra: dict | None) -> dict:
        """The round's report, written by the main process (last: it marks the round done) and read by the others."""
        verdicts, drafted, pool, shards = self.verdicts.values(), self.drafted, self.pool, self.shards
        rejections = Counter(v["reason"] for v in verdicts if not v["accepted"])
        rejections["duplicate"] += len(drafted) - len(self.specs)  # the specs drafted again
        rejections = +rejections  # no zero counts
        if rejections["heldout_leak"]:  # refused, but worth a line: an explorer that ignores its seed finds test tasks
            log.warning("%s: round %d validated %d task(s) that are held-out tasks; refused (heldout_leak). An "
                        "explorer that ignores its seed re-draws the held-out sets' tasks",
                        self.config.environment_name, self.index, rejections["heldout_leak"])
        accepted = sum(v["accepted"] for v in verdicts)
        report = {
            "round": self.index,
            "targets": len(self.targets),
            "signal_types": dict(Counter(t.signal_type or "unguided" for t in self.targets)),
            "triplets": sum(len(e["triplets"]) for e in self.explorations),
            "valid_triplets": sum(t["valid"] for e in self.explorations for t in e["triplets"]),
            "specs": len(drafted),
            "accepted": accepted,
            "acceptance_rate": round(accepted / len(drafted), 4) if drafted else None,
            "accept_reasons": dict(Counter(v["reason"] for v in verdicts if v["accepted"])),
            "rejection_reasons": dict(rejections),
            "heldout_leaks": rejections.get("heldout_leak", 0),  # always reported: 0 is a measurement too
            "added_to_pool": sum(t["pool_version"] == self.index for t in pool.tasks),
            "pool_size": len(pool),
            "pool_version": pool.version,
            "cost": {stage: c.as_dict() for stage, c in self.costs.items()},
            **(report_extra or {}),
        }
        if shards.is_main:
            write_round(self.dir, report, time.perf_counter() - self.start, self.wall_seconds)
        if shards.count > 1:  # the others take the committed pool and the report the main process wrote
            shards.settle([pool.path, self.dir / "report.json"] if shards.is_main else [])
            if not shards.is_main:
                pool.__init__(pool.path)
                report = read_json(self.dir / "report.json")
        return report


def feedback_round(round_index: int, round_dir: str | Path, targets: list[ExplorationTarget], pool: TaskPool,
                   config: FeedbackConfig, stages: RoundStages, model: ChatModel | None = None,
                   max_new_tasks: int | None = None, progress: bool = True, report_extra: dict | None = None,
                   shards: Shards = SINGLE) -> dict:
    """Run (or resume, or return the finished report of) one round; returns its report.

    `stages`: the environment's explore / abstract / validate (`Environment.round_stages`); `report_extra` joins the
    report. `shards`: the processes that run it together (every one calls this with the same arguments)."""
    round_dir = Path(round_dir)
    if (round_dir / "report.json").exists():
        return read_json(round_dir / "report.json")
    run = _Round(round_index, round_dir, targets, pool, config, stages, model, progress, shards)
    run.explore()
    run.abstract()
    run.validate()
    run.commit(max_new_tasks)
    return run.report(report_extra)


def synthesize_initial(tasks, pool: TaskPool, round_dir: str | Path, config: FeedbackConfig,
                       target: Callable[..., ExplorationTarget], stages: RoundStages, size: int = 100,
                       model: ChatModel | None = None, progress: bool = True, shards: Shards = SINGLE) -> dict:
    """D_0: unguided exploration of the environments of `tasks` (benchmark *train* tasks: only their initial
    states are used, never their queries or answers as training tasks), abstracted and validated through the
    same path as a signal round, capped at `size` tasks (the paper's N = 100). `target(task)` makes a task's
    exploration target and `stages` runs them (`Environment.target`, `Environment.round_stages`)."""
    report_path = Path(round_dir) / "report.json"
    if report_path.exists():  # a finished D_0, before its targets are made (an AppWorld target asks the server)
        return read_json(report_path)
    unguided = replace(config, explore=replace(config.explore, guided=False), max_targets=None)
    return feedback_round(0, round_dir, [target(task) for task in tasks], pool, unguided, stages, model, size, progress,
                          shards=shards)


UNREPEATABLE_SKIPS = ("environment_error", "model_error", "context_model_error", "api_error", "round_deadline")
"""Skips a working environment, endpoint and clock would not make: a round that met one would come out otherwise."""


def faults(report: dict) -> int:
    """How many of a round's units met a fault (`UNREPEATABLE_SKIPS`, environment errors in validation): a D_0 or
    held-out set built so is used by its run but never shared or cached."""
    return sum(report["cost"][stage]["skipped"].get(reason, 0) for stage in report["cost"]
               for reason in UNREPEATABLE_SKIPS) + report["rejection_reasons"].get("environment_error", 0)


def round_counts(report: dict) -> dict:
    """What a round did, in counts, from its report: targets, explorer-LLM calls, exploration steps and the valid
    ones, abstracted tasks, accepted ones, and the explorer's skips and validation's rejections by reason."""
    return {"targets": report["targets"], "explorer_calls": report["cost"]["explore"]["calls"],
            "triplets": report["triplets"], "valid_triplets": report["valid_triplets"], "specs": report["specs"],
            "accepted": report["accepted"], "explore_skipped": report["cost"]["explore"]["skipped"],
            "rejection_reasons": report["rejection_reasons"]}
