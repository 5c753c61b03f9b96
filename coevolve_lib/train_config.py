"""The `training:` section of a profile, and how it maps onto TRL's `GRPOConfig` (the paper's Table 9).

The mapping table (paper value -> TrainConfig field -> GRPOConfig argument) and every gap versus the paper's verl
setup are in docs/training.md, their one source; `grpo_kwargs` below implements the mapping, and
`python -m coevolve_lib train --profile <profile> --dry-run` prints the resolved arguments without loading a model.
In short: one policy update per batch (num_iterations=1), group-std advantages (`scale_rewards="group"`), token-mean
loss (`loss_type="dapo"`), no weight decay; tool and observation tokens are masked out of the loss (`env_mask`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


POOL_UPDATES = ("signals", "random", "none")


@dataclass
class LoraSettings:
    """Optional LoRA adapters through peft (off in the paper, which trains all weights)."""

    enabled: bool = False
    """Train LoRA adapters instead of all weights."""
    r: int = 16
    """Adapter rank."""
    alpha: int = 32
    """LoRA scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapter input."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Modules that get adapters."""


@dataclass
class LaunchConfig:
    """Where a run executes (used to compute per-device batches and to print launch commands)."""

    num_machines: int = 1
    """Nodes (the paper: 1 for the 4B/7B models, 2 for Qwen3-30B-A3B)."""
    num_processes: int = 1
    """Training processes in total, one per GPU (the paper: 8 or 16)."""
    accelerate_config: str | None = None
    """accelerate config file (relative to the repo), e.g. configs/accelerate/zero3_1x8.yaml; None: in-process."""


@dataclass
class TrainConfig:
    """GRPO on the task pool with a feedback round every `feedback_every` steps."""

    max_steps: int = 120
    """Optimizer steps (the paper: 120)."""
    tasks_per_step: int = 32
    """Pool tasks per step over all processes (the paper's training batch size 32)."""
    group_size: int = 8
    """K rollouts per task (GRPO group size; the paper: 8)."""
    learning_rate: float = 1e-6
    """Peak learning rate (the paper: 1e-6)."""
    lr_scheduler_type: str = "constant"
    """transformers scheduler name (the paper: constant)."""
    warmup_steps: int = 0
    """Linear warm-up steps."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm."""
    epsilon_low: float = 0.2
    """PPO clip range below 1 (the paper: 0.20)."""
    epsilon_high: float = 0.28
    """PPO clip range above 1 (the paper: 0.28, "clip-higher")."""
    beta: float = 1e-3
    """KL coefficient against the initial policy (the paper: 1e-3; 0 skips the reference model)."""
    loss_type: str = "dapo"
    """TRL loss aggregation; `dapo` = token mean over the batch, the paper's 1/sum|tau_k| normalisation."""
    scale_rewards: str = "group"
    """Advantage normalisation: `group` (std within the group), `batch` or `none`."""
    temperature: float = 0.9
    """Rollout sampling temperature (the paper: 0.9)."""
    top_p: float = 1.0
    """Rollout nucleus sampling mass."""
    max_completion_tokens: int = 4096
    """Most tokens after the first prompt per episode, model and environment tokens (the paper: 4096)."""
    max_new_tokens: int = 1024
    """Most tokens per model reply within an episode."""
    max_steps_per_episode: int = 30
    """Interaction cap per episode; more fails it (the paper: 30)."""
    max_steps_per_turn: int = 20
    """Model steps with tool calls per user turn (BFCL's limit)."""
    tool_format: str = "auto"
    """`native`, `prompt` or `auto` (native when the chat template supports tools)."""
    tool_docs: str = "full"
    """Tool docs in the prompt: `full`, `compact` or `none` (a model trained on the tools)."""
    reward: str = "binary"
    """`binary` (the paper: 1 when the BFCL checker passes, else 0) or `prefix` (a kit addition for the tiny
    profile: 1 on success, else the reference calls reproduced in order from the start, divided by one more than
    the larger of the reference and executed call counts). Success is logged either way; signals read the reward."""
    rollout_batch_size: int = 64
    """Live episodes batched per generate call."""
    pool_updates: str = "signals"
    """How the pool grows every F steps: `signals` (CoEvolve: signal-guided re-exploration of the step's weakness
    trajectories), `random` (the paper's "+ Random Exploration" baseline: as many pool tasks drawn at random,
    re-explored unguided, no signals) or `none` (GRPO on the fixed D_0, the paper's GRPO baseline). Signals are
    extracted and logged in every mode."""
    feedback_every: int = 10
    """F: a feedback round after every F steps (the paper: 10)."""
    eval_every: int | None = None
    """Greedy success on the held-out set (and a fixed sample of D_0) every E steps, before training and at the end
    (None: every F steps; 0: only before and after)."""
    eval_limit: int | None = None
    """BFCL val tasks evaluated before training and at the end (None: the evaluation section's limit; 0: skip)."""
    eval_pool_tasks: int = 32
    """D_0 tasks solved greedily at each evaluation (a fixed sample: progress on the training distribution)."""
    save_every: int | None = None
    """Checkpoint every this many steps (None: every F steps, right after the round)."""
    save_total_limit: int | None = 2
    """Checkpoints kept on disk (oldest deleted first)."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step (one generation per optimizer step either way)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass (less memory, ~30% slower)."""
    dtype: str = "auto"
    """Training dtype: `auto` (bfloat16 on GPU, float32 on CPU), `bfloat16` or `float32`."""
    lora: LoraSettings = field(default_factory=LoraSettings)
    use_vllm: bool = False
    """Must stay False: vLLM generation inside the multi-turn rollouts is not implemented yet (they generate with
    transformers `generate` on the training model; docs/training.md, "Open gaps"). True is rejected."""
    vllm_tensor_parallel_size: int = 1
    """The paper's rollout tensor parallel size (1 for 4B/7B, 2 for 30B-A3B), recorded for when vLLM rollouts
    exist; unused in training until then."""
    report_to: str = "none"
    """Extra metric sinks for TRL's logs: `none`, `tensorboard`, `wandb` (metrics.jsonl is always written)."""
    seed: int = 0
    """Seed of task sampling, generation and TRL."""
    torch_threads: int | None = None
    """CPU threads for torch (None: $COEVOLVE_TORCH_THREADS or 1; more is often slower on a shared machine)."""
    launch: LaunchConfig = field(default_factory=LaunchConfig)

    def __post_init__(self):
        completions = self.tasks_per_step * self.group_size
        shards = self.launch.num_processes * self.gradient_accumulation_steps
        if self.group_size < 2:
            raise ValueError("group_size must be at least 2 (GRPO compares rollouts within a group)")
        # Each process rolls out whole groups (one generation per optimizer step), then TRL splits them into
        # `gradient_accumulation_steps` equal micro-batches.
        if completions % shards or (completions // self.launch.num_processes) % self.group_size:
            raise ValueError(
                f"tasks_per_step x group_size = {completions} completions must split into whole groups over "
                f"{self.launch.num_processes} process(es) and into {self.gradient_accumulation_steps} equal "
                "accumulation micro-batch(es)")
        if self.loss_type not in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"):
            raise ValueError(f"unknown loss_type {self.loss_type!r}")
        if self.use_vllm:
            raise ValueError(
                "training.use_vllm=true is not supported: vLLM generation inside the kit's multi-turn rollouts is not "
                "implemented yet (rollouts use transformers generate on the training model; see docs/training.md, "
                "\"Open gaps\", vLLM rollouts). Set training.use_vllm=false.")
        if self.reward not in ("binary", "prefix"):
            raise ValueError(f"reward must be binary or prefix, not {self.reward!r}")
        if self.feedback_every < 1:
            raise ValueError("feedback_every must be >= 1")
        if self.pool_updates not in POOL_UPDATES:
            raise ValueError(f"pool_updates must be one of {POOL_UPDATES}, not {self.pool_updates!r}")

    @property
    def per_device_batch_size(self) -> int:
        """Completions per process per micro-batch."""
        return self.tasks_per_step * self.group_size // (self.launch.num_processes * self.gradient_accumulation_steps)

    @property
    def checkpoint_every(self) -> int:
        return self.save_every or self.feedback_every

    @property
    def evaluation_every(self) -> int:
        """Steps between held-out evaluations (0: only before and after training)."""
        return self.feedback_every if self.eval_every is None else self.eval_every


def grpo_kwargs(cfg: TrainConfig, output_dir: str, cuda: bool) -> dict:
    """The GRPOConfig arguments of a TrainConfig (a dict, so a dry run can print it without building a trainer)."""
    bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and cuda)
    kwargs = dict(
        output_dir=output_dir, max_steps=cfg.max_steps, seed=cfg.seed,
        per_device_train_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, num_generations=cfg.group_size,
        learning_rate=cfg.learning_rate, lr_scheduler_type=cfg.lr_scheduler_type, warmup_steps=cfg.warmup_steps,
        optim="adamw_torch", weight_decay=0.0, max_grad_norm=cfg.max_grad_norm,
        epsilon=cfg.epsilon_low, epsilon_high=cfg.epsilon_high, beta=cfg.beta, loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards, temperature=cfg.temperature, top_p=cfg.top_p,
        max_completion_length=cfg.max_completion_tokens,
        logging_steps=1, save_strategy="steps", save_steps=cfg.checkpoint_every,
        save_total_limit=cfg.save_total_limit, report_to=cfg.report_to,
        bf16=bf16, use_cpu=not cuda, gradient_checkpointing=cfg.gradient_checkpointing,
        model_init_kwargs={"dtype": "bfloat16" if bf16 else "float32"},
        # Rollouts generate with transformers on the training model (TrainConfig rejects use_vllm=True until vLLM
        # rollouts exist; docs/training.md, "Open gaps"), so TRL must not build a vLLM engine.
        use_vllm=False,
        # The dataset only holds step slots (see train.py): order and columns do not matter.
        shuffle_dataset=False, remove_unused_columns=False,
    )
    return kwargs


def lora_config(cfg: TrainConfig):
    """A peft LoraConfig, or None when LoRA is off."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")


def as_dict(cfg: TrainConfig) -> dict:
    return asdict(cfg)
