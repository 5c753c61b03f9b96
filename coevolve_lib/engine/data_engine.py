"""The data engine of one run folder, stage by stage, each stage cached on disk so that notebooks (and a killed
run) pick up where the last one stopped. It knows its benchmark only through the `Environment` seam
(`core.environment`): the environment gives the sources, the round stages, the episodes and the metric.

    D_0 (unguided exploration of the environment's `pool` sources, benchmark *train* environments)  ->  pool version 0
    policy (the profile's model; the tiny profile starts from a supervised warm start, a kit addition)
    rollouts of the policy on pool tasks (K per task, T=0.9; in training they come from GRPO steps)
    signals (forgetting / boundary / rare) from those rollouts
    a signal-guided round: contexts, re-exploration, abstraction, validation  ->  pool version 1, 2, ...
        (`engine.pool_updates.guided.signal_round`: in training, the pool update every F steps)

Layout of `run_dir`: pool.jsonl (+ .rounds.json), round_000/ (D_0), probe_rollouts.jsonl,
signals.jsonl, round_001/, ...
"""

from __future__ import annotations

import fcntl
import functools
import random
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import DataEngineConfig, RunError
from coevolve_lib.core.environment import ContractError, Environment, RoundStages, make_environment
from coevolve_lib.core.llm_calls import explorer_model, record_path
from coevolve_lib.core.model_specs import load_chat_model, local_model
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.paths import shown_path
from coevolve_lib.core.records import (
    config_hash,
    copy_tree_atomic,
    read_json,
    read_jsonl,
    write_json_atomic,
    write_jsonl_atomic,
)
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.feedback import FeedbackConfig, faults, synthesize_initial
from coevolve_lib.engine.heldout import heldout_tasks
from coevolve_lib.engine.pool import TaskPool, content_keys
from coevolve_lib.engine.shards import SINGLE, Shards
from coevolve_lib.engine.signals import SignalExtractor
from coevolve_lib.rollout.agent import rollout_phase, run_rollouts


def stamp_rollouts(records: list[dict], step: int, tasks: list[dict], drawn_before: list[str] = ()) -> list[dict]:
    """Add the training-time fields signals need: rollout_id, step, group_id, involved_classes, pool version.

    `records` are the rollouts of `tasks` in order, K per task (as `run_rollouts` returns them); `drawn_before`: the
    task ids the step drew before these (other processes' shares). Each draw of a task is its own group: the first
    draw in a step is "<step>/<task_id>", a task drawn again gets "#<n>" ("<step>/<task_id>#2"), so one task drawn
    twice is two groups with distinct rollout ids ("<group_id>/<sample_index>"), and the ids of a step without
    repeats stay what they always were (exploration seeds derive from them).
    """
    per_task = len(records) // max(len(tasks), 1)
    draws = Counter(drawn_before)
    group_ids = []
    for task in tasks:
        draws[task["task_id"]] += 1
        repeat = draws[task["task_id"]]
        group_ids.append(f"{step}/{task['task_id']}" + (f"#{repeat}" if repeat > 1 else ""))
    for index, record in enumerate(records):
        task = tasks[index // per_task]
        record["step"] = step
        record["group_id"] = group_ids[index // per_task]
        record["rollout_id"] = f"{record['group_id']}/{record['sample_index']}"
        record["involved_classes"] = list(task["involved_classes"])
        record["task_source"] = f"pool:{task['pool_version']}"
    return records


D0_INDEPENDENT = ("signals", "max_targets", "probe")
"""Data-engine settings D_0 never reads (the rounds' signals and targets, the probe): runs that differ only in these
share one D_0 (`DataEngine.d0_key`)."""


class EmptyPool(RunError):
    """D_0 accepted no task (a RunError: a run cannot train on nothing). `report` is D_0's round report, which says
    what the explorer did instead (calls, actions without a valid call, rejections and their reasons)."""

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report

    def __reduce__(self):  # raised in a study's worker process, re-raised in its parent
        return type(self), (str(self), self.report)


def explorer_options(config: DataEngineConfig, processes: int) -> dict:
    """An endpoint explorer's options (`OpenAIChatModel`) in one of a run's `processes` processes: the profile's
    deadlines, and this process's share of the run's limits on calls in flight and requests per minute."""
    rate = config.explorer_requests_per_minute
    return {"deadline_s": config.explorer_deadline_s, "batch_deadline_s": config.explorer_batch_deadline_s,
            "max_workers": config.explorer_max_concurrent // processes,
            "min_interval_s": 60.0 * processes / rate if rate else 0.0}


class DataEngine:
    """One run folder of the data engine for a `DataEngineConfig` on one environment: a registry name
    (`evaluation.environment_name`, made here for the run folder) or an `Environment` already made. `processes`: how
    many processes of one run each hold one (they share the explorer's limits)."""

    def __init__(self, config: DataEngineConfig, run_dir: str | Path, environment: str | Environment,
                 processes: int = 1):
        self.config = config
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.environment = (make_environment(environment, config, self.run_dir) if isinstance(environment, str)
                            else environment)
        self.pool = TaskPool(self.run_dir / "pool.jsonl")
        self.processes = processes
        self._excluded: frozenset[str] | None = None
        self.shards: Shards = SINGLE
        """The processes that run D_0 and the rounds together (a multi-process training run sets it)."""

    @functools.cached_property
    def explorer_model(self) -> ChatModel | None:
        """The explorer (`data_engine.explorer_model`; None when every stage runs offline), made when a round first
        asks for it, so that what needs none (held-out sets are built offline) needs no endpoint. An endpoint gets the
        profile's deadlines and this process's share of the run's limits."""
        config = self.config
        if not config.explorer_model:
            return None
        options = explorer_options(config, self.processes) if config.explorer_model.startswith("openai:") else {}
        return explorer_model(config.explorer_model, config.llm_calls, record_path(self.run_dir, config.llm_record),
                              lambda spec: load_chat_model(spec, **options))

    def sources(self, part: str) -> list:
        """The environment's `part` sources (`Environment.sources`), each with an `id` of its own: D_0's targets, the
        held-out sets and their leak guard key on it. A ContractError naming the environment otherwise."""
        sources = self.environment.sources(part)
        ids = [getattr(source, "id", None) for source in sources]
        where = f"environment {self.environment.name}: sources({part!r})"
        bad = next((i for i, source_id in enumerate(ids) if not (isinstance(source_id, str) and source_id)), None)
        if bad is not None:
            raise ContractError(f"{where}: source {bad} ({type(sources[bad]).__name__}) has no `id` string")
        repeated = sorted(i for i, count in Counter(ids).items() if count > 1)
        if repeated:
            raise ContractError(f"{where}: {len(repeated)} id(s) given to several sources, e.g. {repeated[0]!r} "
                                "(each source needs an id of its own)")
        return sources

    def round_stages(self) -> RoundStages:
        """How this engine's rounds explore, abstract and validate (the environment's)."""
        return self.environment.round_stages()

    def rollout_tasks(self, tasks: list[dict]) -> list:
        """Pool tasks as `run_rollouts` takes them, with `self.environment.new_episode`."""
        return self.environment.rollout_tasks(tasks)

    def close(self) -> None:
        """Stop what the environment started."""
        self.environment.close()

    def feedback_config(self) -> FeedbackConfig:
        """A round's settings; its `excluded` keys keep every held-out task out of the pool."""
        if self._excluded is None:
            self._excluded = frozenset(key for _, tasks in self.heldout_sets().values() for task in tasks
                                       for key in content_keys(task))
        return FeedbackConfig(explore=self.config.explore, synthesis=self.config.synthesis,
                              max_targets=self.config.max_targets, seed=self.config.explore.seed,
                              excluded=self._excluded,
                              max_observation_chars=self.config.rollout.budget.max_observation_chars,
                              environment_name=f"environment {self.environment.name}",
                              deadline_s=self.config.round_deadline_s)

    def d0_key(self) -> str:
        """What decides D_0 (`initial_pool`), hashed: the environment and its data, and every data-engine setting but
        those only later rounds read (`D0_INDEPENDENT`); the training section (seed, pool update, F) is not read."""
        settings = {name: value for name, value in asdict(self.config).items() if name not in D0_INDEPENDENT}
        return config_hash({"environment": self.environment.name, "identity": self.environment.heldout_identity(),
                            "data_engine": settings, "d0_format": 1})

    def initial_pool(self, progress: bool = True, shared: Path | None = None) -> dict:
        """D_0: the round-0 report (the pool then holds `d0_size` validated tasks). `EmptyPool` when it holds none:
        nothing after it could run (an LLM explorer whose endpoint never answered, or that wrote no valid call).

        `shared`: a folder where single-process runs share a D_0 built alike (`d0_key`: a study's variants that
        differ only in training): the first builds it and copies it to `shared/d0_<key>/`, the others (waiting for
        it under a lock) copy it from there, with the task files the first run's environment wrote (`copy_tasks`).
        A D_0 whose build met faults (`feedback.faults`) is not shared, nor one whose explorer calls are recorded in
        the run's own folder (`llm_record` unset): a copy would lack them."""
        per_run_record = self.config.llm_calls != "live" and self.config.llm_record is None
        if shared is None or self.shards.count > 1 or per_run_record:
            return self._build_initial_pool(progress)
        shared_d0 = Path(shared) / f"d0_{self.d0_key()}"
        shared_d0.parent.mkdir(parents=True, exist_ok=True)
        with open(shared_d0.with_name(shared_d0.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
            started = self.pool.version >= 0  # this run's own build (finished or killed mid-way) is finished here
            if not started and (shared_d0 / "round_000" / "report.json").exists():
                return self._copy_initial_pool(shared_d0)
            report = self._build_initial_pool(progress)
            if not (shared_d0 / "round_000" / "report.json").exists() and not faults(report):
                self._share_initial_pool(shared_d0)
            return report

    def _share_initial_pool(self, shared_d0: Path) -> None:
        """Copy this run's D_0 to `shared_d0`: its tasks and where it was built, then its round folder (last: its
        report marks the copy whole)."""
        shared_d0.mkdir(exist_ok=True)
        write_jsonl_atomic(shared_d0 / "pool.jsonl", [t for t in self.pool.tasks if t["pool_version"] == 0])
        write_json_atomic(shared_d0 / "built_in.json", {"run_dir": str(self.run_dir.resolve())})
        copy_tree_atomic(self.run_dir / "round_000", shared_d0 / "round_000")

    def _copy_initial_pool(self, shared_d0: Path) -> dict:
        """Make the D_0 shared at `shared_d0` this run's: its tasks runnable here, committed as round 0, then its round
        folder (last: its report marks D_0 done, so a run killed before that copies it again, adding nothing twice)."""
        tasks = read_jsonl(shared_d0 / "pool.jsonl")
        self.environment.copy_tasks(tasks, Path(read_json(shared_d0 / "built_in.json")["run_dir"]))
        self.pool.add_round(tasks, 0)
        round_dir = self.run_dir / "round_000"
        shutil.rmtree(round_dir, ignore_errors=True)  # what a killed copy left
        copy_tree_atomic(shared_d0 / "round_000", round_dir)
        return read_json(round_dir / "report.json")

    def _build_initial_pool(self, progress: bool) -> dict:
        round_dir = self.run_dir / "round_000"
        report = synthesize_initial(self.sources("pool"), self.pool, round_dir, self.feedback_config(),
                                    self.environment.target, self.round_stages(), size=self.config.d0_size,
                                    model=self.explorer_model, progress=progress, shards=self.shards)
        if not self.pool.tasks:
            skipped = report["cost"]["explore"]["skipped"]
            failed, refused = skipped.get("model_error", 0), skipped.get("no_valid_action", 0)
            replayed = self.config.llm_calls == "replay"
            if failed and replayed:
                why = f"{failed} explorer calls were recorded as model errors"
            elif failed:
                why = (f"{failed} explorer calls failed after their retries: does {self.config.explorer_model}'s "
                       "endpoint answer (OPENAI_BASE_URL), and without errors (its log says why)?")
            else:
                why = f"{report['valid_triplets']} exploration calls ran, {report['accepted']} tasks were accepted"
            if refused:
                why += f"; {refused} explorer replies held no valid call"
            redo = (f"replayed from {shown_path(self.explorer_model.path)}: record it again to change that" if replayed
                    else f"once that is fixed, delete {shown_path(round_dir)} to build D_0 again")
            raise EmptyPool(f"D_0 has no task ({report['targets']} environments explored; {why}); {redo}", report)
        return report

    def policy(self, progress: bool = True, use_shipped: bool = True) -> str:
        """The policy's model path: the profile's model (`.cache/models/<name>` when the kit built it), or the
        environment's warm start from it when its settings ask for one (`Environment.warm_start`)."""
        base = local_model(self.config.model)
        return self.environment.warm_start(base, progress=progress, use_shipped=use_shipped) or base

    def heldout(self, name: str, progress: bool = False) -> tuple[str, list[dict]]:
        """(key, tasks) of the held-out set `name` (`engine.heldout`): `new_tasks` explores the pool's own
        environments with the set's seed, `new_envs` the environment's unseen ones; a set cached by another run folder
        is made runnable in this one (`Environment.install_tasks`)."""
        env, cfg = self.environment, self.config
        sources = self.sources("pool" if name == "new_tasks" else "unseen")
        key, tasks = heldout_tasks(name, sources, env.heldout_identity(), cfg.explore, cfg.synthesis,
                                   getattr(cfg.heldout, name), env.target, env.round_stages(), progress=progress,
                                   max_observation_chars=cfg.rollout.budget.max_observation_chars,
                                   environment_name=f"environment {env.name}")
        env.install_tasks(tasks)
        return key, tasks

    def heldout_sets(self) -> dict[str, tuple[str, list[dict]]]:
        """Every held-out set the profile has (size > 0): name -> (key, tasks)."""
        return {name: self.heldout(name) for name in self.config.heldout.sets()}

    def probe_rollouts(self, progress: bool = True) -> list[dict]:
        """K rollouts per sampled pool task for each probe batch; each finished batch is one file (`probe/batch_NNN`),
        written atomically. A batch's records carry its index as their `step` (what the signals read)."""
        cfg = self.config.probe
        def batch_path(batch: int) -> Path:
            return self.run_dir / "probe" / f"batch_{batch:03d}.json"

        missing = [batch for batch in range(cfg.batches) if not batch_path(batch).exists()]
        if missing:
            model = load_chat_model(self.policy())
            pool_tasks = {t["task_id"]: t for t in self.pool.tasks}
            for batch in missing:
                rng = random.Random(cfg.seed * 1000 + batch)
                chosen = rng.sample(sorted(pool_tasks), min(cfg.tasks_per_step, len(pool_tasks)))
                phase = rollout_phase(self.config.rollout, seed=cfg.seed * 1000 + batch)
                records = run_rollouts(model, self.rollout_tasks([pool_tasks[i] for i in chosen]), phase,
                                       self.environment.new_episode, samples_per_task=cfg.samples_per_task,
                                       progress=progress)
                write_json_atomic(batch_path(batch), stamp_rollouts(records, batch, [pool_tasks[i] for i in chosen]))
        return [r for batch in range(cfg.batches) for r in read_json(batch_path(batch))]

    def signals(self, rollouts: list[dict]) -> list[dict]:
        """Signal records of the rollouts, step by step (the extractor's windows run across steps)."""
        path = self.run_dir / "signals.jsonl"
        if path.exists():
            return read_jsonl(path)
        extractor = SignalExtractor(self.config.signals)
        signals = []
        for step in sorted({r["step"] for r in rollouts}):
            signals += extractor.observe(step, [r for r in rollouts if r["step"] == step])
        write_jsonl_atomic(path, signals)
        return signals

    def pool_target(self, task: dict, signal: dict | None = None, trajectory: dict | None = None) -> ExplorationTarget:
        """The exploration target of a pool task (with the signal and trajectory that chose it, if any)."""
        return ExplorationTarget.from_pool_task(task, self.environment, signal, trajectory)

    def frozen_targets(self, round_index: int, choose) -> tuple[Path, list]:
        """(round folder, targets) of a round: `choose()` once, written to targets.json before any exploration; a
        restarted round reads them back, so it finishes the targets it started with (every pool update uses it).
        Several processes: the main one chooses, the others read its choice."""
        round_dir = self.run_dir / f"round_{round_index:03d}"
        path = round_dir / "targets.json"
        if self.shards.is_main and not path.exists():
            write_json_atomic(path, choose())
        # always: another process may see the file already, and must not pass this one by
        self.shards.settle([path] if self.shards.is_main else [])
        return round_dir, read_json(path)
