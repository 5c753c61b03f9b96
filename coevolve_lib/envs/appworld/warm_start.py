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

from coevolve_lib.core.config import WarmStartConfig
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


def warm_start(model_path: str | Path, environment, out_dir: str | Path, config: WarmStartConfig,
               progress: bool = True) -> dict:
    """Fine-tune `model_path` into `out_dir` on the reference code of tasks from `config.data_seeds` explorations
    of `environment`'s pool sources (an `AppWorldEnvironment`: its server writes and checks them). Returns the
    `train_sft` summary plus {"tasks", "data_seconds"}."""
    start = time.perf_counter()
    run = environment.config
    tasks = warm_start_tasks(environment.sources("pool"), Path(out_dir) / "data", config, run.synthesis, environment)
    api_docs = environment.api_docs()
    conversations = [sft_conversation(task, pool_task, api_docs, run.rollout.max_steps_per_episode,
                                      run.rollout.tool_docs)
                     for task, pool_task in zip(environment.rollout_tasks(tasks), tasks)]
    data_seconds = time.perf_counter() - start
    summary = train_sft(model_path, conversations, out_dir, config, progress=progress)
    return {**summary, "tasks": len(tasks), "data_seconds": round(data_seconds, 1)}
