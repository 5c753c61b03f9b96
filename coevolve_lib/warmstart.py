"""Supervised warm start (a kit addition, off in the paper profiles): a few minutes of SFT with TRL's
`SFTTrainer` on reference solutions, so that a random-init tiny model starts RL with rewards that can move.

A GRPO group of a model that never succeeds has zero advantage everywhere: nothing is learned and no boundary or
forgetting signal can fire. The paper starts from instruct models that already score 13-43% on BFCL; the tiny
profile gets a comparable starting point from SFT on validated D_0 tasks (never on evaluation tasks).

Measured on the prototype (shared/reference/tiny-model-feasibility.md): loss on all tokens (the query and the
observations hold the names to copy) beats assistant-only loss about 2.5x; the learning-rate schedule must
finish within the budget.

Measured on the kit's tiny model (1.6M params, 4k BPE; D_0 tasks of 3-6 calls, ~420 tokens per conversation;
one loaded core, ~0.9-1.1 s per batch-8 step): 120-600 steps on D_0 alone or with 1,000-6,000 extra synthetic tasks
gave 0% greedy success on D_0 and on held-out synthetic tasks (600 steps, ~9 min: loss 0.37, first-call name
accuracy 30% on held-out 1-3 call tasks). The defaults fit ~5 minutes; they do not yet give mixed outcomes.

Re-measured 2026-11-29 (docs/log.md) with D_0 tasks of 3-4 calls, ~2,950 extra 1-3 call tasks + 5 copies of D_0,
a fresh run dir, K=4 at T=0.9 on all 100 D_0 tasks: still 0% greedy, 0% sampled, 0 mixed tasks, after 230-380
steps (~5 min) and after 900 steps. lr 6e-3 with AdamW beta2 0.95 lowers the final loss (0.54 vs 0.78) but the
model hardly conditions on the query: its first call name is right for only ~7-10% of D_0 tasks, and under teacher
forcing its first name token is mostly one of a few frequent names (get/mkdir/ls; 9% right over 118 calls). A
wider model (hidden 192, 6 heads, 2.4M) did no better within the budget; 900 steps (~10 min) reached first-call
accuracy 31% (54% right name) but 2% on the fourth call. A shortest-first curriculum (`curriculum`) raised
first-call name accuracy from 7% to 17% at 380 steps.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from coevolve_lib import toolcalls
from coevolve_lib.envs.bfcl import BFCLEnv, BFCLTask, tools_to_openai
from coevolve_lib.envs.safe_calls import parse_call


@dataclass
class WarmStartConfig:
    """Supervised fine-tuning before RL."""

    enabled: bool = False
    """Run the warm start (tiny profile: on; paper profiles: off)."""
    max_steps: int = 340
    """Optimizer steps; the cosine schedule ends exactly here (340 x batch 8 ~ 5 min on one core)."""
    batch_size: int = 8
    """Conversations per step."""
    learning_rate: float = 3e-3
    """Peak learning rate (a random-init 2M-parameter model needs a large one)."""
    warmup_steps: int = 10
    """Linear warm-up steps before the cosine decay."""
    adam_beta2: float = 0.999
    """AdamW's second-moment decay (0.95 adapts faster in a short run)."""
    max_length: int = 512
    """Tokens per conversation (longer ones are cut)."""
    seed: int = 0
    """Seed of data order and initialisation of new weights."""
    group_by_length: bool = True
    """Batch conversations of similar length together (less padding)."""
    curriculum: bool = False
    """Train on the conversations in order of their number of calls, shortest first (shuffled within one length;
    batches are then of similar length too, so `group_by_length` is not used)."""
    extra_seeds: list[int] = field(default_factory=list)
    """Also train on synthetic tasks from unguided schema exploration of the given tasks' initial states, one
    exploration per seed (seeds should differ from the D_0 exploration seed). These are warm-start data only:
    they never enter the RL pool. Empty: train on the given (D_0) tasks only."""
    extra_long_seeds: list[int] = field(default_factory=list)
    """Like `extra_seeds`, but D_0-shaped tasks (exploration S=8, 3-6 reference calls), ~9-10 per state and seed."""
    extra_runs: int = 10
    """Exploration runs R per initial state for the extra tasks (about 9-10 accepted tasks per state and seed)."""
    extra_explore_steps: int = 4
    """Exploration steps S per run for the extra tasks (4: short runs, so mostly 1-3 call tasks)."""
    extra_max_calls: int = 3
    """Longest reference of an extra task (short tasks are cheaper per example and easier to learn first)."""
    task_repeats: int = 3
    """Copies of each given (D_0) task in the training set when extra tasks are used."""


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
    With `config.extra_seeds` / `extra_long_seeds`, the training set is `task_repeats` copies of `tasks` plus
    synthetic warm-start tasks explored from the same initial states (see `extra_tasks`; warm-start data only).
    Returns `{"path", "examples", "extra_tasks", "skipped", "steps", "seconds", "final_loss"}` (`seconds`: training
    only; making the extra tasks takes ~10 s per short seed and ~30 s per long seed on one core).
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    extra = extra_tasks(tasks, Path(out_dir) / "extra_tasks", config) if config.extra_seeds or config.extra_long_seeds \
        else []
    if extra:
        tasks = list(tasks) * config.task_repeats + extra
    examples, calls, skipped = [], [], 0
    for task in tasks:
        if any(parse_call(c).args for turn in task.ground_truth for c in turn):
            skipped += 1
            continue
        examples.append(sft_conversation(task, tool_docs))
        calls.append(sum(len(turn) for turn in task.ground_truth))
    if config.curriculum:
        rng = random.Random(config.seed)
        keys = [(n, rng.random()) for n in calls]
        examples = [examples[i] for i in sorted(range(len(examples)), key=keys.__getitem__)]
    if tool_docs == "none":
        examples = [{"messages": e["messages"]} for e in examples]
    args = SFTConfig(
        output_dir=str(out_dir), max_steps=config.max_steps, per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate, adam_beta2=config.adam_beta2, lr_scheduler_type="cosine",
        warmup_steps=config.warmup_steps,
        max_length=config.max_length, assistant_only_loss=False, seed=config.seed, logging_steps=10,
        save_strategy="no", report_to="none", use_cpu=_use_cpu(), bf16=False, gradient_checkpointing=False,
        disable_tqdm=False,
        train_sampling_strategy="sequential" if config.curriculum else
        "group_by_length" if config.group_by_length else "random",
    )
    trainer = SFTTrainer(model=str(model_path), args=args, train_dataset=Dataset.from_list(examples))
    start = time.perf_counter()
    output = trainer.train()
    trainer.save_model(str(out_dir))
    trainer.processing_class.save_pretrained(str(out_dir))
    return {"path": str(out_dir), "examples": len(examples), "extra_tasks": len(extra), "skipped": skipped,
            "steps": output.global_step,
            "seconds": round(time.perf_counter() - start, 1), "final_loss": output.training_loss}


def extra_tasks(tasks: list[BFCLTask], work_dir: str | Path, config: WarmStartConfig) -> list[BFCLTask]:
    """Validated synthetic warm-start tasks: unguided schema exploration of the initial states of `tasks`, one
    D_0-style synthesis per seed in `config.extra_seeds` (deterministic, seconds per seed)."""
    from coevolve_lib.explore import ExploreConfig
    from coevolve_lib.feedback import FeedbackConfig, synthesize_initial
    from coevolve_lib.pool import TaskPool
    from coevolve_lib.synthesize import SynthesisConfig, pool_task_to_bfcl

    short = SynthesisConfig(min_steps=1, max_steps=config.extra_max_calls)
    plans = [(f"short_{s}", s, config.extra_explore_steps, short) for s in config.extra_seeds]
    plans += [(f"long_{s}", s, 8, SynthesisConfig()) for s in config.extra_long_seeds]
    out = []
    for name, seed, steps, synthesis in plans:
        seed_dir = Path(work_dir) / name
        pool = TaskPool(seed_dir / "pool.jsonl")
        if not len(pool):
            feedback = FeedbackConfig(explore=ExploreConfig(runs=config.extra_runs, steps=steps, seed=seed),
                                      synthesis=synthesis)
            synthesize_initial(tasks, pool, seed_dir / "round", feedback, size=10**9, progress=False)
        out += [pool_task_to_bfcl(t) for t in pool.tasks]
    return out


def _use_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()
