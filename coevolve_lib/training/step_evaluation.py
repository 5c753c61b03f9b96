"""The loop's own evaluation of the policy at a step (single-process runs; multi-process runs evaluate their saved
checkpoints afterwards with `python -m coevolve_lib evaluate`): greedy success on each held-out set and on a fixed
sample of D_0, plus the environment's metric (`Environment.evaluate`) on its val split at the last step.

Written to eval/step_NNNNN.json, one file per step: a resumed run reads it back instead of evaluating the same
checkpoint twice, and the per-task outcomes it keeps feed the studies' paired comparisons. Runs that start alike share
their step-0 files (`shared_starts/eval_<key>/`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

from coevolve_lib.core.config import RunConfig
from coevolve_lib.core.environment import checked_evaluation
from coevolve_lib.core.models import HFChatModel
from coevolve_lib.core.paths import repo_relative
from coevolve_lib.core.records import config_hash, write_json_atomic
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.rollout.agent import rollout_phase
from coevolve_lib.rollout.evaluation import task_outcomes


def percent(outcomes: dict[str, list[int]]) -> float | None:
    """Success rate (%) over every episode of `outcomes` (task id -> 1/0 per episode)."""
    episodes = [o for per_task in outcomes.values() for o in per_task]
    return round(100.0 * sum(episodes) / len(episodes), 2) if episodes else None


class StepEvaluation:
    """The evaluations of one run folder. Made when the loop starts: the held-out sets are built (or read) then."""

    def __init__(self, run: RunConfig, out_dir: Path, data_engine: DataEngine, shared_starts: Path | None = None):
        self.run, self.cfg, self.out_dir, self.data_engine = run, run.training, out_dir, data_engine
        self.shared_starts = shared_starts
        """Where runs that start alike share their step-0 evaluation (None: not shared)."""
        d0_ids = [t["task_id"] for t in data_engine.pool.tasks if t["pool_version"] == 0]
        self.pool_sample = d0_ids[:run.training.eval_pool_tasks]
        """The D_0 task ids evaluated at every step."""
        self.heldout = data_engine.heldout_sets()
        """Held-out set name -> (key, tasks)."""

    def at_step(self, step: int, model, tokenizer, val: bool) -> tuple[dict, float]:
        """(The step's evaluation, the seconds it took here: 0 when read back from its file or a shared start).
        `val`: with the environment's metric on its val split."""
        path = self.out_dir / "eval" / f"step_{step:05d}.json"
        shared = self._shared_start(step == 0 and val)
        if not path.exists() and shared is not None and shared.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            for file in sorted(shared.iterdir(), key=lambda f: f.name == path.name):  # the same evaluation, made
                shutil.copyfile(file, path.parent / file.name)  # by another run; its step file last (the marker)
        if path.exists():
            return json.loads(path.read_text()), 0.0
        start = time.perf_counter()
        result = self._measure(step, HFChatModel.from_loaded(model, tokenizer, name=f"{self.run.model}@step{step}"),
                               val)
        write_json_atomic(path, result)
        if shared is not None and not shared.exists():  # step 0: kept for the next run that starts alike
            self._share(path.parent, shared)
        return result, time.perf_counter() - start

    def _measure(self, step: int, policy: HFChatModel, val: bool) -> dict:
        greedy = rollout_phase(self.run.rollout, temperature=0.0, token_level=True,
                                max_completion_tokens=self.cfg.max_completion_tokens)
        result = {"step": step}
        if self.heldout:  # every set in one batch of episodes (the sets' environments differ: no id is in two)
            outcomes = task_outcomes(policy, [t for _, tasks in self.heldout.values() for t in tasks], greedy,
                                     self.data_engine.environment)
            result["heldout_outcomes"] = {}
            for name, (key, tasks) in self.heldout.items():
                per_task = {t["task_id"]: outcomes[t["task_id"]] for t in tasks}
                result.update({f"eval/{name}_greedy_success": percent(per_task), f"eval/{name}_n": len(per_task),
                               f"eval/{name}_set": key})
                result["heldout_outcomes"][name] = per_task
        pool_tasks = {t["task_id"]: t for t in self.data_engine.pool.tasks}
        d0 = task_outcomes(policy, [pool_tasks[i] for i in self.pool_sample], greedy, self.data_engine.environment)
        result.update({"eval/d0_greedy_success": percent(d0), "eval/d0_n": len(d0), "d0_outcomes": d0})
        limit = self.cfg.eval_limit if self.cfg.eval_limit is not None else self.run.evaluation.limit
        if val and limit != 0:  # the environment's own metric: its first row is the headline, later rows by name
            settings = replace(self.run.evaluation, model=policy.name, profile=self.run.profile, limit=limit)
            environment = self.data_engine.environment
            doc = checked_evaluation(environment, environment.evaluate(
                policy, settings, self.out_dir / "eval" / f"val_step_{step:05d}.json", greedy,
                experiment="coevolve_train"))
            headline, *others = doc["metrics"]
            result.update({"eval/val_success": headline["value"], "eval/val_n": headline["n"]})
            for row in others:
                result.update({f"eval/val_{row['metric']}": row["value"], f"eval/val_{row['metric']}_n": row["n"]})
        return result

    def _shared_start(self, wanted: bool) -> Path | None:
        """Where the step-0 evaluation of runs that start alike is shared: the same starting policy, held-out set,
        D_0 sample, rollout, evaluation and budget give the same greedy episodes, so a study's variants evaluate
        their common start once (None: sharing is off, or not step 0)."""
        if not (wanted and self.shared_starts):
            return None
        key = config_hash({"policy": repo_relative(self.data_engine.policy()),
                           "heldout": {name: key for name, (key, _) in self.heldout.items()},
                           "d0_sample": self.pool_sample, "rollout": asdict(self.run.rollout),
                           "evaluation": self.run.evaluation.recorded(), "eval_limit": self.cfg.eval_limit,
                           "max_completion_tokens": self.cfg.max_completion_tokens,
                           "val_rollout": "token_level"})  # since the environment seam: evaluations made before differ
        return self.shared_starts / f"eval_{key}"

    @staticmethod
    def _share(eval_dir: Path, shared: Path) -> None:
        """Copy the step-0 files to `shared`, complete or not at all."""
        staging = shared.with_name(f"{shared.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for file in eval_dir.glob("*_00000*"):
            shutil.copyfile(file, staging / file.name)
        try:
            staging.rename(shared)
        except OSError:  # a run in another process shared the same evaluation first
            shutil.rmtree(staging, ignore_errors=True)
