"""AppWorld's supervised warm start (a kit addition, off in the paper profiles; the shared data, loop and shipping:
`engine/warm_start.py`): the reference code of validated synthetic AppWorld tasks as one-reply episodes.

The data are the warm start's own: `data_seeds` unguided explorations of the `train` split's start states (the same
explorer, abstraction, writer and AppWorld evaluator as D_0, with other seeds), abstracted into tasks of
`data_min_calls`..`data_max_calls` calls. Each task becomes the conversation an episode of it starts with (the
episode's own system and user prompts, `episode.system_prompt` and `user_prompt`) and one reply: a ```python block
with the task's reference solution (`calls.solution_code`: the login preamble, the calls, `complete_task` with the
answer its rule names). So the policy learns AppWorld's protocol and to read the query's APIs and arguments; it does
not learn to read an observation and go on, since a reference needs none.

D_0 and the rounds explore the same start states with other seeds, so the policy meets new tasks in seen start states;
held-out set (a) would too, and the warm start's data is not screened against it, so an AppWorld profile with the warm
start has only set (b) (`AppWorldEnvironment.check`). A warm start on households of its own (3, then 16, nothing else
explored) was tried: the tiny model filled arguments with values common in its data instead of copying the query's,
and reached 2% sampled success on D_0 (docs/log.md).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from coevolve_lib.core.config import DataEngineConfig, RolloutConfig, WarmStartConfig
from coevolve_lib.engine.warm_start import RECIPE_VERSION, train_sft, warm_start_tasks
from coevolve_lib.envs.appworld.benchmark import AppWorldTask
from coevolve_lib.envs.appworld.calls import solution_code
from coevolve_lib.envs.appworld.episode import api_list, system_prompt, user_prompt


def sft_conversation(task: AppWorldTask, pool_task: dict, api_docs: dict, max_steps: int, tool_docs: str) -> dict:
    """The conversation of one episode of `task` (the AppWorld task written for `pool_task`) that solves it in one
    reply: the episode's prompt (the API list unless `tool_docs` is `none`, as `AppWorldEpisodes` builds it) and the
    reference solution in a ```python block."""
    code = solution_code(pool_task["reference_actions"], api_docs, pool_task.get("answer_from"))
    apis = None if tool_docs == "none" else api_list(api_docs)
    return {"messages": [{"role": "system", "content": system_prompt(max_steps, apis)},
                         {"role": "user", "content": user_prompt(task)},
                         {"role": "assistant", "content": f"```python\n{code}\n```"}]}


def warm_start_recipe(model: str, config: WarmStartConfig, data: dict, synthesis: dict, rollout: dict) -> dict:
    """Everything that decides an AppWorld warm start's weights (its key names the cache folder and the shipped copy):
    the base model, the schedule and data settings, the data root (`describe()`), the abstraction's settings and the
    prompt's (step cap, API list)."""
    settings = {key: value for key, value in asdict(config).items() if key != "enabled"}
    return {"recipe_version": RECIPE_VERSION, "environment": "appworld", "model": model, "warm_start": settings,
            "data": data, "synthesis": synthesis, "rollout": rollout}


def warm_start_conversations(environment, config: WarmStartConfig, data_dir: str | Path) -> list[dict]:
    """The conversations of the reference code of tasks from `config.data_seeds` explorations of `environment`'s pool
    sources (an `AppWorldEnvironment`: its server writes and checks them; each seed's tasks cached under
    `data_dir`), in the prompt `environment`'s rollout settings give an episode."""
    run = environment.config
    tasks = warm_start_tasks(environment.sources("pool"), data_dir, config, run.synthesis, environment)
    api_docs = environment.api_docs()
    return [sft_conversation(task, pool_task, api_docs, run.rollout.max_steps_per_episode, run.rollout.tool_docs)
            for task, pool_task in zip(environment.rollout_tasks(tasks), tasks)]


def warm_start(model_path: str | Path, environment, out_dir: str | Path, config: WarmStartConfig,
               progress: bool = True) -> dict:
    """Fine-tune `model_path` into `out_dir` on `warm_start_conversations` (data under `out_dir/data`). Returns the
    `train_sft` summary plus {"tasks", "data_seconds"}."""
    start = time.perf_counter()
    conversations = warm_start_conversations(environment, config, Path(out_dir) / "data")
    data_seconds = time.perf_counter() - start
    summary = train_sft(model_path, conversations, out_dir, config, progress=progress)
    return {**summary, "tasks": len(conversations), "data_seconds": round(data_seconds, 1)}


# ------------------------------------------------------------------ the stand-ins' format warm start (engine.standins)

STANDIN_WARM_START = WarmStartConfig(
    enabled=True, max_steps=300, batch_size=8, learning_rate=3e-3, warmup_steps=20, final_lr_ratio=0.1,
    max_length=1536, data_seeds=2, data_runs=8, data_calls_per_run=6, data_min_calls=3, data_max_calls=4)
"""The format warm start of a paper backbone's AppWorld stand-in (`PaperModel.standin_for("appworld")`): the BFCL
stand-ins' schedule (300 steps of 8, assistant-only loss) on the reference code of the tasks of two explorations of
the synthetic world's train households, with `tiny-appworld`'s warm-start data settings (150 tasks, ~490 tokens a
conversation; 5.5 min to build on 2 cores: docs/log.md)."""
STANDIN_ROLLOUT = RolloutConfig(tool_docs="none", max_steps_per_episode=2)
"""The episode prompt the AppWorld stand-ins learn (no API list, a 2-step cap): `configs/rehearsal.yaml`'s AppWorld
rollout settings, which must match it."""
STANDIN_DATA = {"environment": "appworld", "rollout": {"tool_docs": STANDIN_ROLLOUT.tool_docs,
                                                       "max_steps_per_episode": STANDIN_ROLLOUT.max_steps_per_episode}}
"""What decides the format warm start's conversations besides `STANDIN_WARM_START` (part of a stand-in's recipe)."""
STANDIN_DATA_CONFIG = DataEngineConfig(profile="standin", model="standin", rollout=STANDIN_ROLLOUT)
"""The data-engine settings of the environment the stand-ins' tasks are built in (the synthetic world:
`AppWorldEnvironment.format_conversations`; the task lengths are `STANDIN_WARM_START`'s)."""


def standin_conversations(environment) -> list[dict]:
    """The AppWorld stand-ins' format warm start conversations (`STANDIN_WARM_START`), built with `environment`'s
    server (an `AppWorldEnvironment` of `STANDIN_DATA_CONFIG`; the tasks cached in its run folder)."""
    return warm_start_conversations(environment, STANDIN_WARM_START, environment.run_dir / "data")
