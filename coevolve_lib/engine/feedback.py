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
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
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
from coevolve_lib.core.environment import RoundSteps
from coevolve_lib.core.llm_calls import calls_cut_at, llm_scope
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.records import append_jsonl, read_json, read_jsonl, write_json_atomic
from coevolve_lib.core.shared_files import file_digest, wait_for_files
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import group_triplets
from coevolve_lib.engine.pool import TaskPool, content_keys
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
    environment: str = "the environment"
    """Who runs the round steps, for the line a fault of theirs logs (`environment <name>`)."""
    deadline_s: float | None = None
    """Most seconds this process spends on a round (`data_engine.round_deadline_s`): a unit of work (a target, a
    group, a spec) not started by then is skipped and counted (`round_deadline`), and explorer calls in flight are
    cut at it. None: unbounded."""


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


def _fault(environment: str, stage: str, key: str, error: Exception) -> tuple[str, dict]:
    """A round step that raised: one logged line, and (what was raised, the stage cost that counts the skip); the
    round goes on."""
    text = f"{type(error).__name__}: {' '.join(str(error).split())[:500]}"
    log.warning("%s: %s of %s raised %s; skipped and counted (environment_error)", environment, stage, key, text)
    cost = Cost()
    cost.skip("environment_error")
    return text, cost.as_dict()


def _deadline_skip(environment: str, stage: str, deadline_s: float) -> tuple[str, dict]:
    """A unit not started because the round's deadline passed: (why, the stage cost that counts the skip)."""
    text = f"not started: the round's {deadline_s:g} s had passed (data_engine.round_deadline_s)"
    log.warning("%s: %s skipped: %s", environment, stage, text)
    cost = Cost()
    cost.skip("round_deadline")
    return text, cost.as_dict()


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


@dataclass(frozen=True)
class Shards:
    """The processes that run a round together (a multi-process training run's, `training.loop`): each explores its
    share of the targets, abstracts its share of the groups and validates its share of the specs, appending its
    records to a file of its own (`<stage>.p<index>.jsonl`); then every process waits (`barrier`) and reads every
    file, so each stage ends with the whole stage's records everywhere. The main process commits the pool. One
    process (the default): the stage files of a single-process round, no waiting."""

    index: int = 0
    """This process (0: the main one)."""
    count: int = 1
    """Processes that run the round."""
    gather: Callable[[object], list] = field(default=lambda mine: [mine], compare=False)
    """Every process's object, in process order, once every process has given its own (accelerate's
    `gather_object`, a collective: it also waits for everyone)."""

    @property
    def is_main(self) -> bool:
        return self.index == 0

    def settle(self, written: Iterable[Path] = ()) -> None:
        """Go on together once every process's `written` files read back here as their writers wrote them: the
        digests go over the process group, the files over the shared filesystem, which may show another node's
        files late (`core.shared_files`; a RunError after `SETTLE_TIMEOUT_S`). One process: nothing to wait for."""
        if self.count == 1:
            return
        mine = {str(path): digest for path in written if (digest := file_digest(path)) is not None}
        wait_for_files({path: digest for share in self.gather(mine) for path, digest in share.items()})

    def share(self, items: list, split: bool = True) -> list:
        """This process's units: every `count`-th item from its index (stable, so a resumed round gives each
        process the same units); with `split=False` the main process takes them all."""
        if not split:
            return list(items) if self.is_main else []
        return list(items)[self.index::self.count]

    def file(self, round_dir: Path, stage: str) -> Path:
        return round_dir / (f"{stage}.jsonl" if self.count == 1 else f"{stage}.p{self.index}.jsonl")

    def records(self, round_dir: Path, stage: str) -> list[dict]:
        """Every process's records of `stage` (the single-process file first, then each process's)."""
        paths = [round_dir / f"{stage}.jsonl", *sorted(round_dir.glob(f"{stage}.p*.jsonl"))]
        return [record for path in paths for record in read_jsonl(path)]


SINGLE = Shards()
"""One process runs the round."""


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


def feedback_round(round_index: int, round_dir: str | Path, targets: list[ExplorationTarget], pool: TaskPool,
                   config: FeedbackConfig, steps: RoundSteps, model: ChatModel | None = None,
                   max_new_tasks: int | None = None, progress: bool = True, report_extra: dict | None = None,
                   shards: Shards = SINGLE) -> dict:
    """Run (or resume, or return the finished report of) one round; returns its report.

    `steps`: the environment's explore / abstract / validate (`Environment.round_steps`); `report_extra` joins the
    report. `shards`: the processes that run it together (every one calls this with the same arguments)."""
    round_dir = Path(round_dir)
    report_path = round_dir / "report.json"
    if report_path.exists():
        return read_json(report_path)
    start = time.perf_counter()
    until = start + config.deadline_s if config.deadline_s is not None else float("inf")
    costs = {"explore": Cost(), "abstract": Cost(), "validate": Cost()}
    wall_seconds = {}

    # Stage 2: exploration, one line per target (context + triplets + cost together).
    stage_start = time.perf_counter()

    def explore_skipped(target: ExplorationTarget, text: str, cost: dict) -> dict:  # it raised, or came too late
        return {"key": _target_key(target), "source": target.source(None), "signal": target.signal, "context": None,
                "triplets": [], "cost": cost, "error": text}

    def explore(target: ExplorationTarget) -> dict:
        key = _target_key(target)
        try:
            with llm_scope(model, f"round {round_index}/explore/{key}"), calls_cut_at(model, until):
                context, triplets, cost = steps.explore(target, config.explore, model)
        except KIT_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 (a tool of any environment may raise anything: this target's runs
            # are skipped and counted, the round goes on)
            return explore_skipped(target, *_fault(config.environment, "explore", key, error))
        stage_cost = Cost.from_record(cost)
        triplets = _cut_observations(triplets, config.max_observation_chars, stage_cost)
        return {"key": key, "source": target.source(context), "signal": target.signal,
                "context": context, "triplets": triplets, "cost": stage_cost.as_dict()}

    def explore_late(target: ExplorationTarget) -> dict:
        return explore_skipped(target, *_deadline_skip(config.environment, f"exploration of {_target_key(target)}",
                                                       config.deadline_s))

    explorations = _stage(shards, round_dir, "explorations", [(_target_key(t), t) for t in targets], "key", explore,
                          explore_late, until, f"round {round_index}: explore", progress)
    wanted = [explorations[_target_key(t)] for t in targets]
    for exploration in wanted:
        costs["explore"].merge(Cost.from_record(exploration["cost"]))
    wall_seconds["explore"] = time.perf_counter() - stage_start
    stage_start = time.perf_counter()

    # Stage 3a: abstraction, one line per (task, signal) group.
    sources = {(e["source"]["task_id"], e["source"]["signal_id"]): e for e in wanted}
    groups = group_triplets([t for e in wanted for t in e["triplets"]])

    def abstract_skipped(group_key: tuple, text: str, cost: dict) -> dict:  # it raised, or came too late
        return {"key": f"{group_key[0]}|{group_key[1]}", "group": list(group_key), "specs": [], "cost": cost,
                "error": text}

    def abstract(item: tuple) -> dict:
        group_key, triplets = item
        key = f"{group_key[0]}|{group_key[1]}"
        try:
            with llm_scope(model, f"round {round_index}/abstract/{key}"), calls_cut_at(model, until):
                specs, cost = steps.abstract(group_key, triplets, sources[group_key]["source"], config.synthesis,
                                             model)
        except KIT_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 (as in explore: the group is skipped and counted)
            return abstract_skipped(group_key, *_fault(config.environment, "abstract", key, error))
        return {"key": key, "group": list(group_key), "specs": specs, "cost": cost}

    def abstract_late(item: tuple) -> dict:
        return abstract_skipped(item[0], *_deadline_skip(config.environment, f"abstraction of {item[0][0]}|"
                                                         f"{item[0][1]}", config.deadline_s))

    abstractions = _stage(shards, round_dir, "abstractions", [(f"{k[0]}|{k[1]}", (k, t)) for k, t in groups.items()],
                          "key", abstract, abstract_late, until, f"round {round_index}: abstract", progress)
    drafted = [spec for key in groups for spec in abstractions[f"{key[0]}|{key[1]}"]["specs"]]  # the groups' order
    # A spec drafted again (the same task from another group) is validated once: its repeats are duplicates, and
    # never stand in for its verdict (keyed by spec id, a later "duplicate" verdict replaced the acceptance).
    first_drafts: dict[str, dict] = {}
    for spec in drafted:
        first_drafts.setdefault(spec["spec_id"], spec)
    specs = list(first_drafts.values())
    redrafted = len(drafted) - len(specs)
    for a in abstractions.values():
        costs["abstract"].merge(Cost.from_record(a["cost"]))
    wall_seconds["abstract"] = time.perf_counter() - stage_start
    stage_start = time.perf_counter()

    # Stage 3b: validation by execution, one line per spec; duplicates of the pool or of this round are rejected. An
    # environment that prepares its specs in one batch (AppWorld writes them into its data root) validates on the
    # main process only.
    split = steps.prepare_validation is None
    one_validator = shards.count == 1 or not split  # later specs see the earlier ones' verdicts (else: `deduplicated`)
    recorded = shards.records(round_dir, "verdicts")
    known = set(pool.ids) | ({v["task_id"] for v in recorded if v["accepted"]} if one_validator else set())
    pending = [spec for spec in shards.share(specs, split) if spec["spec_id"] not in {v["spec_id"] for v in recorded}]
    if pending and config.synthesis.validate and steps.prepare_validation is not None:
        steps.prepare_validation(pending)

    def spec_rejected(spec: dict, reason: str, text: str, cost: dict | None = None) -> dict:  # not validated
        return verdict_record(spec, spec["spec_id"], spec.get("action_sequence") or [], [reason], "", detail=text,
                              cost=Cost.from_record(cost) if cost else None)

    def validate(spec: dict) -> dict:
        try:
            with llm_scope(model, f"round {round_index}/validate/{spec['spec_id']}"), calls_cut_at(model, until):
                judged = (steps.validate(spec, config.synthesis, model, known_task_ids=known)
                          if config.synthesis.validate else accept_unvalidated(spec, config.synthesis, known))
        except KIT_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 (as in explore: the spec is rejected, counted by its reason)
            text, _ = _fault(config.environment, "validate", spec["spec_id"], error)  # a verdict counts by its reason
            judged = spec_rejected(spec, "environment_error", text)
        judged = screen_heldout(spec, screen_shape(spec, judged, config.synthesis.min_calls), config.excluded)
        judged = _cut_verdict_observations(judged, config.max_observation_chars)
        if judged["accepted"] and one_validator:
            known.add(judged["task_id"])
        return judged

    def validate_late(spec: dict) -> dict:
        return spec_rejected(spec, "round_deadline", *_deadline_skip(config.environment,
                                                                     f"validation of {spec['spec_id']}",
                                                                     config.deadline_s))

    verdicts = _stage(shards, round_dir, "verdicts", [(spec["spec_id"], spec) for spec in specs], "spec_id",
                      validate, validate_late, until, f"round {round_index}: validate", progress, split=split)
    verdicts = deduplicated(specs, verdicts)
    for verdict in verdicts.values():
        costs["validate"].merge(Cost.from_record(verdict.get("cost", {})))
    wall_seconds["validate"] = time.perf_counter() - stage_start

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
    if shards.is_main:
        pool.add_round(accepted, round_index)  # idempotent: a resumed round adds nothing twice

    rejections = Counter(v["reason"] for v in verdicts.values() if not v["accepted"])
    rejections["duplicate"] += redrafted
    rejections = +rejections  # no zero counts
    if rejections["heldout_leak"]:  # refused, but worth a line: an explorer that ignores its seed finds test tasks
        log.warning("%s: round %d validated %d task(s) that are held-out tasks; refused (heldout_leak). An explorer "
                    "that ignores its seed re-draws the held-out sets' tasks", config.environment, round_index,
                    rejections["heldout_leak"])
    report = {
        "round": round_index,
        "targets": len(targets),
        "signal_types": dict(Counter(t.signal_type or "unguided" for t in targets)),
        "triplets": sum(len(e["triplets"]) for e in wanted),
        "valid_triplets": sum(t["valid"] for e in wanted for t in e["triplets"]),
        "specs": len(drafted),
        "accepted": sum(v["accepted"] for v in verdicts.values()),
        "acceptance_rate": round(sum(v["accepted"] for v in verdicts.values()) / len(drafted), 4) if drafted else None,
        "accept_reasons": dict(Counter(v["reason"] for v in verdicts.values() if v["accepted"])),
        "rejection_reasons": dict(rejections),
        "heldout_leaks": rejections.get("heldout_leak", 0),  # always reported: 0 is a measurement too
        "added_to_pool": sum(t["pool_version"] == round_index for t in pool.tasks),
        "pool_size": len(pool),
        "pool_version": pool.version,
        "cost": {stage: c.as_dict() for stage, c in costs.items()},
        **(report_extra or {}),
    }
    if shards.is_main:
        write_round(round_dir, report, time.perf_counter() - start, wall_seconds)
    if shards.count > 1:  # the others take the committed pool and the report the main process wrote
        shards.settle([pool.path, report_path] if shards.is_main else [])
        if not shards.is_main:
            pool.__init__(pool.path)
            report = read_json(report_path)
    return report


def synthesize_initial(tasks, pool: TaskPool, round_dir: str | Path, config: FeedbackConfig,
                       target: Callable[..., ExplorationTarget], steps: RoundSteps, size: int = 100,
                       model: ChatModel | None = None, progress: bool = True, shards: Shards = SINGLE) -> dict:
    """D_0: unguided exploration of the environments of `tasks` (benchmark *train* tasks: only their initial
    states are used, never their queries or answers as training tasks), abstracted and validated through the
    same path as a signal round, capped at `size` tasks (the paper's N = 100). `target(task)` makes a task's
    exploration target and `steps` runs the stages (`Environment.target`, `Environment.round_steps`)."""
    report_path = Path(round_dir) / "report.json"
    if report_path.exists():  # a finished D_0, before its targets are made (an AppWorld target asks the server)
        return read_json(report_path)
    unguided = replace(config, explore=replace(config.explore, guided=False), max_targets=None)
    return feedback_round(0, round_dir, [target(task) for task in tasks], pool, unguided, steps, model, size, progress,
                          shards=shards)


def round_counts(report: dict) -> dict:
    """What a round did, in counts, from its report: targets, explorer-LLM calls, exploration steps and the valid
    ones, abstracted tasks, accepted ones, and the explorer's skips and validation's rejections by reason."""
    return {"targets": report["targets"], "explorer_calls": report["cost"]["explore"]["calls"],
            "triplets": report["triplets"], "valid_triplets": report["valid_triplets"], "specs": report["specs"],
            "accepted": report["accepted"], "explore_skipped": report["cost"]["explore"]["skipped"],
            "rejection_reasons": report["rejection_reasons"]}
