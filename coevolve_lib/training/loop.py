"""The CoEvolve loop (the paper's Fig. 2): GRPO with TRL's `GRPOTrainer` on the task pool D_t, and a feedback
round every F steps that grows the pool from the training rollouts' weakness signals.

    D_0 (data engine) -> policy (the profile's model; tiny: + supervised warm start, a kit addition)
    for step = 1 .. max_steps:
        rollouts   K token-level multi-turn episodes per task drawn from D_t (TRL's `rollout_func`); the reward is
                   the environment's checker on the episode's own executions (1 = success, 0 = failure)
        update     TRL's GRPO loss; tool results and later user turns are masked out (`env_mask`)
        signals    forgetting / boundary / rare on this step's rollouts
        every F    contexts -> re-exploration -> abstraction -> validation -> D_{t+1}; then a checkpoint (no round
                   after the last step: nothing would train on it, `TrainConfig.round_after`)
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

This module is the loop; its parts live beside it: `rollout_func` (the step's tasks, episodes, reward and groups),
`step_evaluation` (the in-loop evaluation), `checkpoints` (resume points, the strict reload, the run folder's
configuration), `processes` (process group, timeouts, what the machine can run), `trl_patches` (where TRL is changed).

Run folder: pool.jsonl (+ .rounds.json), round_000/ (D_0), trainer/checkpoint-N/ (TRL state +
coevolve_state.json), rollouts/step_N.jsonl, signals/step_N.jsonl, round_NNN/, eval/, metrics.jsonl,
summary.json, final/ (the trained model).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import BUDGET_REASONS, ConfigError, RunConfig, RunError
from coevolve_lib.core.models import HFChatModel, set_torch_threads
from coevolve_lib.core.records import append_jsonl, read_json, read_jsonl, write_json_atomic, write_jsonl_atomic
from coevolve_lib.core.run_lock import output_lock
from coevolve_lib.core.runtime import announce
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.feedback import KIT_ERRORS
from coevolve_lib.engine.pool_updates import RoundInputs, pool_update
from coevolve_lib.engine.shards import SINGLE, Shards
from coevolve_lib.engine.signals import SignalExtractor
from coevolve_lib.profiles import FSDP_LOCAL_ROLLOUTS
from coevolve_lib.rollout.agent import ENVIRONMENT_ERROR
from coevolve_lib.rollout.vllm_cpu import keep_weights_loadable
from coevolve_lib.training.checkpoints import STATE_FILE, as_json, check_run_folder, latest_checkpoint
from coevolve_lib.training.memory import memory_plan, memory_refusal
from coevolve_lib.training.processes import (
    check_vllm,
    collective_timeout_s,
    distributed_state,
    gpu_visible,
    launches_fsdp,
)
from coevolve_lib.training.rollout_func import PoolRollouts, environment_reward, rewards_vary
from coevolve_lib.training.step_evaluation import StepEvaluation
from coevolve_lib.training.summary import summarize
from coevolve_lib.training.trl_args import grpo_kwargs, lora_config
from coevolve_lib.training.trl_patches import (
    FULL_SCORING_MAX_VOCAB,
    score_completions_only,
    trainer_class,
    vocabulary_size,
)

log = logging.getLogger(__name__)


class CoEvolveLoop:
    """What happens around TRL's update: records, signals, feedback rounds, evaluation, metrics, state."""

    def __init__(self, run: RunConfig, out_dir: Path, data_engine: DataEngine, rollouts: PoolRollouts,
                 is_main: bool = True, progress: bool = True, shared_starts: Path | None = None):
        self.run, self.cfg, self.out_dir = run, run.training, out_dir
        self.data_engine, self.rollouts, self.is_main, self.progress = data_engine, rollouts, is_main, progress
        self.shards = data_engine.shards
        """The run's processes, as the sharded rounds split work over them."""
        self.pool_update = pool_update(run.training.pool_updates)
        self.extractor = SignalExtractor(run.data_engine.signals)
        self.totals = {"train_s": 0.0, "feedback_s": 0.0, "eval_s": 0.0}
        self.mark = time.perf_counter()
        self.row: dict | None = None
        self.trainer = None
        self.evaluation = StepEvaluation(run, out_dir, data_engine, shared_starts)

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

    def evaluate(self, step: int, val: bool) -> dict:
        """The policy's evaluation at `step` (`StepEvaluation`), its time counted in Table 7's total."""
        trainer = self.trainer
        result, seconds = self.evaluation.at_step(step, trainer.accelerator.unwrap_model(trainer.model),
                                                  trainer.processing_class, val)
        self.totals["eval_s"] += seconds
        return result

    def on_train_begin(self, step: int) -> None:
        if step == 0 and self.is_main and self.cfg.launch.num_processes == 1:
            self.evaluate(0, val=True)
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
        if self.pool_update.has_rounds and self.cfg.round_after(step):
            row.update(self._feedback_round(step))
        last = step == self.cfg.max_steps
        every = self.cfg.evaluation_every
        if self.is_main and self.cfg.launch.num_processes == 1 and (last or (every and step % every == 0)):
            result = self.evaluate(step, val=last)
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
            "pool/size": sum(t["pool_version"] <= self.rollouts.allowed_version for t in self.data_engine.pool.tasks),
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
            self.data_engine.shards = self.shards if sharded else SINGLE
            signals = [s for k in window for s in read_jsonl(self.out_dir / "signals" / f"step_{k:05d}.jsonl")]
            rollouts = [r for k in window for r in read_jsonl(self.out_dir / "rollouts" / f"step_{k:05d}.jsonl")]
            try:
                report = self.pool_update.round(RoundInputs(
                    self.data_engine, round_index, step, self.cfg.max_steps, signals, rollouts,
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
            self.data_engine.shards = self.shards
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
            self.shards.settle([self.data_engine.pool.path] if self.is_main else [])
            if not self.is_main:
                self.data_engine.pool.__init__(self.data_engine.pool.path)  # re-read the grown pool
            self.check_same_pool(round_index)
        self.allow(round_index)
        seconds = time.perf_counter() - start
        self.totals["feedback_s"] += seconds
        out["feedback/seconds"] = round(seconds, 2)
        if self.is_main:
            out["pool/size_after_round"] = len(self.data_engine.pool)
        return out

    def check_same_pool(self, round_index: int) -> None:
        """Every process samples the same pool from here on, or the run stops in one line (a process that read
        another pool would train on other tasks than the rest, silently)."""
        pools = self.shards.gather((self.data_engine.pool.version, len(self.data_engine.pool)))
        if len(set(pools)) > 1:
            raise RunError(f"after round {round_index} the processes hold different pools (version, tasks by "
                           f"process: {pools}): --out must be on a filesystem every node shares and sees alike")

    def _reflector(self, step: int):
        """Who writes Reflexion's reflections: the policy being trained (as it is now) or the explorer model."""
        if self.cfg.baselines.reflexion_reflector == "explorer":
            return self.data_engine.explorer_model
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


def train(run: RunConfig, out_dir: str | Path, resume: bool = True, progress: bool = True,
          shared_starts: str | Path | None = None, engine: DataEngine | None = None) -> dict:
    """Run (or resume) one CoEvolve training run into `out_dir`; returns its summary (also in summary.json).
    `shared_starts`: a folder where runs that start alike share their start (the studies' runs do): D_0 when it is
    built alike (`DataEngine.initial_pool`), the step-0 evaluation when they also start from the same policy.
    `engine`: the run's data engine, already open on `out_dir` (a notebook's, whose AppWorld servers are then reused);
    the caller closes it. By default one is made and closed here."""
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
        engine = (DataEngine(run.data_engine, out_dir, run.evaluation.environment_name,
                             run.training.launch.num_processes) if owned else engine)
        try:
            state = distributed_state(run)
            if state.num_processes > 1:
                from accelerate.utils import gather_object

                # accelerate's gather_object flattens what each process gives: give it a list of one
                engine.shards = Shards(state.process_index, state.num_processes, lambda mine: gather_object([mine]))
                announce(progress and state.is_main_process, f"{state.num_processes} processes; a collective waits up "
                         f"to {collective_timeout_s(run)} s (training.process_group_timeout_s)")
            return _train(run, out_dir, engine, state, checkpoint, progress, shared_starts)
        finally:
            if owned:
                engine.close()


def _train(run: RunConfig, out_dir: Path, engine: DataEngine, state, checkpoint: Path | None, progress: bool,
           shared_starts) -> dict:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    cfg = run.training
    trainer_dir = out_dir / "trainer"
    timings = {}
    # D_0 (every process explores its share; a single-process run copies one built alike from `shared_starts`) and
    # the warm start (the main process) are cached in the run folder
    announce(progress and state.is_main_process, f"D_0: up to {run.data_engine.d0_size} validated tasks (cached in "
             f"{out_dir.name}/round_000; a minute or two with the offline explorer, longer with an LLM explorer)")
    start = time.perf_counter()
    engine.initial_pool(progress=progress and state.is_main_process, shared=shared_starts)
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
                        shared_starts=Path(shared_starts) if shared_starts else None)
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
        trainer = trainer_class()(model=policy_path, reward_funcs=[environment_reward], args=args,
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
