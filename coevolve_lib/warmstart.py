"""Supervised warm start (a kit addition, off in the paper profiles): a few minutes of SFT with TRL's
`SFTTrainer` on reference solutions, so that a random-init tiny model starts RL with rewards that can move.

A GRPO group of a model that never succeeds has zero advantage everywhere: nothing is learned and no boundary or
forgetting signal can fire. The paper starts from instruct models that already score 13-43% on BFCL; the tiny
profile gets a comparable starting point from SFT on validated D_0 tasks (never on evaluation tasks).

Measured on the prototype (shared/reference/tiny-model-feasibility.md): loss on all tokens (the query and the
observations hold the names to copy) beats assistant-only loss about 2.5x; the learning-rate schedule must
finish within the budget.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib import toolcalls
from coevolve_lib.envs.bfcl import BFCLEnv, BFCLTask, tools_to_openai
from coevolve_lib.envs.safe_calls import parse_call


@dataclass
class WarmStartConfig:
    """Supervised fine-tuning before RL."""

    enabled: bool = False
    """Run the warm start (tiny profile: on; paper profiles: off)."""
    max_steps: int = 300
    """Optimizer steps; the cosine schedule ends exactly here."""
    batch_size: int = 16
    """Conversations per step."""
    learning_rate: float = 3e-3
    """Peak learning rate (a random-init 2M-parameter model needs a large one)."""
    warmup_steps: int = 20
    """Linear warm-up steps before the cosine decay."""
    max_length: int = 1024
    """Tokens per conversation (longer ones are cut)."""
    seed: int = 0
    """Seed of data order and initialisation of new weights."""
    group_by_length: bool = True
    """Batch conversations of similar length together (less padding, ~same quality)."""


def sft_conversation(task: BFCLTask, tool_docs: str = "none") -> dict:
    """The reference solution of `task` as a conversation: per user turn, one tool call per assistant message,
    each followed by the real observation from executing it, then a short answer.

    Returns `{"messages": [...], "tools": [...] | None}` in the native (chat-template) tool format.
    """
    env = BFCLEnv(task)
    messages = []
    for turn, user_messages in enumerate(task.turns):
        messages.extend(user_messages or [{"role": "user", "content": "Continue."}])
        for call_text in task.ground_truth[turn]:
            call = parse_call(call_text)
            [observation] = env.execute([call])
            # Arguments as a JSON string (the template renders it verbatim, as `tojson` would render the dict):
            # a column of datasets needs one type, and argument dicts differ from call to call.
            arguments = json.dumps(call.kwargs_dict, ensure_ascii=False)
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": call.name, "arguments": arguments}}]})
            messages.append({"role": "tool", "name": call.name, "content": observation})
        messages.append({"role": "assistant", "content": "Done."})
        env.end_turn()
    env.close()
    tools = None
    if tool_docs != "none":
        docs = task.tools_at_turn(len(task.turns) - 1)
        tools = tools_to_openai(toolcalls.compact_docs(docs) if tool_docs == "compact" else docs)
    return {"messages": messages, "tools": tools}


def warm_start(model_path: str | Path, tasks: list[BFCLTask], out_dir: str | Path, config: WarmStartConfig,
               tool_docs: str = "none") -> dict:
    """Fine-tune the model at `model_path` on the tasks' reference solutions; save it to `out_dir`.

    Tasks whose reference uses positional arguments are skipped (native tool calls carry keyword arguments).
    Returns `{"path", "examples", "skipped", "steps", "seconds", "final_loss"}`.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    examples, skipped = [], 0
    for task in tasks:
        if any(parse_call(c).args for turn in task.ground_truth for c in turn):
            skipped += 1
            continue
        examples.append(sft_conversation(task, tool_docs))
    if tool_docs == "none":
        examples = [{"messages": e["messages"]} for e in examples]
    args = SFTConfig(
        output_dir=str(out_dir), max_steps=config.max_steps, per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate, lr_scheduler_type="cosine", warmup_steps=config.warmup_steps,
        max_length=config.max_length, assistant_only_loss=False, seed=config.seed, logging_steps=10,
        save_strategy="no", report_to="none", use_cpu=_use_cpu(), bf16=False, gradient_checkpointing=False,
        disable_tqdm=False,
        train_sampling_strategy="group_by_length" if config.group_by_length else "random",
    )
    trainer = SFTTrainer(model=str(model_path), args=args, train_dataset=Dataset.from_list(examples))
    start = time.perf_counter()
    output = trainer.train()
    trainer.save_model(str(out_dir))
    trainer.processing_class.save_pretrained(str(out_dir))
    return {"path": str(out_dir), "examples": len(examples), "skipped": skipped, "steps": output.global_step,
            "seconds": round(time.perf_counter() - start, 1), "final_loss": output.training_loss}


def _use_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()
