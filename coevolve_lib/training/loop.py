"""The CoEvolve loop (the paper's Fig. 2): GRPO with TRL's `GRPOTrainer` on the task pool D_t, and a feedback
round every F steps that grows the pool from the training rollouts' weakness signals.

    D_0 (data engine) -> policy (the profile's model; tiny: + supervised warm start, a kit addition)
    for step = 1 .. max_steps:
        rollouts   K token-level multi-turn episodes per task drawn from D_t (TRL's `rollout_func`); the reward is
                   the environment's checker on the episode's own executions (1 = success, 0 = failure)
        update     TRL's GRPO loss; tool results and later user turns are masked out (`env_mask`)
        signals    forgetting / boundary / rare on this step's rollouts
        every F    contexts -> re-exploration -> abstraction -> validation -> D_{t+1}; then a checkpoint
                   (`training.pool_updates`: `signals` is CoEvolve; `random`, `none` and the Table 10 baselines
                   `curriculum`, `rest`, `reflexion` of `engine/pool_updates/` replace this round, same steps and
                   rollouts)

Shortcuts, stated up front:
- TRL builds its dataloader once but D_t grows, so the trainer's dataset holds placeholder "slots" only, and
  `rollout_func` draws each step's tasks from the live pool itself, seeded by the step: the same step always
  draws the same tasks from the same pool version. Training samples only rounds committed before the last
  checkpoint, so a resumed run replays exactly what the interrupted one did.
- Single-process runs also evaluate in the loop (greedy, the val split, plus a fixed sample of D_0 tasks).
  Multi-GPU runs evaluate the saved checkpoints afterwards with `python -m coevolve_lib evaluate`.

Run folder: pool.jsonl (+ .rounds.json), round_000/ (D_0), trainer/checkpoint-N/ (TRL state +
coevolve_state.json), rollouts/step_N.jsonl, signals/step_N.jsonl, round_NNN/, eval/, metrics.jsonl,
summary.json, final/ (the trained model).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import time
import zipfile
from collections import Counter
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path

from coevolve_lib.core.config import (
    BUDGET_REASONS,
    ConfigError,
    RunConfig,
    RunError,
    TrainConfig,
    run_identity,
)
from coevolve_lib.core.environment import checked_evaluation
from coevolve_lib.core.models import (
    HFChatModel,
    hub_offline,
    missing_model_message,
    set_torch_threads,
)
from coevolve_lib.core.paths import repo_relative, shown_path
from coevolve_lib.core.records import (
    CorruptFileError,
    append_jsonl,
    config_hash,
    read_json,
    read_jsonl,
    write_json_atomic,
    write_jsonl_atomic,
)
from coevolve_lib.core.run_lock import output_lock
from coevolve_lib.engine.data_engine import DataEngine, stamp_rollouts
from coevolve_lib.engine.feedback import KIT_ERRORS
from coevolve_lib.engine.pool_updates import RoundInputs, pool_update
from coevolve_lib.engine.shards import SINGLE, Shards
from coevolve_lib.engine.signals import SignalExtractor
from coevolve_lib.profiles import FSDP_LOCAL_ROLLOUTS
from coevolve_lib.rollout.agent import (
    ENVIRONMENT_ERROR,
    RolloutConfig,
    rollout_config,
    run_rollouts,
)
from coevolve_lib.rollout.evaluation import task_outcomes
from coevolve_lib.rollout.vllm_cpu import keep_weights_loadable
from coevolve_lib.training.memory import memory_plan, memory_refusal
from coevolve_lib.training.summary import summarize
from coevolve_lib.training.trl_args import grpo_kwargs, lora_config

STATE_FILE = "coevolve_state.json"
log = logging.getLogger(__name__)


def percent(outcomes: dict[str, list[int]]) -> float | None:
    """Success rate (%) over every episode of `outcomes` (task id -> 1/0 per episode)."""
    episodes = [o for per_task in outcomes.values() for o in per_task]
    return round(100.0 * sum(episodes) / len(episodes), 2) if episodes else None


def environment_reward(completions, reward, **kwargs) -> list[float]:
    """The reward TRL sees: each episode's reward, computed in the rollout from the environment's checker."""
    return [float(r) for r in reward]


def training_rollouts(run: RunConfig) -> RolloutConfig:
    """Token-level rollouts at the rollout temperature, capped at the training's completion budget; through TRL's
    vLLM (engine `vllm`) with `training.use_vllm`."""
    config = rollout_config(run.rollout, token_level=True, max_completion_tokens=run.training.max_completion_tokens)
    if run.training.use_vllm:
        config.engine = "vllm"
    return config


def check_vllm(cfg: TrainConfig) -> None:
    """Refuse `use_vllm` where the vllm package is missing, in one line, before anything loads (called when training
    starts: a profile with use_vllm still loads, and dry-runs, without it)."""
    if cfg.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError("training.use_vllm=true needs the vllm package, which is not installed (GPU nodes: pip "
                          "install \"vllm==0.31.0\"; the CPU: `make vllm` and .venv-vllm/bin/python; docs/training.md "
                          "section 5); or set training.use_vllm=false")


def rewards_vary(rewards: list[float]) -> bool:
    """A group whose rewards differ: the only kind with a GRPO advantage (TRL's `frac_reward_zero_std` counts the
    others)."""
    return len(set(rewards)) > 1


def select_groups(group_rewards: list[list[float]], count: int, faulty: set[int] = frozenset()) -> list[int]:
    """Dynamic sampling (DAPO): the indices of the `count` groups to train on among the drawn ones: groups whose
    rewards vary first, then the others, each in draw order, and the `faulty` groups (an episode of theirs ended as
    `environment_error`: its reward says what the environment did, not the policy) after all of them; returned in
    draw order."""
    ranked = sorted(range(len(group_rewards)), key=lambda i: (i in faulty, not rewards_vary(group_rewards[i])))
    return sorted(ranked[:count])


class PoolRollouts:
    """TRL's `rollout_func`: draws the step's tasks from the pool, runs K episodes of each with the policy, and hands
    TRL the groups it trains on (all of them, or with `training.draw_factor` > 1 the `select_groups` share)."""

    def __init__(self, engine: DataEngine, run: RunConfig, process_index: int = 0, progress: bool = False):
        self.engine, self.pool, self.cfg, self.process_index = engine, engine.pool, run.training, process_index
        self.progress = progress
        self.rollout = training_rollouts(run)
        self.allowed_version = 0
        """Highest pool version training samples (rounds committed after the last checkpoint wait)."""
        self.admitted: list[str] | None = None
        """The task ids training samples among (`curriculum`: the admitted share of the pool); None: all."""
        self.pending: list[dict] = []
        """This step's rollout records (without token ids), collected by the loop after the update."""
        self.seconds = 0.0
        """Wall time of this step's rollouts on this process (generation, environment, bookkeeping)."""
        self.generated_at = 0
        """The last step that drew new rollouts (with `num_iterations` > 1, the steps between reuse them)."""

    def step_tasks(self, step: int, count: int) -> tuple[list[dict], list[str]]:
        """This process's `count` tasks of `step` (a seeded draw of the step's `tasks_per_step x draw_factor` tasks
        over all processes), and the task ids drawn before them (other processes' shares: a task drawn twice in a
        step is two groups)."""
        drawn = self.pool.sample(self.cfg.tasks_per_step * self.cfg.draw_factor, seed=self.cfg.seed * 1_000_003 + step,
                                 versions=set(range(self.allowed_version + 1)),
                                 ids=None if self.admitted is None else set(self.admitted))
        start = self.process_index * count
        return drawn[start:start + count], [t["task_id"] for t in drawn[:start]]

    def __call__(self, prompts: list, trainer) -> dict:
        from trl.models import unwrap_model_for_generation

        step = trainer.state.global_step + 1
        # TRL hands each process its slice of the batch, each prompt repeated once per generation.
        trained_groups = max(1, len(prompts) // self.cfg.group_size)
        tasks, drawn_before = self.step_tasks(step, trained_groups * self.cfg.draw_factor)
        announce(self.progress, f"step {step}: {len(tasks) * self.cfg.group_size} episodes on this process")
        start = time.perf_counter()
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         # with vLLM the policy here only tokenizes: no ZeRO-3 gather
                                         gather_deepspeed3_params=trainer.args.ds3_gather_for_generation
                                         and not trainer.args.use_vllm,
                                         gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs
                                         ) as model:
            policy = HFChatModel.from_loaded(model, trainer.processing_class, name="policy")
            records = run_rollouts(policy, self.engine.rollout_tasks(tasks), self.rollout,
                                   self.engine.environment.new_episode, samples_per_task=self.cfg.group_size,
                                   progress=False, trainer=trainer)
        self.seconds += time.perf_counter() - start
        k = self.cfg.group_size
        # `score` and `success` stay the checker's verdict; `reward` is what GRPO optimises (and signals read): the
        # environment's reward the profile names (`Environment.rewards`).
        reward = self.engine.environment.rewards[self.cfg.reward]
        for record, task in zip(records, (t for t in tasks for _ in range(k))):
            record["reward"] = float(reward(record, task))
            record["model_tokens"] = sum(record["completion_mask"])
        faulty = {index // k for index, r in enumerate(records) if r["terminated"] == ENVIRONMENT_ERROR}
        chosen = set(select_groups([[r["reward"] for r in records[i * k:(i + 1) * k]] for i in range(len(tasks))],
                                   trained_groups, faulty))
        trained = [r for index, r in enumerate(records) if index // k in chosen]
        output = {"prompt_ids": [r["prompt_ids"] for r in trained],
                  "completion_ids": [r["completion_ids"] for r in trained],
                  "env_mask": [r["completion_mask"] for r in trained], "reward": [r["reward"] for r in trained],
                  "logprobs": None}  # TRL recomputes what it needs from the policy
        for index, record in enumerate(records):  # every drawn episode is kept (and feeds the signals)
            record["trained"] = index // k in chosen
            for token_field in ("prompt_ids", "completion_ids", "completion_mask"):
                del record[token_field]
        self.pending += stamp_rollouts(records, step, tasks, drawn_before)
        self.generated_at = step
        return output


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint's files, None when nothing is: a JSON file that does not parse (an emptied
    `trainer_state.json`), a safetensors file shorter than its header says, a torch file (`optimizer.pt`, zip) without
    its closing directory: a file cut short or emptied after it was saved (a full disk, a partial copy); full weights
    without the config.json `load_saved_weights` reads them with. Cheap: the headers and directories are read, not
    the tensors."""
    from safetensors import SafetensorError, safe_open

    if any(checkpoint.glob("model*.safetensors")) and not (checkpoint / "config.json").exists():
        return "config.json is missing beside the model weights"

    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        name = path.relative_to(checkpoint)
        if path.suffix == ".json":
            try:
                json.loads(path.read_bytes())
            except ValueError:
                return f"{name} is not JSON"
        elif path.suffix == ".safetensors":
            try:
                with safe_open(str(path), framework="pt"):
                    pass
            except SafetensorError as error:
                return f"{name} is not whole ({error})"
        elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            return f"{name} is cut short (no zip directory)"
    return None


def latest_checkpoint(trainer_dir: Path, recorded_steps: set | None = None) -> Path | None:
    """The newest `checkpoint-N` folder to resume from: one that holds our state file (a checkpoint cut before it was
    written is skipped), no damaged file (`checkpoint_damage`) and, given the steps metrics.jsonl holds a row of
    (`recorded_steps`), a row of each of its steps 1..N: a step's row is appended before its checkpoint is saved, so a
    missing one is a damaged line, and resuming past it would rewrite the run's summary from fewer steps. A damaged
    one is passed over with a warning for the one before it: the steps after that are replayed, exactly, as after a
    kill. A ConfigError when every one is damaged."""
    done = sorted((p for p in trainer_dir.glob("checkpoint-*") if (p / STATE_FILE).exists()),
                  key=lambda p: int(p.name.split("-")[1]), reverse=True)
    damaged = []
    for checkpoint in done:
        step = int(checkpoint.name.split("-")[1])
        missing = [] if recorded_steps is None else sorted(set(range(1, step + 1)) - recorded_steps)
        damage = checkpoint_damage(checkpoint) or (
            f"metrics.jsonl has no row of step {missing[0]}, which it trained (a damaged line)" if missing else None)
        if damage is None:
            for problem in damaged:
                log.warning("%s; resuming from %s instead", problem, checkpoint.name)
            return checkpoint
        damaged.append(f"{shown_path(checkpoint)}: {damage}")
    if damaged:
        raise ConfigError(f"{damaged[0]}, and no earlier checkpoint is whole: delete {shown_path(trainer_dir)} to "
                          "train the run again from its first step")
    return None


def load_saved_weights(model, checkpoint: Path) -> None:
    """Load a full-weights checkpoint into `model` as `from_pretrained` reads it. transformers 5 keeps some weights
    fused in memory (a MoE block's experts as one `experts.gate_up_proj` tensor) and saves them in the hub's layout
    (`experts.0.gate_proj.weight`, ...); its Trainer resumes with a plain `load_state_dict(strict=False)` that skips
    them with a warning only, so a resumed Qwen3-30B-A3B run went on from its step-0 experts. `from_pretrained`
    converts them back; every tensor is then copied, strictly."""
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=model.dtype, local_files_only=True)
    model.load_state_dict(saved.state_dict(), strict=True)


def _trainer_class():
    from peft import PeftModel
    from trl import GRPOTrainer

    class CoEvolveGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer resuming full weights with `load_saved_weights`; DeepSpeed, FSDP and LoRA checkpoints
        (their own formats) keep the Trainer's path."""

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            if self.is_deepspeed_enabled or self.is_fsdp_enabled or isinstance(self.model, PeftModel):
                return super()._load_from_checkpoint(resume_from_checkpoint, model)
            load_saved_weights(self.model, Path(resume_from_checkpoint))

    return CoEvolveGRPOTrainer


class CoEvolveLoop:
    """What happens around TRL's update: records, signals, feedback rounds, evaluation, metrics, state."""

    def __init__(self, run: RunConfig, out_dir: Path, engine: DataEngine, rollouts: PoolRollouts,
                 is_main: bool = True, progress: bool = True, start_evaluations: Path | None = None):
        self.run, self.cfg, self.out_dir = run, run.training, out_dir
        self.start_evaluations = start_evaluations
        self.engine, self.rollouts, self.is_main, self.progress = engine, rollouts, is_main, progress
        self.shards = engine.shards
        """The run's processes, as the sharded rounds split work over them."""
        self.pool_update = pool_update(run.training.pool_updates)
        self.extractor = SignalExtractor(run.data_engine.signals)
        self.totals = {"train_s": 0.0, "feedback_s": 0.0, "eval_s": 0.0}
        self.mark = time.perf_counter()
        self.row: dict | None = None
        self.trainer = None
        d0_ids = [t["task_id"] for t in engine.pool.tasks if t["pool_version"] == 0]
        self.eval_pool_ids = d0_ids[:run.training.eval_pool_tasks]
        self.heldout = engine.heldout_sets()
        """Held-out set name -> (key, tasks)."""

    # -- state -------------------------------------------------------------------------------------------------
    def state_dict(self, step: int) -> dict:
        return {"step": step, "allowed_version": self.rollouts.allowed_version,
                "extractor": self.extractor.state_dict(), "totals": self.totals}

    def restore(self, checkpoint: Path) -> int:
        """Load our state of `checkpoint` and drop what later steps wrote (they are replayed)."""
        state = json.loads((checkpoint / STATE_FILE).read_text())
        step = state["step"]
        self.allow(state["allowed_version"])
        self.extractor.load_state_dict(state["extractor"])
        self.totals = state["totals"]
        self.drop_after(step)
        return step

    def allow(self, version: int) -> None:
        """Let training sample pool versions up to `version` (and, for `curriculum`, that round's admitted tasks,
        read from the round's file: every process sees the same)."""
        self.rollouts.allowed_version = version
        self.rollouts.admitted = self.pool_update.admitted(self.out_dir, version)

    def drop_after(self, step: int) -> None:
        """Remove the records of steps after `step` (a killed run's, replayed now): metrics.jsonl is then appended
        to one row per step, so a resumed run never holds a step twice. Rewriting it also drops a line cut by the
        kill, which the next append would otherwise extend."""
        if self.is_main:
            write_jsonl_atomic(self.out_dir / "metrics.jsonl",
                               [r for r in read_jsonl(self.out_dir / "metrics.jsonl") if r["step"] <= step])
            for folder in ("rollouts", "signals"):
                for path in (self.out_dir / folder).glob("step_*.jsonl"):
                    if int(path.stem.split("_")[1]) > step:
                        path.unlink()

    # -- evaluation --------------------------------------------------------------------------------------------
    def evaluate(self, step: int, model, tokenizer, val: bool) -> dict:
        """Greedy success on each held-out set and on a fixed sample of D_0, plus the BFCL val split (the paper's
        metric) when `val`; cached per step, so a resumed run does not evaluate the same checkpoint twice. Per-task
        outcomes are kept in the file for paired comparisons."""
        path = self.out_dir / "eval" / f"step_{step:05d}.json"
        shared = self._shared_start(step == 0 and val)
        if not path.exists() and shared is not None and shared.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            for file in sorted(shared.iterdir(), key=lambda f: f.name == path.name):  # the same evaluation, made
                shutil.copyfile(file, path.parent / file.name)  # by another run; its step file last (the marker)
        if path.exists():
            return json.loads(path.read_text())
        start = time.perf_counter()
        policy = HFChatModel.from_loaded(model, tokenizer, name=f"{self.run.model}@step{step}")
        greedy = rollout_config(self.run.rollout, temperature=0.0, token_level=True,
                                max_completion_tokens=self.cfg.max_completion_tokens)
        result = {"step": step}
        if self.heldout:  # every set in one batch of episodes (the sets' environments differ: no id is in two)
            outcomes = task_outcomes(policy, [t for _, tasks in self.heldout.values() for t in tasks], greedy,
                                     self.engine.environment)
            result["heldout_outcomes"] = {}
            for name, (key, tasks) in self.heldout.items():
                per_task = {t["task_id"]: outcomes[t["task_id"]] for t in tasks}
                result.update({f"eval/{name}_greedy_success": percent(per_task), f"eval/{name}_n": len(per_task),
                               f"eval/{name}_set": key})
                result["heldout_outcomes"][name] = per_task
        pool_tasks = {t["task_id"]: t for t in self.engine.pool.tasks}
        d0 = task_outcomes(policy, [pool_tasks[i] for i in self.eval_pool_ids], greedy, self.engine.environment)
        result.update({"eval/d0_greedy_success": percent(d0), "eval/d0_n": len(d0), "d0_outcomes": d0})
        limit = self.cfg.eval_limit if self.cfg.eval_limit is not None else self.run.evaluation.limit
        if val and limit != 0:  # the benchmark's own metric: its first row is the headline, later rows by name
            settings = replace(self.run.evaluation, model=policy.name, profile=self.run.profile, limit=limit)
            environment = self.engine.environment
            doc = checked_evaluation(environment, environment.evaluate(
                policy, settings, self.out_dir / "eval" / f"val_step_{step:05d}.json", greedy,
                experiment="coevolve_train"))
            headline, *others = doc["metrics"]
            result.update({"eval/val_success": headline["value"], "eval/val_n": headline["n"]})
            for row in others:
                result.update({f"eval/val_{row['metric']}": row["value"], f"eval/val_{row['metric']}_n": row["n"]})
        write_json_atomic(path, result)
        if shared is not None and not shared.exists():  # step 0: kept for the next run that starts alike
            staging = shared.with_name(f"{shared.name}.partial-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for file in path.parent.glob("*_00000*"):
                shutil.copyfile(file, staging / file.name)
            try:
                staging.rename(shared)  # complete or absent
            except OSError:  # a run in another process shared the same evaluation first
                shutil.rmtree(staging, ignore_errors=True)
        self.totals["eval_s"] += time.perf_counter() - start
        return result

    def _shared_start(self, wanted: bool) -> Path | None:
        """Where the step-0 evaluation of runs that start alike is shared: the same starting policy, held-out set,
        D_0 sample, rollout, evaluation and budget give the same greedy episodes, so a study's variants evaluate
        their common start once (None: sharing is off, or not step 0)."""
        if not (wanted and self.start_evaluations):
            return None
        key = config_hash({"policy": repo_relative(self.engine.policy()),
                           "heldout": {name: key for name, (key, _) in self.heldout.items()},
                           "d0_sample": self.eval_pool_ids, "rollout": asdict(self.run.rollout),
                           "evaluation": asdict(self.run.evaluation), "eval_limit": self.cfg.eval_limit,
                           "max_completion_tokens": self.cfg.max_completion_tokens,
                           "val_rollout": "token_level"})  # since the environment seam: evaluations made before differ
        return self.start_evaluations / key

    def on_train_begin(self, step: int) -> None:
        if step == 0 and self.is_main and self.cfg.launch.num_processes == 1:
            trainer = self.trainer
            self.evaluate(0, trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class, val=True)
        self.mark = time.perf_counter()

    # -- after each optimizer step -----------------------------------------------------------------------------
    def after_step(self, step: int) -> None:
        from accelerate.utils import gather_object

        train_s = time.perf_counter() - self.mark
        self.totals["train_s"] += train_s
        records = gather_object(self.rollouts.pending) if self.cfg.launch.num_processes > 1 else self.rollouts.pending
        rollout_s, self.rollouts.pending, self.rollouts.seconds = self.rollouts.seconds, [], 0.0
        row = {"step": step, "time/train_s": round(train_s, 3), "time/rollout_s": round(rollout_s, 3)}
        if self.is_main and self.rollouts.generated_at == step:  # a step reusing earlier rollouts has none to record
            row.update(self._record_step(step, records))
        if self.pool_update.has_rounds and step % self.cfg.feedback_every == 0:
            row.update(self._feedback_round(step))
        last = step == self.cfg.max_steps
        every = self.cfg.evaluation_every
        if self.is_main and self.cfg.launch.num_processes == 1 and (last or (every and step % every == 0)):
            trainer = self.trainer
            result = self.evaluate(step, trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class,
                                   val=last)
            row.update({k: v for k, v in result.items() if k.startswith("eval/")})
        total = sum(self.totals.values())
        row.update({"time/feedback_s_total": round(self.totals["feedback_s"], 2),
                    "time/train_s_total": round(self.totals["train_s"], 2),
                    "time/eval_s_total": round(self.totals["eval_s"], 2),
                    "time/feedback_ratio": round(self.totals["feedback_s"] / total, 4) if total else 0.0})
        self.row = row
        self.mark = time.perf_counter()

    def _record_step(self, step: int, records: list[dict]) -> dict:
        write_jsonl_atomic(self.out_dir / "rollouts" / f"step_{step:05d}.jsonl", records)
        signals = self.extractor.observe(step, records)
        write_jsonl_atomic(self.out_dir / "signals" / f"step_{step:05d}.jsonl", signals)
        groups: dict[str, list[float]] = {}
        trained: set[str] = set()
        for r in records:
            groups.setdefault(r["group_id"], []).append(r["reward"])
            if r.get("trained", True):
                trained.add(r["group_id"])
        counts = Counter(s["type"] for s in signals)
        uniform = {g for g, rewards in groups.items() if not rewards_vary(rewards)}
        return {
            "train/reward": round(sum(r["reward"] for r in records) / max(len(records), 1), 4),
            "train/success": round(sum(r["success"] for r in records) / max(len(records), 1), 4),
            "train/episodes": len(records),
            "train/groups_mixed": len(groups) - len(uniform),  # the groups with an advantage
            "train/groups_all_solved": sum(sum(g) == len(g) for g in groups.values()),
            "train/groups": len(groups),
            "train/groups_trained": len(trained),
            # GRPO's zero-variance share (TRL's frac_reward_zero_std) before and after dynamic sampling's selection
            "train/zero_std_drawn": round(len(uniform) / max(len(groups), 1), 4),
            "train/zero_std_trained": round(len(uniform & trained) / max(len(trained), 1), 4),
            "train/model_tokens_mean": round(sum(r["model_tokens"] for r in records) / max(len(records), 1), 1),
            "train/calls_mean": round(sum(len(r["steps"]) for r in records) / max(len(records), 1), 2),
            "train/model_tokens": sum(r["model_tokens"] for r in records),
            # episodes their environment failed (a tool raised: rollout.agent.ENVIRONMENT_ERROR), and those ended by an
            # episode budget (core.config.EpisodeBudget), per budget
            "train/environment_errors": sum(r["terminated"] == ENVIRONMENT_ERROR for r in records),
            **{f"budget/{reason}": sum(r["terminated"] == reason for r in records) for reason in BUDGET_REASONS},
            **{f"signals/{signal.type}": counts.get(signal.type, 0) for signal in self.extractor.signals.values()},
            "train/signal_errors": len(self.extractor.step_errors),  # signal types (plugins) that failed this step
            "pool/size": sum(t["pool_version"] <= self.rollouts.allowed_version for t in self.engine.pool.tasks),
            "pool/version": self.rollouts.allowed_version,
            **({"pool/admitted": len(self.rollouts.admitted)} if self.rollouts.admitted is not None else {}),
        }

    def _feedback_round(self, step: int) -> dict:
        """The pool update's round after `step`. A sharded update (`PoolUpdate.sharded`) runs on every process, each
        doing its share of the round (`engine.shards.Shards`); another runs on the main process while the others
        wait. Every process then samples the grown pool, once it reads the pool the main process wrote."""
        round_index = step // self.cfg.feedback_every
        start = time.perf_counter()
        out = {}
        several, sharded = self.cfg.launch.num_processes > 1, self.pool_update.sharded
        window = range(step - self.cfg.feedback_every + 1, step + 1)
        if several and sharded:  # every process reads the window's step files the main process wrote
            self.shards.settle([self.out_dir / folder / f"step_{k:05d}.jsonl" for k in window
                                for folder in ("rollouts", "signals")] if self.is_main else [])
        if self.is_main or sharded:
            self.engine.shards = self.shards if sharded else SINGLE
            signals = [s for k in window for s in read_jsonl(self.out_dir / "signals" / f"step_{k:05d}.jsonl")]
            rollouts = [r for k in window for r in read_jsonl(self.out_dir / "rollouts" / f"step_{k:05d}.jsonl")]
            try:
                report = self.pool_update.round(RoundInputs(
                    self.engine, round_index, step, self.cfg.max_steps, signals, rollouts,
                    history=lambda: [r for k in range(1, step + 1)
                                     for r in read_jsonl(self.out_dir / "rollouts" / f"step_{k:05d}.jsonl")],
                    settings=self.cfg.baselines, reflector=lambda: self._reflector(step), seed=self.cfg.seed,
                    tasks_per_step=self.cfg.tasks_per_step, progress=self.progress and self.is_main))
            except KIT_ERRORS:
                raise
            except Exception as error:  # noqa: BLE001 - a pool update of any plugin may raise: this round adds
                # nothing, and training goes on (a resumed run tries the round again)
                text = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
                log.warning("step %d: pool update %s raised %s; round %d adds no task (feedback/pool_update_error)",
                            step, self.cfg.pool_updates, text, round_index)
                report = {"targets": 0, "signal_types": {}, "specs": 0, "added_to_pool": 0, "rejection_reasons": {},
                          "pool_update_error": text}
            self.engine.shards = self.shards
            if self.is_main:
                out = {"feedback/round": round_index, "feedback/targets": report["targets"],
                       "feedback/target_types": report["signal_types"], "feedback/specs": report["specs"],
                       "feedback/tasks_added": report["added_to_pool"],
                       "feedback/rejected": sum(report["rejection_reasons"].values()),
                       "feedback/rejection_reasons": report["rejection_reasons"],
                       "feedback/heldout_leaks": report["rejection_reasons"].get("heldout_leak", 0)}
                if "counts" in report:  # a Table 10 baseline's own numbers (admitted tasks, filtered rollouts, ...)
                    out["feedback/counts"] = report["counts"]
                if "pool_update_error" in report:
                    out["feedback/pool_update_error"] = report["pool_update_error"]
        if several:
            self.shards.settle([self.engine.pool.path] if self.is_main else [])
            if not self.is_main:
                self.engine.pool.__init__(self.engine.pool.path)  # re-read the grown pool
            self.check_same_pool(round_index)
        self.allow(round_index)
        seconds = time.perf_counter() - start
        self.totals["feedback_s"] += seconds
        out["feedback/seconds"] = round(seconds, 2)
        if self.is_main:
            out["pool/size_after_round"] = len(self.engine.pool)
        return out

    def check_same_pool(self, round_index: int) -> None:
        """Every process samples the same pool from here on, or the run stops in one line (a process that read
        another pool would train on other tasks than the rest, silently)."""
        pools = self.shards.gather((self.engine.pool.version, len(self.engine.pool)))
        if len(set(pools)) > 1:
            raise RunError(f"after round {round_index} the processes hold different pools (version, tasks by "
                           f"process: {pools}): --out must be on a filesystem every node shares and sees alike")

    def _reflector(self, step: int):
        """Who writes Reflexion's reflections: the policy being trained (as it is now) or the explorer model."""
        if self.cfg.baselines.reflexion_reflector == "explorer":
            return self.engine.explorer_model
        trainer = self.trainer
        return HFChatModel.from_loaded(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class,
                                       name=f"{self.run.model}@step{step}")

    def on_log(self, step: int, logs: dict) -> dict | None:
        """TRL's logs of the step join our row, which is then appended to metrics.jsonl; returns the row (None when
        the logs are not a step's)."""
        if self.row is None or self.row["step"] != step or "loss" not in logs:
            return None
        row, self.row = self.row, None
        row.update({f"trl/{k}": v for k, v in logs.items()})
        if self.is_main:
            append_jsonl(self.out_dir / "metrics.jsonl", row)
        return row

    def on_save(self, checkpoint: Path, step: int) -> None:
        if self.is_main:
            write_json_atomic(checkpoint / STATE_FILE, self.state_dict(step))


def _callback(loop: CoEvolveLoop):
    from transformers import TrainerCallback

    class CoEvolveCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            loop.on_train_begin(state.global_step)

        def on_step_end(self, args, state, control, **kwargs):
            loop.after_step(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            row = loop.on_log(state.global_step, logs or {})
            if row is None or loop.trainer is None:
                return
            # TRL's `report_to` loggers (TensorBoard, W&B, ...) got TRL's own logs from the trainer; they get the
            # kit's numeric columns (train/*, signals/*, pool/*, feedback/*, eval/*, time/*) here.
            ours = {k: v for k, v in row.items() if not k.startswith("trl/") and k != "step"
                    and isinstance(v, (int, float)) and not isinstance(v, bool)}
            for sink in loop.trainer.callback_handler.callbacks:
                if type(sink).__module__.startswith("transformers.integrations"):
                    sink.on_log(args, state, control, logs=ours)

        def on_save(self, args, state, control, **kwargs):
            loop.on_save(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)

    return CoEvolveCallback()


def announce(progress: bool, message: str) -> None:
    """One line on stderr when a long stage starts (with progress on)."""
    if progress:
        print(f"[coevolve] {message}", file=sys.stderr, flush=True)


def as_json(value):
    """`value` as JSON reads it back (tuples as lists): how a recorded config compares with a live one."""
    return json.loads(json.dumps(value, default=str))


def flat(mapping: dict, prefix: str = "") -> dict:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`."""
    out = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        out.update(flat(value, name + ".") if isinstance(value, dict) else {name: value})
    return out


def gpu_visible() -> bool:
    """Whether torch sees a CUDA device here."""
    import torch  # heavy: only for this question (the CLI's quick paths never ask it)

    return torch.cuda.is_available()


def check_run_folder(run: RunConfig, out_dir: Path) -> None:
    """A run folder belongs to one configuration: resuming it with another (another seed included) would train
    nothing new and relabel the old run's results, so it is refused, in one line, before anything is written."""
    path = out_dir / "run_config.json"
    if not path.exists():
        return
    try:
        recorded = read_json(path)
    except CorruptFileError as error:
        recorded = error
    if not isinstance(recorded, dict) or not isinstance(recorded.get("config"), dict):
        # Damaged, or written before runs recorded their whole config: with nothing to compare, resuming could
        # relabel the run's results with another configuration.
        raise ConfigError(f"{shown_path(path)} does not say which configuration the run in {shown_path(out_dir)} "
                          "has (damaged, or written by an older kit): give another --out, or delete the folder to "
                          "train this run there from the start")
    recorded = recorded["config"]
    # how the explorer's replies are got (live, recorded, replayed) is not the run's identity
    before, now = flat(run_identity(recorded)), flat(as_json(run_identity(run)))
    differing = sorted(key for key in before.keys() | now.keys() if before.get(key) != now.get(key))
    if differing:
        shown = ", ".join(f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in differing[:4])
        more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
        raise ConfigError(f"{out_dir} holds a run of another configuration ({shown}{more}): resume it with its own "
                          "settings, or give another --out")


MIN_COLLECTIVE_TIMEOUT_S = 1800
"""The shortest collective timeout a run gets: torch's gloo default (NCCL's is 600 s)."""
COLLECTIVE_MARGIN_S = 1800
"""What a process may wait past a round's deadline: the unit of work in hand when it passed (its explorer calls are
cut there, its environment calls are not), a checkpoint's save, a step's rollouts longer on one process."""


def collective_timeout_s(run: RunConfig) -> int:
    """How long a process of a multi-process run waits at a collective: `training.process_group_timeout_s`, else
    the longest a process works while others wait, a round or D_0 (each bounded by `data_engine.round_deadline_s`),
    plus `COLLECTIVE_MARGIN_S`; never below `MIN_COLLECTIVE_TIMEOUT_S`. A hang is reported then (torch's timeout
    error), not waited out. A warm start or held-out sets built on the main process are not counted (the kit ships
    its own; set the timeout when building one in a multi-process run)."""
    cfg = run.training
    if cfg.process_group_timeout_s is not None:
        return cfg.process_group_timeout_s
    return max(MIN_COLLECTIVE_TIMEOUT_S, int(run.data_engine.round_deadline_s + COLLECTIVE_MARGIN_S))


def launches_fsdp() -> bool:
    """Whether `accelerate launch` started this process with FSDP (it exports ACCELERATE_USE_FSDP)."""
    from accelerate.utils import parse_flag_from_env

    return parse_flag_from_env("ACCELERATE_USE_FSDP", default=False)


def check_processes(cfg: TrainConfig, processes: int) -> None:
    """One line when the run has another process count than its profile plans: each process would roll out and train
    its share of a step sized for `launch.num_processes` processes (4 of 32 tasks when 1 of 8 runs), and evaluation,
    which single-process runs do in the loop, would be skipped, all without a word."""
    planned = cfg.launch.num_processes
    if processes != planned:
        trained = cfg.tasks_per_step * processes // planned
        raise ConfigError(
            f"this run has {processes} process(es) but the profile plans {planned} (training.launch.num_processes): "
            f"a step would train {trained} of its {cfg.tasks_per_step} tasks; run the command `train --dry-run` "
            f"prints, or --set training.launch.num_processes={processes} to split every step over {processes}")


def train(run: RunConfig, out_dir: str | Path, resume: bool = True, progress: bool = True,
          start_evaluations: str | Path | None = None, engine: DataEngine | None = None) -> dict:
    """Run (or resume) one CoEvolve training run into `out_dir`; returns its summary (also in summary.json).
    `start_evaluations`: a folder where runs that start from the same policy and settings share their step-0
    evaluation (the studies' runs do). `engine`: the run's data engine, already open on `out_dir` (a notebook's,
    whose AppWorld servers are then reused); the caller closes it. By default one is made and closed here."""
    check_vllm(run.training)
    if gpu_visible():  # a paper backbone on GPUs: a recipe that cannot fit stops now, not at its first OOM
        refusal = memory_refusal(run, memory_plan(run))
        if refusal:
            raise ConfigError(refusal)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    set_torch_threads(run.training.torch_threads)
    out_dir = Path(out_dir)
    with output_lock(out_dir):  # one live writer per run folder
        check_run_folder(run, out_dir)
        if launches_fsdp() and not run.training.use_vllm:
            raise ConfigError(f"accelerate launched this run with FSDP: {FSDP_LOCAL_ROLLOUTS}")
        trainer_dir = out_dir / "trainer"
        checkpoint = None
        if trainer_dir.exists():
            recorded_steps = {row.get("step") for row in read_jsonl(out_dir / "metrics.jsonl")} if resume else None
            checkpoint = latest_checkpoint(trainer_dir, recorded_steps)
        if checkpoint is not None and not resume:
            raise ConfigError(f"{out_dir} already holds a run (last checkpoint {checkpoint.name}); resume it or "
                              "choose another --out")
        owned = engine is None
        engine = (DataEngine(run.data_engine, out_dir, run.evaluation.benchmark, run.training.launch.num_processes)
                  if owned else engine)
        try:
            state = distributed_state(run)
            if state.num_processes > 1:
                from accelerate.utils import gather_object

                # accelerate's gather_object flattens what each process gives: give it a list of one
                engine.shards = Shards(state.process_index, state.num_processes, lambda mine: gather_object([mine]))
                announce(progress and state.is_main_process, f"{state.num_processes} processes; a collective waits up "
                         f"to {collective_timeout_s(run)} s (training.process_group_timeout_s)")
            return _train(run, out_dir, engine, state, checkpoint, progress, start_evaluations)
        finally:
            if owned:
                engine.close()


def distributed_state(run: RunConfig):
    """accelerate's process state of the run: the process group made here with the run's collective timeout
    (`collective_timeout_s`), before TRL's arguments would make one with none (transformers' `ddp_timeout` applies
    only to a group it makes itself), and the process count checked against the profile (`check_processes`)."""
    from accelerate import PartialState

    cpu = not gpu_visible()
    if cpu:
        # accelerate names a launched process's device `cpu:<index>`, which transformers hands torch.load as the
        # map_location of a resumed optimizer, and torch restores no `cpu:0`: the plain `cpu` for every process.
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
    # On CPU, accelerate joins launched processes (gloo) only in a state made with cpu=True (TRL's `use_cpu` makes its
    # own so); a default one leaves each process alone, and every one of them the main process.
    state = PartialState(cpu=cpu, timeout=timedelta(seconds=collective_timeout_s(run)))
    check_processes(run.training, state.num_processes)
    return state


FULL_SCORING_MAX_VOCAB = 32_768
"""Vocabularies up to this size keep TRL's own CPU scoring (`score_completions_only`)."""


def vocabulary_size(model_path: str) -> int:
    """The output head's width of a model folder or cached hub model, read from its config."""
    from transformers import AutoConfig

    local_only = hub_offline()
    try:
        config = AutoConfig.from_pretrained(model_path, local_files_only=local_only)
    except OSError as exc:  # not a folder, not in the hub cache: the first load of a run's model, so say it here
        raise FileNotFoundError(missing_model_message(model_path, local_only, exc)) from None
    return config.get_text_config().vocab_size


def score_completions_only() -> None:
    """Have TRL 1.16 score only the completion positions through the output head on CPU, as it does on CUDA. Where
    Triton is missing it scores every position of a sequence (fixed tile shapes for compilers such as Neuron's) and
    throws the prompt's scores away: on CPU, with no compiler, a 1,400-token prompt cost each sequence ~11 s per pass
    through a 151,936-token head (a Qwen stand-in), for the 60-odd positions the loss reads. The loss is the same;
    the gradient differs in float rounding (4e-7 in the tiny model's weights after 3 steps). Called for vocabularies
    over `FULL_SCORING_MAX_VOCAB` only: the kit's tiny model (4,102 tokens) keeps TRL's path, which costs it little
    and which its committed results were measured with."""
    import trl.trainer.utils as trl_utils

    if not getattr(trl_utils._use_triton, "completions_only", False):
        on_accelerator = trl_utils._use_triton

        def use_compact_path(device) -> bool:
            return device.type == "cpu" or on_accelerator(device)

        use_compact_path.completions_only = True
        trl_utils._use_triton = use_compact_path


def _train(run: RunConfig, out_dir: Path, engine: DataEngine, state, checkpoint: Path | None, progress: bool,
           start_evaluations) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    cfg = run.training
    trainer_dir = out_dir / "trainer"
    timings = {}
    # D_0 (every process explores its share) and the warm start (the main process) are cached in the run folder
    announce(progress and state.is_main_process, f"D_0: up to {run.data_engine.d0_size} validated tasks (cached in "
             f"{out_dir.name}/round_000; a minute or two with the offline explorer, longer with an LLM explorer)")
    start = time.perf_counter()
    engine.initial_pool(progress=progress and state.is_main_process)
    timings["d0_s"] = round(time.perf_counter() - start, 2)
    if state.is_main_process:
        start = time.perf_counter()
        policy_path = engine.policy()
        timings["warm_start_s"] = round(time.perf_counter() - start, 2)
        pool_update(cfg.pool_updates).start(engine, cfg.baselines, cfg.max_steps, cfg.tasks_per_step)
        if (out_dir / "run_config.json").exists():  # a resumed run: D_0 and the warm start came from the cache
            timings = read_json(out_dir / "run_config.json").get("timings_before_training", timings)
        write_json_atomic(out_dir / "run_config.json", {"profile": run.profile, "model": run.model,
                                                        "training": asdict(cfg), "policy": policy_path,
                                                        "environment": engine.environment.describe(),
                                                        "timings_before_training": timings,
                                                        "config": as_json(asdict(run))})
    state.wait_for_everyone()
    policy_path = engine.policy()

    announce(progress and state.is_main_process,
             f"training: {cfg.max_steps} GRPO steps of {cfg.tasks_per_step} tasks x K = {cfg.group_size}, "
             f"a feedback round every {cfg.feedback_every} ({cfg.pool_updates}); the step bar shows the ETA")
    rollouts = PoolRollouts(engine, run, process_index=state.process_index, progress=progress and state.is_main_process)
    loop = CoEvolveLoop(run, out_dir, engine, rollouts, is_main=state.is_main_process, progress=progress,
                        start_evaluations=Path(start_evaluations) if start_evaluations else None)
    if checkpoint is not None:
        loop.restore(checkpoint)
    else:
        loop.allow(0)
        loop.drop_after(0)  # a run killed before its first checkpoint starts over
    if not torch.cuda.is_available() and vocabulary_size(policy_path) > FULL_SCORING_MAX_VOCAB:
        score_completions_only()
    args = GRPOConfig(**grpo_kwargs(cfg, run.rollout, str(trainer_dir), cuda=torch.cuda.is_available()),
                      disable_tqdm=not progress)
    slots = Dataset.from_dict({"prompt": [f"pool slot {i}" for i in range(cfg.max_steps * cfg.tasks_per_step)]})
    if cfg.use_vllm and cfg.vllm_mode == "colocate":
        keep_weights_loadable()  # vLLM's CPU platform only: TRL's weight sync must reach what vLLM computes with
    try:
        trainer = _trainer_class()(model=policy_path, reward_funcs=[environment_reward], args=args,
                                   train_dataset=slots, rollout_func=rollouts, peft_config=lora_config(cfg),
                                   callbacks=[_callback(loop)])
    except NotImplementedError as refused:
        if cfg.use_vllm and cfg.vllm_mode == "server" and not torch.cuda.is_available():
            said = (str(refused).splitlines() or [""])[0][:160]
            raise RunError(f"training.vllm_mode=server needs CUDA: TRL syncs the policy's weights to `trl vllm-serve` "
                           f"over NCCL and refuses on this machine ({said}); generation "
                           "through the server works, and on GPU nodes this does not apply. On the CPU: "
                           "training.vllm_mode=colocate (docs/training.md, vLLM rollouts)") from None
        raise
    loop.trainer = trainer
    if cfg.use_vllm and cfg.vllm_mode == "colocate" and state.is_main_process:
        # The context vLLM was built with, as TRL handed it over: the plan's, never the model's own (262,144 tokens
        # for Qwen3 2507, a KV cache no colocated share holds); the rehearsal checks the two agree.
        built = trainer.vllm_generation.llm.model_config.max_model_len
        write_json_atomic(out_dir / "vllm.json", {"planned_max_model_len": cfg.vllm_context, "max_model_len": built})
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    trainer.save_model(str(out_dir / "final"))  # on every rank: ZeRO-3 / FSDP gather the weights collectively
    summary = {}
    if state.is_main_process:
        trainer.processing_class.save_pretrained(str(out_dir / "final"))
        summary = summarize(out_dir)
    state.wait_for_everyone()
    return summary
