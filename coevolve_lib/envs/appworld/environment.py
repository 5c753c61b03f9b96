"""The data engine on AppWorld: D_0, signal-guided rounds and the training pool, on AppWorld's own server.

The same stages as BFCL's (`engine.DataEngine`, `feedback.feedback_round`), with AppWorld's steps swapped in:

    D_0        unguided exploration of the start states of the `train` split's tasks (`appworld_explore`)
    round      signal trajectories -> context -> re-exploration -> abstraction (query + >= 3 API calls, and the answer
               when every call only reads) -> validation by AppWorld's evaluator (`appworld_tasks`)
    pool       each accepted task is a real AppWorld task written under the run's own data root, so GRPO rollouts,
               their reward (AppWorld's evaluator: success = every test passes) and signals run as on official tasks

The data root: `APPWORLD_ROOT` (official data, docs/appworld.md) or, when it is unset, the synthetic world the kit
builds with AppWorld's own code (`envs/appworld_synthetic.py`). The official data is never written into: the run's
`appworld_root/` links its tasks and holds the synthesized ones (`appworld_tasks.overlay_root`).

Explorers: the offline one (`explore.explorer: schema`) or the paper's LLM explorer (`llm`, Figs. 9-10), with the
heuristic or the LLM context (Fig. 11). The abstraction is the deterministic one: the LLM abstraction and the judge
are BFCL-only so far (a profile asking for them on AppWorld is refused at load).
"""

from __future__ import annotations

import os
from pathlib import Path

from coevolve_lib.envs.appworld.agent import AppWorldEpisodes
from coevolve_lib.envs.appworld.explore import abstract_appworld, explore_appworld, make_appworld_explorer
from coevolve_lib.envs.appworld.validation import overlay_root, validate_appworld, write_tasks
from coevolve_lib.core.config import DataEngineConfig
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.envs.appworld.benchmark import AppWorldTask, load_task, load_tasks
from coevolve_lib.envs.appworld.client import AppWorldServerError
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig
from coevolve_lib.engine.feedback import RoundSteps, synthesize_initial

SOURCE_SPLIT = "train"
"""The AppWorld split whose tasks' start states D_0 explores (never their instructions or answers)."""
APPS_CODE = 'print(",".join(p["account_name"] for p in apis.supervisor.show_account_passwords()))'
"""What a task's apps are: those its supervisor has an account in (AppWorld's tasks name no apps of their own)."""


def appworld_source_root() -> Path:
    """The AppWorld data root runs read: APPWORLD_ROOT (official data), else the synthetic world (built on first use,
    about 40 s)."""
    if os.environ.get("APPWORLD_ROOT"):
        return Path(os.environ["APPWORLD_ROOT"])
    from coevolve_lib.envs.appworld.synthetic import build_synthetic_world

    return build_synthetic_world().root


class AppWorldDataEngine(DataEngine):
    """One run folder of the data engine on AppWorld (see the module docstring). It owns one server for exploration
    and validation and an `AppWorldEpisodes` (a server per live episode) for rollouts; `close()` stops them."""

    def __init__(self, config: DataEngineConfig, run_dir: str | Path, source_root: str | Path | None = None):
        super().__init__(config, run_dir)
        self.source_root = Path(source_root) if source_root else appworld_source_root()
        self.root = overlay_root(self.source_root, self.run_dir)
        self._server: AppWorldServer | None = None
        self._api_docs: dict | None = None
        self._episodes: AppWorldEpisodes | None = None

    # -- the environment ---------------------------------------------------------------------------------------
    def server(self) -> AppWorldServer:
        """The engine's server (started on first use, restarted if it died)."""
        if self._server is None:
            self._server = AppWorldServer(AppWorldServerConfig(root=self.root))
            self._server.start()
        else:
            self._server.ensure_running()
        return self._server

    def api_docs(self) -> dict:
        if self._api_docs is None:
            self._api_docs = self.server().client.api_docs()
        return self._api_docs

    def environment(self) -> dict:
        synthetic = (self.source_root / "world.json").exists()  # the synthetic world's marker (appworld_synthetic)
        return {"benchmark": "appworld", "data_root": str(self.source_root),
                "data": "synthetic world" if synthetic else "official"}

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._episodes is not None:
            self._episodes.close()
            self._episodes = None

    def task_apps(self, task_id: str) -> list[str]:
        """The apps of a task's start state (its supervisor's accounts), asked of the server."""
        client = self.server().client
        client.initialize(task_id, experiment_name="coevolve_apps")
        try:
            output = client.execute(task_id, APPS_CODE)
        finally:
            client.close(task_id)
        return [app for app in output.strip().split(",") if app]

    def target(self, task: AppWorldTask) -> ExplorationTarget:
        """An unguided exploration target: the task's start state and its apps (the instruction is only context)."""
        return ExplorationTarget(task.task_id, "appworld", {"appworld_task": task.task_id},
                                 self.task_apps(task.task_id), task.instruction)

    # -- the data engine's stages ------------------------------------------------------------------------------
    def environments(self, part: str) -> list:
        """The `train` split's tasks (their start states) for the pool; the warm start is BFCL-only (none here)."""
        return load_tasks(SOURCE_SPLIT, self.root) if part == "pool" else []

    def initial_pool(self, progress: bool = True) -> dict:
        return synthesize_initial(self.environments("pool"), self.pool, self.run_dir / "round_000",
                                  self.feedback_config(), size=self.config.d0_size, model=self.explorer_model,
                                  progress=progress, steps=self.round_steps(), target=self.target)

    def round_steps(self) -> RoundSteps:
        return RoundSteps(explore=self._explore, abstract=self._abstract, validate=self._validate,
                          prepare_validation=self._write)

    def _explore(self, target, config, model):
        return explore_appworld(target, config, model,
                                make_appworld_explorer(config, model, self.server, self.api_docs()))

    def _abstract(self, group_key, triplets, source, config, model):
        return abstract_appworld(group_key, triplets, source, config, self.api_docs())

    def _write(self, specs: list[dict]) -> None:
        write_tasks(self.root, specs, self.api_docs())

    def _validate(self, spec, config, model, known_task_ids):
        try:
            return validate_appworld(spec, config, self.server(), self.api_docs(), self.root, known_task_ids)
        except AppWorldServerError:  # a server that died mid-validation: restart it and judge the spec again
            return validate_appworld(spec, config, self.server(), self.api_docs(), self.root, known_task_ids)

    # -- rollouts of pool tasks --------------------------------------------------------------------------------
    def rollout_tasks(self, tasks: list[dict]) -> list[AppWorldTask]:
        """Pool tasks as the AppWorld tasks written for them (the pool task id is the AppWorld task id)."""
        return [load_task(task["task_id"], self.root) for task in tasks]

    def episodes(self) -> AppWorldEpisodes:
        """`run_rollouts`' episode factory; its first server is the engine's own (idle while rollouts run: a server
        costs ~12 s of CPU to start and load its first task)."""
        if self._episodes is None:
            self._episodes = AppWorldEpisodes(self.root, split="pool", servers=[self.server()]).__enter__()
        return self._episodes
