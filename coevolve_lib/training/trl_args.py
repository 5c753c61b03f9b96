"""How a run's `training` and `rollout` sections map onto TRL's `GRPOConfig` (the paper's Table 9) and peft's
LoraConfig.

The mapping table (paper value -> TrainConfig field -> GRPOConfig argument) and every gap versus the paper's verl
setup are in docs/training.md, their one source; `grpo_kwargs` below implements the mapping, and
`python -m coevolve_lib train --profile <profile> --dry-run` prints the resolved arguments without loading a model.
In short: one policy update per batch (num_iterations=1, `training.num_iterations`), group-std advantages
(`scale_rewards="group"`), token-mean loss (`loss_type="dapo"`), no weight decay; tool and observation tokens are masked
out of the loss (`env_mask`).
"""

from __future__ import annotations

from coevolve_lib.core.config import RolloutConfig, TrainConfig


def grpo_kwargs(cfg: TrainConfig, rollout: RolloutConfig, output_dir: str, cuda: bool) -> dict:
    """The GRPOConfig arguments of a run (a dict, so a dry run can print it without building a trainer)."""
    bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and cuda)
    kwargs = dict(
        output_dir=output_dir, max_steps=cfg.max_steps, seed=cfg.seed,
        per_device_train_batch_size=cfg.per_device_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps, num_generations=cfg.group_size,
        learning_rate=cfg.learning_rate, lr_scheduler_type=cfg.lr_scheduler_type, warmup_steps=cfg.warmup_steps,
        optim="adamw_torch", weight_decay=0.0, max_grad_norm=cfg.max_grad_norm,
        epsilon=cfg.epsilon_low, epsilon_high=cfg.epsilon_high, beta=cfg.beta, loss_type=cfg.loss_type,
        num_iterations=cfg.num_iterations,
        scale_rewards=cfg.scale_rewards, temperature=rollout.temperature, top_p=rollout.top_p,
        max_completion_length=cfg.max_completion_tokens,
        logging_steps=1, save_strategy="steps", save_steps=cfg.checkpoint_every,
        save_total_limit=cfg.save_total_limit, report_to=cfg.report_to,
        bf16=bf16, use_cpu=not cuda, gradient_checkpointing=cfg.gradient_checkpointing,
        model_init_kwargs={"dtype": "bfloat16" if bf16 else "float32"},
        use_vllm=cfg.use_vllm,
        # The dataset only holds step slots (see training/loop.py): order and columns do not matter.
        shuffle_dataset=False, remove_unused_columns=False,
    )
    if cfg.use_vllm:  # TRL builds the vLLM generation that the `vllm` rollout engine calls (rollout/vllm.py)
        kwargs.update(
            vllm_mode=cfg.vllm_mode, vllm_server_host=cfg.vllm_server_host, vllm_server_port=cfg.vllm_server_port,
            vllm_tensor_parallel_size=cfg.vllm_tensor_parallel_size,
            vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            vllm_max_model_length=cfg.vllm_context,
            # vLLM's cap per reply: the rollout's (max_completion_length, its default, is the whole episode's budget)
            generation_kwargs={"max_tokens": rollout.max_new_tokens},
            # The rollouts return no sampling logprobs (`logprobs: None`), which TRL's importance-sampling
            # correction of the vLLM/trainer mismatch needs (docs/training.md, vLLM rollouts).
            vllm_importance_sampling_correction=False)
    return kwargs


def lora_config(cfg: TrainConfig):
    """A peft LoraConfig, or None when LoRA is off."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                          target_modules=list(cfg.lora.target_modules), task_type="CAUSAL_LM")

