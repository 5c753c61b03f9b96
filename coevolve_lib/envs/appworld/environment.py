"""AppWorld behind the `Environment` seam: D_0, signal-guided rounds and the training pool, on AppWorld's own server.

The data engine's stages (`engine.data_engine.DataEngine`, `engine.feedback.feedback_round`) with AppWorld's steps:

    D_0        unguided exploration of the start states of the `train` split's tasks (`explore`)
    round      signal trajectories -> context -> re-exploration -> abstraction (query + >= 3 API calls, and the answer
               when every call only reads) -> validation by AppWorld's evaluator (`validation`)
    pool       each accepted task is a real AppWorld task written under the run's own data root, so GRPO rollouts,
               their reward (AppWorld's evaluator: success = every test passes) and signals run as on official tasks

The data root: the profile's `environment.root` or `APPWORLD_ROOT` (official data, docs/appworld.md) or, when neither
is set, the synthetic world the kit builds with AppWorld's own code (`synthetic.py`). The official data is never
written into: the run's `appworld_root/` links its tasks and holds the synthesized ones (`validation.overlay_root`).

Explorers: the offline one (`explore.explorer: schema`) or the paper's LLM explorer (`llm`, Figs. 9-10), with the
heuristic or the LLM context (Fig. 11). Abstraction: the paper's LLM one (Fig. 12, with the answer rule AppWorld's
evaluator needs) or the deterministic one (`abstraction`); the Fig. 13 judge may then reject a task AppWorld's evaluator
accepted (`validation`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import field, replace
from pathlib import Path
from typing import Literal

from pydantic.dataclasses import dataclass as settings_dataclass

from coevolve_lib.core.config import STRICT, RunError, WarmStartConfig
from coevolve_lib.core.environment import Environment, RoundStages
from coevolve_lib.core.records import copy_tree_atomic
from coevolve_lib.core.sandbox import SandboxConfig
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import explore_target
from coevolve_lib.engine.warm_start import cached_warm_start
from coevolve_lib.envs.appworld.abstraction import abstract_appworld
from coevolve_lib.envs.appworld.benchmark import AppWorldTask, load_task, load_tasks
from coevolve_lib.envs.appworld.calls import DATA_VERSION, api_tool_docs, is_failed_output
from coevolve_lib.envs.appworld.client import AppWorldServerError
from coevolve_lib.envs.appworld.episode import AppWorldEpisodes
from coevolve_lib.envs.appworld.evaluate import evaluate_appworld
from coevolve_lib.envs.appworld.explore import AppWorldReplay, make_appworld_explorer
from coevolve_lib.envs.appworld.rewards import format_reward, prefix_reward
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig
from coevolve_lib.envs.appworld.synthetic import build_synthetic_world, synthetic_identity, synthetic_start_states
from coevolve_lib.envs.appworld.validation import (
    accept_appworld_unvalidated,
    overlay_root,
    validate_appworld,
    write_tasks,
)
from coevolve_lib.envs.appworld.warm_start import (
    STANDIN_DATA,
    STANDIN_DATA_CONFIG,
    STANDIN_WARM_START,
    standin_conversations,
    warm_start,
    warm_start_recipe,
)

log = logging.getLogger(__name__)

APPWORLD_POOL_UPDATES = ("signals", "random", "none", "curriculum", "reflexion", "rest")
"""The pool updates wired for AppWorld: every one (ReST replays the calls of the policy's code: `AppWorldReplay`)."""
SOURCE_SPLITS = {"pool": "train", "unseen": "dev"}
"""Whose tasks' start states each kind of source is (`sources`): D_0, the rounds, the warm start and held-out set (a)
explore the train split's; the unseen-environment held-out set (b) the dev split's (nothing trains on it or explores
it)."""
APPS_CODE = 'print(",".join(p["account_name"] for p in apis.supervisor.show_account_passwords()))'
"""What a task's apps are: those its supervisor has an account in (AppWorld's tasks name no apps of their own)."""


@settings_dataclass(config=STRICT)
class AppWorldSettings:
    """AppWorld's own settings: the profile's `environment` section when `evaluation.environment_name` is `appworld`."""

    root: str | None = None
    """AppWorld's data root (the folder holding `data/`: official data, docs/appworld.md); None: $APPWORLD_ROOT,
    else the synthetic world the kit builds offline."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """How AppWorld's servers, which run the policy's code, are isolated (`core/sandbox.py`): "bwrap", the OS-level
    sandbox (refused in one line where it cannot run); "none", an opt-in without isolation (the code then runs as
    the kit's user, with its network and files: only for code you trust or a machine you can lose)."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised fine-tuning before RL on the reference code of synthetic AppWorld tasks (a kit addition,
    `envs/appworld/warm_start.py`; `tiny-appworld`'s policy starts from it)."""


def appworld_source_root(root: str | None = None) -> Path:
    """The AppWorld data root runs read: `root` (the profile's `environment.root`), else APPWORLD_ROOT (official
    data), else the synthetic world (built on first use, `synthetic.py`)."""
    root = root or os.environ.get("APPWORLD_ROOT")
    if root:
        return Path(root)
    return build_synthetic_world().root


class AppWorldEnvironment(Environment):
    """AppWorld for one run folder (see the module docstring). It owns one server for exploration and validation and
    an `AppWorldEpisodes` (a server per live episode) for rollouts; `close()` stops them. `source_root`: the data
    root (default: `appworld_source_root()`)."""

    name = "appworld"
    Settings = AppWorldSettings
    rewards = {**Environment.rewards, "prefix": prefix_reward, "format": format_reward}

    def __init__(self, config, run_dir: str | Path, source_root: str | Path | None = None):
        super().__init__(config, run_dir)
        self.source_root = Path(source_root) if source_root else appworld_source_root(self.settings.root)
        self._root: Path | None = None
        self._server: AppWorldServer | None = None
        self._api_docs: dict | None = None
        self._episodes: AppWorldEpisodes | None = None

    @property
    def root(self) -> Path:
        """The run's own data root (`validation.overlay_root`: the source's tasks linked, the synthesized ones
        written), made on first use."""
        if self._root is None:
            self._root = overlay_root(self.source_root, self.run_dir)
        return self._root

    # -- the server ----------------------------------------------------------------------------------------------
    def server_config(self, root: Path) -> AppWorldServerConfig:
        """How this run's servers run: on `root`, in the profile's sandbox (`environment.sandbox`)."""
        return AppWorldServerConfig(root=root, sandbox=SandboxConfig(mode=self.settings.sandbox))

    def server(self) -> AppWorldServer:
        """The environment's server (started on first use, restarted if it died, recycled between uses for what
        `AppWorldServer.recycle_reason` names: D_0 and the rounds load every task they validate into it)."""
        if self._server is None:
            self._server = AppWorldServer(self.server_config(self.root))
            self._server.start()
        elif not self._server.ensure_running():
            reason = self._server.recycle_reason()
            if reason is not None:
                log.info("recycling the AppWorld server at %s: %s", self._server.client.address, reason)
                self._server.restart()
        return self._server

    def api_docs(self) -> dict:
        if self._api_docs is None:
            self._api_docs = self.server().client.api_docs()
        return self._api_docs

    def describe(self) -> dict:
        return {"benchmark": self.name, "data_root": str(self.source_root), "data": self.data_identity()["data"]}

    def data_identity(self) -> dict:
        """What decides the tasks the data root holds: the synthetic world's builder version (the same world on every
        machine), else the official data's root."""
        if synthetic_start_states(self.source_root) is not None:
            return synthetic_identity()
        return {"data": "official", "data_root": str(self.source_root)}

    def heldout_identity(self) -> dict:
        return {"benchmark": self.name, **self.data_identity()}

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

    # -- where tasks come from -----------------------------------------------------------------------------------
    def sources(self, part: str) -> list[AppWorldTask]:
        """One task per start state of the split `SOURCE_SPLITS` names for `part` (only the start states are used,
        never the tasks' instructions or answers). In the synthetic world a household's tasks share a start state
        (`world.json`): its first task stands for it, so that each start state is explored once and a task
        abstracted from it has one `initial_config` (what the held-out leak guard compares); on official data every
        task is its own."""
        if part not in SOURCE_SPLITS:
            return []
        tasks = load_tasks(SOURCE_SPLITS[part], self.root)
        states = synthetic_start_states(self.source_root) or {}
        first = {}
        for task in tasks:
            first.setdefault(states.get(task.task_id, task.task_id), task)
        return list(first.values())

    def target(self, source: AppWorldTask) -> ExplorationTarget:
        """An unguided exploration target: the task's start state and its apps (the instruction is only context)."""
        return ExplorationTarget(source.task_id, self, DATA_VERSION, {"appworld_task": source.task_id},
                                 self.task_apps(source.task_id), source.instruction)

    # -- how a round runs ----------------------------------------------------------------------------------------
    def round_stages(self) -> RoundStages:
        return RoundStages(explore=self._explore, abstract=self._abstract, validate=self._validate,
                          prepare_validation=self._write, accept_unvalidated=self._accept_unvalidated,
                          replay=self._replay)

    def tool_docs(self, target) -> list[dict]:
        """The involved apps' API docs, named `app.api`."""
        return api_tool_docs(self.api_docs(), target.involved_classes)

    def is_error(self, observation: str) -> bool:
        return is_failed_output(observation)

    def _explore(self, target, config, model):
        return explore_target(target, config, model,
                              make_appworld_explorer(config, model, self.server, self.api_docs()))

    def _replay(self, target, config, model):
        """ReST's triplets: the policy's own calls run again, in one run (`AppWorldReplay`)."""
        replay = AppWorldReplay(self.server, self.api_docs())
        return None, replay.explore(target, None, replace(config, runs=1)), replay.cost.as_dict()

    def _abstract(self, group_key, triplets, source, config, model):
        return abstract_appworld(group_key, triplets, source, config, self.api_docs(), model)

    def _write(self, specs: list[dict], config) -> None:
        """Write a round's specs in one batch; without validation (Table 11) a reference that raises is written too."""
        write_tasks(self.root, specs, self.api_docs(), keep_failed=not config.validate)

    def _accept_unvalidated(self, spec, config, known_task_ids):
        return accept_appworld_unvalidated(spec, config, self.api_docs(), self.root, known_task_ids)

    def _validate(self, spec, config, model, known_task_ids):
        try:
            return validate_appworld(spec, config, self.server(), self.api_docs(), self.root, known_task_ids, model)
        except AppWorldServerError:  # a server that died mid-validation: restart it and judge the spec again
            return validate_appworld(spec, config, self.server(), self.api_docs(), self.root, known_task_ids, model)

    # -- the warm start (a kit addition: tiny-appworld's policy starts from it) -------------------------------------
    def warm_start_recipe(self) -> dict:
        cfg = self.config
        return warm_start_recipe(cfg.model, self.settings.warm_start, self.data_identity(),
                                 {"min_calls": cfg.synthesis.min_calls, "max_calls": cfg.synthesis.max_calls,
                                  "abstraction": cfg.synthesis.abstraction},
                                 {"max_steps_per_episode": cfg.rollout.max_steps_per_episode,
                                  "tool_docs": cfg.rollout.tool_docs})

    def warm_start(self, base: str, progress: bool = True, use_shipped: bool = True) -> str | None:
        """None when `warm_start.enabled` is off; else the warm start's model folder: the shipped copy of the profile
        when it was built from the same recipe, else the cached one, else built (minutes: docs/appworld.md)."""
        warm = self.settings.warm_start
        if not warm.enabled:
            return None
        return cached_warm_start(self.config.profile, self.warm_start_recipe(),
                                 lambda out: warm_start(base, self, out, warm, progress), use_shipped)

    @classmethod
    def format_warm_start(cls) -> tuple[WarmStartConfig, dict]:
        """The stand-ins' data: always the synthetic world's train households (whatever APPWORLD_ROOT says), so the
        recipe names its builder version."""
        return STANDIN_WARM_START, {**STANDIN_DATA, "data": synthetic_identity()}

    @classmethod
    def format_conversations(cls, work_dir: Path) -> list[dict]:
        environment = cls(STANDIN_DATA_CONFIG, work_dir, source_root=build_synthetic_world().root)
        try:
            return standin_conversations(environment)
        finally:
            environment.close()

    # -- rollouts of pool tasks ----------------------------------------------------------------------------------
    def install_tasks(self, pool_tasks: list[dict]) -> None:
        """Write into this run's data root the tasks another run folder validated (a cached held-out set): from their
        records, by AppWorld's code, in one writer run (the start states and the reference are the same, so the
        written task, its id included, is the same; it was validated when the set was built)."""
        specs = [{"spec_id": task["provenance"]["spec"], "query": task["query"],
                  "action_sequence": task["reference_actions"], "initial_config": task["initial_config"],
                  "answer_from": task.get("answer_from")}
                 for task in pool_tasks if not (self.root / "data" / "tasks" / task["task_id"]).exists()]
        if not specs:
            return
        written = write_tasks(self.root, specs, self.api_docs())
        for task in pool_tasks:
            record = written.get(task["provenance"]["spec"])
            if record is not None and not (record["written"] and record["task_id"] == task["task_id"]):
                raise RunError(f"AppWorld task {task['task_id']} could not be written again in {self.root} "
                               f"({record['error'] or 'it got id ' + record['task_id']}): delete the held-out set's "
                               "cache folder (.cache/heldout/) to build it again")

    def copy_tasks(self, pool_tasks: list[dict], run_dir: Path) -> None:
        """Copy the task folders `run_dir`'s data root holds for `pool_tasks` into this run's (the same start states
        and references give the same folders, `install_tasks`: a file copy instead of AppWorld's writer, 20-30 s for
        a 32-task D_0); a task that run no longer holds is written."""
        source = Path(run_dir) / self.root.name / "data" / "tasks"
        for task in pool_tasks:
            target = self.root / "data" / "tasks" / task["task_id"]
            if (source / task["task_id"] / "ground_truth").is_dir() and not target.exists():
                copy_tree_atomic(source / task["task_id"], target)
        self.install_tasks(pool_tasks)

    def rollout_tasks(self, pool_tasks: list[dict]) -> list[AppWorldTask]:
        """Pool tasks as the AppWorld tasks written for them (the pool task id is the AppWorld task id)."""
        return [load_task(task["task_id"], self.root) for task in pool_tasks]

    def episodes(self) -> AppWorldEpisodes:
        """The episode factory; its first server is the environment's own (idle while rollouts run: a server costs
        ~12 s of CPU to start and load its first task)."""
        if self._episodes is None:
            self._episodes = AppWorldEpisodes(self.root, split="pool", servers=[self.server()],
                                              server_config=self.server_config(self.root)).__enter__()
        return self._episodes

    def new_episode(self, task, sample_index: int, tool_format: str, config):
        return self.episodes()(task, sample_index, tool_format, config)

    # -- the benchmark's metric ----------------------------------------------------------------------------------
    def evaluate(self, model, evaluation, out, rollout, experiment: str, progress: bool = False) -> dict:
        """TGC (the first row) and SGC on `evaluation.split`: of the run's own root and with its servers once the run
        has one (training), else of the source data root with servers of its own (`python -m coevolve_lib
        evaluate`)."""
        own = self._root is not None
        root = self.root if own else self.source_root
        return evaluate_appworld(model, evaluation.split, root, rollout, out=out, limit=evaluation.limit,
                                 profile=evaluation.profile, experiment=experiment,
                                 episodes=self.episodes() if own else None, server_config=self.server_config(root),
                                 progress=progress, synthetic=self.data_identity()["data"] != "official")

    @classmethod
    def plan(cls, run) -> tuple[dict, list[str]]:
        given, split = AppWorldSettings(**run.environment).root, run.evaluation.split
        root = given or os.environ.get("APPWORLD_ROOT")
        benchmark = {"name": cls.name, "split": split,
                     "data": (f"environment.root={given}" if given else f"APPWORLD_ROOT={root}" if root
                              else "the synthetic world (neither environment.root nor APPWORLD_ROOT is set)"),
                     "setup": "make appworld (AppWorld's venv); official data: docs/appworld.md"}
        notes = [] if root or split in ("train", "dev") else [
            f"no AppWorld data root is set and the synthetic world has no {split!r} split: point environment.root "
            "(or APPWORLD_ROOT) at AppWorld's official data (docs/appworld.md)"]
        return benchmark, notes

    @classmethod
    def check(cls, run) -> list[str]:
        """What the AppWorld environment supports so far: both explorers and context builders, both abstractions
        and the judge, with validation, both held-out sets, its rewards (binary, prefix, format) and the pool updates
        of APPWORLD_POOL_UPDATES."""
        data, problems, needs = run.data_engine, [], []
        if run.evaluation.split in ("val", "all"):
            problems.append(f"evaluation.split {run.evaluation.split!r} is a BFCL split; AppWorld's are its dataset "
                            "files: dev, test_normal, test_challenge (the synthetic world: train, dev)")
        if AppWorldSettings(**run.environment).warm_start.enabled and data.heldout.new_tasks.size:
            needs.append("data_engine.heldout.new_tasks.size=0 with the warm start on (it explores the pool's start "
                         "states, and its data is not screened against held-out set (a): docs/appworld.md)")
        if data.d0_source_split != SOURCE_SPLITS["pool"]:
            needs.append("data_engine.d0_source_split=train (D_0 explores AppWorld's train split)")
        if run.training.pool_updates not in APPWORLD_POOL_UPDATES:
            needs.append(f"training.pool_updates in {list(APPWORLD_POOL_UPDATES)}")
        if needs:
            problems.append("evaluation.environment_name=appworld needs " + "; ".join(needs))
        return problems
