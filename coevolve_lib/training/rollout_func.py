"""TRL's `rollout_func` for a pool that grows: each GRPO step draws its tasks from the live pool D_t, runs K
token-level multi-turn episodes of each with the policy, scores them with the environment's reward, and hands TRL the
groups it trains on (dynamic sampling, DAPO: groups whose rewards vary first).

Shortcut, stated up front: TRL builds its dataloader once but D_t grows, so the trainer's dataset holds placeholder
"slots" only, and the draw here is seeded by the step: the same step always draws the same tasks from the same pool
version."""

from __future__ import annotations

import time

from coevolve_lib.core.config import RunConfig
from coevolve_lib.core.models import HFChatModel
from coevolve_lib.core.runtime import announce
from coevolve_lib.engine.data_engine import DataEngine, stamp_rollouts
from coevolve_lib.rollout.agent import ENVIRONMENT_ERROR, RolloutPhase, rollout_phase, run_rollouts


def environment_reward(completions, reward, **kwargs) -> list[float]:
    """The reward TRL sees: each episode's reward, computed in the rollout from the environment's checker."""
    return [float(r) for r in reward]


def training_rollouts(run: RunConfig) -> RolloutPhase:
    """Token-level rollouts at the rollout temperature, capped at the training's completion budget; through TRL's
    vLLM (engine `vllm`) with `training.use_vllm`."""
    phase = rollout_phase(run.rollout, token_level=True, max_completion_tokens=run.training.max_completion_tokens)
    if run.training.use_vllm:
        phase.engine = "vllm"
    return phase


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

    def __init__(self, data_engine: DataEngine, run: RunConfig, process_index: int = 0, progress: bool = False):
        self.data_engine, self.pool, self.cfg = data_engine, data_engine.pool, run.training
        self.process_index = process_index
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
            records = run_rollouts(policy, self.data_engine.rollout_tasks(tasks), self.rollout,
                                   self.data_engine.environment.new_episode, samples_per_task=self.cfg.group_size,
                                   progress=False, trainer=trainer)
        self.seconds += time.perf_counter() - start
        k = self.cfg.group_size
        # `score` and `success` stay the checker's verdict; `reward` is what GRPO optimises (and signals read): the
        # environment's reward the profile names (`Environment.rewards`).
        reward = self.data_engine.environment.rewards[self.cfg.reward]
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
