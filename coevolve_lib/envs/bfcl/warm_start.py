"""BFCL's supervised warm start (a kit addition, off in the paper profiles; the shared data, loop and shipping:
`engine/warm_start.py`): the reference solutions of validated synthetic BFCL tasks as native tool-call conversations
(`sft_conversation`), and the two stages of the tiny profile's warm start.

The data are the warm start's own: validated synthetic tasks of 1-4 calls from unguided schema exploration of half of
the profile's *train-split* environments (`partition_environments`), one exploration per data seed
(`engine.warm_start.warm_start_tasks`), built by the same exploration, abstraction and validation code as D_0. D_0 and
the rounds use the other half, and the held-out set the val split: the policy meets every RL and evaluation task in an
environment it has never seen, so it must read names from the query instead of recalling them (a warm start on all
train environments solves D_0 there far more often than the held-out set: docs/log.md). The optional second stage
trains further on procedurally generated worlds (`worlds_stage`). Apart from both: the format warm start of the paper
backbones' BFCL stand-ins (`FORMAT_WARM_START`, `standin_conversations`; built by `engine.standins`).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path

from coevolve_lib.core.config import SynthesisConfig, WarmStartConfig
from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.engine.warm_start import train_sft, warm_start_tasks
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
from coevolve_lib.envs.bfcl.settings import BFCLWarmStartConfig
from coevolve_lib.envs.bfcl.tasks import BFCLTask
from coevolve_lib.envs.bfcl.worlds import world_tasks
from coevolve_lib.rollout import toolcalls


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
            # Arguments as a mapping: Qwen3's templates render it with `tojson` (the text of a JSON string would be
            # the same), Qwen2.5's only so (a string would come out quoted).
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": call.name, "arguments": call.kwargs_dict}}]})
            messages.append({"role": "tool", "name": call.name, "content": observation})
        messages.append({"role": "assistant", "content": "Done."})
        env.end_turn()
    env.close()
    tools = None
    if tool_docs != "none":
        docs = task.tools_at_turn(len(task.turns) - 1)
        tools = toolcalls.tools_to_openai(toolcalls.compact_docs(docs) if tool_docs == "compact" else docs)
    return {"messages": messages, "tools": tools}


def partition_environments(sources: list[BFCLTask], share: float, seed: int = 0) -> tuple[list, list]:
    """(warm-start environments, the rest): a seeded shuffle of the sources' ids, the first `share` of them."""
    ids = sorted(task.id for task in sources)
    random.Random(seed).shuffle(ids)
    chosen = set(ids[:round(len(ids) * share)])
    return [t for t in sources if t.id in chosen], [t for t in sources if t.id not in chosen]


def _fine_tune_on(model_path: str | Path, sources: list[BFCLTask], out_dir: str | Path, data: BFCLWarmStartConfig,
                  schedule: BFCLWarmStartConfig, synthesis, environment, tool_docs: str, progress: bool) -> dict:
    """Build tasks from the `sources` environments (`data`'s exploration settings) and fine-tune `model_path` on
    their reference solutions (`schedule`'s steps and learning rates) into `out_dir`. Returns the `train_sft` summary
    plus {"tasks", "skipped", "data_seconds"} (tasks whose reference uses positional arguments are skipped: native
    tool calls carry keyword arguments)."""
    start = time.perf_counter()
    tasks = warm_start_tasks(sources, Path(out_dir) / "data", data, synthesis, environment)
    usable = [t for t in tasks if not any(parse_call(c).args for c in t["reference_actions"])]
    conversations = [sft_conversation(pool_task_to_bfcl(t), tool_docs) for t in usable]
    data_seconds = time.perf_counter() - start
    summary = train_sft(model_path, conversations, out_dir, schedule, progress=progress)
    return {**summary, "tasks": len(usable), "skipped": len(tasks) - len(usable),
            "data_seconds": round(data_seconds, 1)}


def warm_start(model_path: str | Path, sources: list[BFCLTask], out_dir: str | Path, config: BFCLWarmStartConfig,
               synthesis, environment, tool_docs: str = "none", progress: bool = True) -> dict:
    """The first stage: fine-tune `model_path` into `out_dir` on tasks from the `sources` benchmark environments
    (`config.data_seeds` explorations of each)."""
    return _fine_tune_on(model_path, sources, out_dir, config, config, synthesis, environment, tool_docs, progress)


def worlds_stage(model_path: str | Path, out_dir: str | Path, config: BFCLWarmStartConfig, synthesis, environment,
                 data_version: str = "v3", tool_docs: str = "none", progress: bool = True) -> dict:
    """The second stage: fine-tune the first stage's model at `model_path` into `out_dir` on tasks from
    `config.worlds.count` generated train-split worlds (one exploration of each, seed `worlds.data_seed`), on the
    stage's own schedule."""
    stage = config.worlds
    sources = world_tasks("train", stage.count, stage.first_world, data_version=data_version)
    data = replace(config, data_seeds=1, first_data_seed=stage.data_seed)
    schedule = replace(config, max_steps=stage.max_steps, batch_size=stage.batch_size,
                       learning_rate=stage.learning_rate, final_lr_ratio=stage.final_lr_ratio,
                       warmup_steps=stage.warmup_steps)
    return {**_fine_tune_on(model_path, sources, out_dir, data, schedule, synthesis, environment, tool_docs, progress),
            "worlds": stage.count}


WORLDS_VERSION = 1
"""Part of a recipe with a worlds stage: bump it when a change of `envs.bfcl.worlds` alters the worlds."""


# ------------------------------------------------------------------ the stand-ins' format warm start (engine.standins)

FORMAT_WARM_START = WarmStartConfig(
    enabled=True, max_steps=300, batch_size=8, learning_rate=3e-3, warmup_steps=20, final_lr_ratio=0.1,
    max_length=2048, data_seeds=2, data_runs=6, data_calls_per_run=5, data_min_calls=1, data_max_calls=3)
"""The format warm start of a paper backbone's BFCL stand-in: 300 steps of 8 conversations (~1,400 tokens each with
compact docs, ~100 of them the assistant's) on the 295 tasks of two explorations of the GorillaFileSystem train-split
environments (300: at 200 steps the Qwen3 stand-in's greedy replies still loop inside the JSON, at 300 most are calls
that parse; docs/log.md)."""
FORMAT_CLASSES = ["GorillaFileSystem"]
"""The BFCL classes the format warm start's tasks use (the rehearsal's pool uses the same world)."""
FORMAT_DATA = {"classes": FORMAT_CLASSES, "tool_docs": "compact"}
"""What decides the format warm start's conversations besides `FORMAT_WARM_START` (part of a stand-in's recipe)."""


def standin_conversations(environment) -> list[dict]:
    """The format warm start's conversations: the validated synthetic tasks of `FORMAT_WARM_START`'s explorations of
    `environment`'s pool sources (a `BFCLEnvironment` of the `FORMAT_CLASSES`; cached in its run folder), each as its
    reference solution with compact tool docs."""
    tasks = warm_start_tasks(environment.sources("pool"), environment.run_dir, FORMAT_WARM_START, SynthesisConfig(),
                             environment)
    return [sft_conversation(pool_task_to_bfcl(task), tool_docs=FORMAT_DATA["tool_docs"]) for task in tasks]
