"""AppWorld episodes for the kit's rollout loop (`rollout.agent.run_rollouts(..., new_episode=AppWorldEpisodes(...))`);
the TGC / SGC evaluation of a split is `envs/appworld/evaluate.py`.

The protocol (AppWorld's own agents' style, docs/appworld.md): the system message explains the code-action protocol
and lists the apps' APIs; the user message is the supervisor and the task's instruction. Every reply must hold one
```python block calling `apis.<app>.<api>(...)`; the kit only extracts it, and AppWorld's server runs it in the
kit's OS-level sandbox (`AppWorldEnv.step`); what it printed comes back as the next user message. The episode ends
when the agent calls `apis.supervisor.complete_task(...)`, at the step cap (`rollout.max_steps_per_episode`,
the paper's 30; a reply without code spends a step too), at the token cap, at an episode budget
(`core.config.EpisodeBudget`; a code block is one call), on a model error, or on a fault its code caused.

Servers: `AppWorldEpisodes` owns a pool of AppWorld servers, each in its OS-level sandbox (`server.py`), one per live
episode (so `rollout.batch_size` bounds them), started when first needed and reused by the next episode unless
the last one's code left it worn (`AppWorldServer.recycle_reason`: then it is restarted first).

Faults: a server that dies (`os.abort()`, a limit that kills it) or hangs past the execution budget (a loop that
outlives AppWorld's time-out) while it holds the policy's code, or that the code leaves running processes or spinning
threads in, is the policy's failure (`CODE_FAULTS`): the episode ends (reward 0, counted in TGC / SGC, trained on)
and the server is recycled. Faults the code did not cause are environment errors: starting the server, loading the
task, a refusal (AppWorld refuses a request for a task it does not hold before running any code), a server found
exited between two replies. Then the server is restarted and the episode starts over from `reset()` once, with a
fresh conversation; a second failure ends it with `environment_error=True` and `error_type="environment:<kind>"`:
TGC leaves such a record out and SGC its scenario (`benchmark.py`), and the evaluation reports their count apart.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

from coevolve_lib.core.models import Generation
from coevolve_lib.envs.appworld.benchmark import (
    AppWorldEnv,
    AppWorldEnvConfig,
    AppWorldTask,
    data_root,
    extract_code,
    positive_reward,
    scenario_id,
)
from coevolve_lib.envs.appworld.calls import code_api_names
from coevolve_lib.envs.appworld.client import AppWorldServerError
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig, appworld_python
from coevolve_lib.rollout.agent import ROLLOUT_SCHEMA, Conversation, RolloutPhase

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """\
You are an AI assistant who completes tasks for your supervisor by writing Python code that calls the APIs of the \
apps on their phone (AppWorld).

How to work:
- Each reply holds exactly one ```python fenced code block. The code runs in a persistent Python shell (variables \
stay defined between replies) where `apis.<app>.<api>(...)` calls an app's API. What the code prints comes back to \
you as the next message, so print what you need to see.
- Look APIs up with `apis.api_docs.show_api_descriptions(app_name=...)` and \
`apis.api_docs.show_api_doc(app_name=..., api_name=...)`.
- Log in to an app with the supervisor's passwords from `apis.supervisor.show_account_passwords()`.
- When the task is done, call `apis.supervisor.complete_task()`; if the task asks for information, pass it: \
`apis.supervisor.complete_task(answer=...)`.
- You have at most {max_steps} replies."""

USER_PROMPT = """\
My name is {first_name} {last_name}. My email is {email} and my phone number is {phone_number}. It is {datetime}.
Task: {instruction}"""

EMPTY_OUTPUT = "(the code ran and printed nothing)"
CODE_FAULTS = ("server_crash", "execution_hang", "left_running")
"""How the policy's code can end an episode as its own failure (`terminated`, `error_type` `agent:<cause>`): the
server died or refused while it held the code (`os.abort()`, a limit that kills), gave no answer past the execution
budget (a loop that outlives AppWorld's time-out), or was left running processes or spinning threads. Reward 0,
counted in TGC / SGC."""


def code_fault_cause(error: AppWorldServerError) -> str | None:
    """The `CODE_FAULTS` cause of a server failure met while the server held the policy's code, or None when the
    code did not cause it: a refusal (AppWorld refuses a request for a task it does not hold before running any code)
    or an answer AppWorld never gives."""
    return {"timeout": "execution_hang", "down": "server_crash"}.get(error.kind)


def api_list(api_docs: dict) -> str:
    """One line per app naming its APIs (`app: api, api, ...`), from the server's `{app: {api: doc}}`: a compact map
    for the prompt; the agent reads an API's parameters with `apis.api_docs.show_api_doc`."""
    return "\n".join(f"- {app}: {', '.join(apis)}" for app, apis in api_docs.items())


def system_prompt(max_steps: int, apis: str | None) -> str:
    text = SYSTEM_PROMPT.format(max_steps=max_steps)
    return text if not apis else f"{text}\n\nApps and their APIs:\n{apis}"


def user_prompt(task: AppWorldTask) -> str:
    return USER_PROMPT.format(**task.supervisor, datetime=task.datetime, instruction=task.instruction)


class AppWorldEpisode(Conversation):
    """One rollout of one AppWorld task on one server: the conversation, the env, and the record being built.

    The prompt comes from the task's own specs, so a server failure at `reset()` still leaves a well-formed
    conversation (run_rollouts asks for a first reply before it checks `done`; that reply is then dropped)."""

    def __init__(self, task: AppWorldTask, sample_index: int, config: RolloutPhase, server: AppWorldServer,
                 release, split: str, apis: str | None, env_config: AppWorldEnvConfig, retries: int = 1):
        super().__init__(config)
        self.task, self.sample_index, self.split = task, sample_index, split
        self.server, self._release, self.retries = server, release, retries
        execution_timeout_s = min(env_config.execution_timeout_s, config.settings.budget.max_execution_seconds)
        self.env = AppWorldEnv(task, server, replace(env_config, max_steps=config.settings.max_steps_per_episode,
                                                     max_output_chars=config.settings.budget.max_observation_chars,
                                                     execution_timeout_s=execution_timeout_s))
        self.prompt = [{"role": "system", "content": system_prompt(config.settings.max_steps_per_episode, apis)},
                       {"role": "user", "content": user_prompt(task)}]
        self.messages = list(self.prompt)
        self.steps: list[dict] = []
        self.attempts = 1
        self.faults: list[dict] = []  # every AppWorldServerError met, in order
        self.code_ran = False  # the policy's code ran on the server in this attempt: its faults are the policy's
        self.code_fault: dict | None = None
        self.model_error: str | None = None
        self.env_seconds = 0.0
        self._start_attempt()

    def _start_attempt(self) -> None:
        """(Start the server and) load the task's start state; a server failure goes to `_recover`."""
        while True:
            start = time.perf_counter()
            try:
                if self.server.process is None:
                    self.server.start()
                self.env.reset()
                return
            except AppWorldServerError as error:
                if not self._recover(error):
                    return
            finally:
                self.env_seconds += time.perf_counter() - start

    def _recover(self, error: AppWorldServerError) -> bool:
        """Note the fault and restart the server; True when the episode starts over from `reset()` with a fresh
        conversation (the first `retries` faults), False when it ends as an environment error."""
        self.faults.append({"attempt": self.attempts, "step": len(self.steps), "kind": error.kind,
                            "message": str(error)[:2000]})
        log.warning("task %s, attempt %d: AppWorld server failed (%s): %s", self.task.task_id, self.attempts,
                    error.kind, str(error).splitlines()[0])
        try:
            self.server.ensure_running()
        except AppWorldServerError as restart_error:
            self.faults.append({"attempt": self.attempts, "step": len(self.steps), "kind": restart_error.kind,
                                "message": str(restart_error)[:2000]})
            self.terminated = "environment_error"
            return False
        if self.attempts > self.retries:
            self.terminated = "environment_error"
            return False
        self.attempts += 1
        # A fresh conversation: the record and the token ids describe the last attempt only; the token counts and
        # seconds keep adding up (they are what the episode cost).
        self.messages, self.steps = list(self.prompt), []
        self.prompt_ids, self.completion_ids, self.completion_mask, self.rendered = None, [], [], 0
        self.terminated, self.code_ran = None, False
        return True

    def feed(self, generation: Generation) -> None:
        """Take the model's reply: run its code block on the server (or count a format error), append the output as
        the next user message, and end the episode on completion, a cap, a model error or a second server failure."""
        if self.terminated == "environment_error":  # the server failed at reset(): this reply was never wanted
            return
        self.take_tokens(generation)
        if generation.error:
            self.messages.append({"role": "assistant", "content": ""})
            self.terminated, self.model_error = "model_error", generation.error
            return
        text = self.kept_reply(generation.text)
        self.messages.append({"role": "assistant", "content": text})
        # The completion or reply cap: the reply is kept in the ids and messages but not executed; one code block is
        # one call of the episode budget.
        if self.terminated or not self.admit_calls(1):
            return
        code = extract_code(text)
        if code is not None and not self.server.running():  # down before this step: not this code's doing
            self._server_died_between_steps()
            return
        self.code_ran = self.code_ran or code is not None
        start = time.perf_counter()
        fault = None
        try:
            threads = self.server.footprint().threads if code is not None else 0
            output = self.env.step(text)
            if code is not None:
                # AppWorld may start a thread of its own on an execution; one left spinning is the code's
                after = self.server.footprint()
                leftovers = self.server.leftovers(after)
                if not leftovers and after.threads > threads and self.server.busy_while_idle():
                    leftovers = "the code left threads running (spinning) in the AppWorld server after its execution"
                if leftovers:
                    fault = ("left_running", leftovers)
        except AppWorldServerError as error:
            if not code_fault_cause(error):  # refused before the code ran, or an answer AppWorld never gives
                if self._recover(error):
                    self._start_attempt()
                return
            output, fault = "", (code_fault_cause(error), str(error))  # the server died or hung holding the code
        finally:
            self.env_seconds += time.perf_counter() - start
        if fault:
            self._code_fault(*fault)
        elif self.env.timed_out:
            self._end("time_cap")
        output, = self.kept_observations([output])
        # What signals and contexts read: `calls`, the APIs the code names (read as text), and one observation per
        # call; the block's output is one text, given to its last call.
        calls = code_api_names(code)
        self.steps.append({"step": len(self.steps), "raw": text, "code": code, "output": output,
                           "calls": calls, "observations": [""] * (len(calls) - 1) + [output] if calls else []})
        if fault:
            return
        self.messages.append({"role": "user", "content": output or EMPTY_OUTPUT})
        if self.terminated:  # an episode budget
            return
        if self.env.completed:
            self.terminated = "completed"
        elif self.env.done:
            self.terminated = "episode_step_cap"

    def _server_died_between_steps(self) -> None:
        """The server exited while it waited for this reply, holding no code: an environment fault (the episode
        starts over once)."""
        message = (f"the AppWorld server at {self.server.client.address} exited between two replies\n--- end of the "
                   f"server log ---\n{self.server.log_tail()}")
        if self._recover(AppWorldServerError(message, "down")):
            self._start_attempt()

    def _code_fault(self, cause: str, message: str) -> None:
        """End the episode as the policy's failure: its code crashed or hung the server, or left processes in it.
        The server is recycled (its sandbox killed, a fresh one started) so that the next episode meets a clean
        one; a failure to restart is met by the next episode's start."""
        self.terminated = cause
        self.code_fault = {"step": len(self.steps), "cause": cause, "message": message[:2000]}
        log.warning("task %s: the policy's code ended the episode (%s): %s", self.task.task_id, cause,
                    message.splitlines()[0] if message else "")
        start = time.perf_counter()
        try:
            self.server.restart()
        except AppWorldServerError:
            pass
        finally:
            self.env_seconds += time.perf_counter() - start

    def record(self, model_name: str) -> dict:
        """Score the episode with AppWorld's tests (caps and model errors fail it), release the server, and return
        the trajectory record. A server failure while scoring is the code's fault (`CODE_FAULTS`) or an environment
        error, by the rule of the module docstring."""
        score = None
        if self.terminated != "environment_error" and self.terminated not in CODE_FAULTS:
            start = time.perf_counter()
            was_running = self.server.running()
            try:
                score = self.env.score()
                self.env.close()
            except AppWorldServerError as error:
                # The state AppWorld scores is what the code left: a server that dies or hangs scoring it is the
                # code's; one that had exited before, or refuses, is the environment's (as between two steps).
                if score is None and self.code_ran and was_running and code_fault_cause(error):
                    self._code_fault(code_fault_cause(error), str(error))
                elif score is None:
                    self.faults.append({"attempt": self.attempts, "step": len(self.steps), "kind": error.kind,
                                        "message": str(error)[:2000]})
                    self.terminated = "environment_error"
                try:
                    self.server.ensure_running()
                except AppWorldServerError:
                    pass  # the pool restarts it before its next episode
            self.env_seconds += time.perf_counter() - start
        self._release(self.server)
        environment_error = self.terminated == "environment_error"
        if environment_error and not self.faults:  # the rollout loop caught what this episode's code raised
            self.faults.append({"attempt": self.attempts, "step": len(self.steps), "kind": "exception",
                                "message": str(self.environment_error)[:2000]})
        success = bool(score and score["success"]) and self.terminated == "completed"
        if environment_error:
            error_type = f"environment:{self.faults[-1]['kind']}"
        elif self.code_fault:
            error_type = f"agent:{self.code_fault['cause']}"
        elif self.terminated != "completed":
            error_type = f"agent:{self.terminated}"
        else:
            error_type = None if success else "appworld:tests_failed"
        pass_fraction = score["pass_fraction"] if score else 0.0
        return {
            "schema": ROLLOUT_SCHEMA,
            "task_id": self.task.task_id,
            "task_source": f"appworld:{self.split}",
            "scenario_id": scenario_id(self.task.task_id),
            "sample_index": self.sample_index,
            "model": model_name,
            "tool_format": "code",
            "messages": self.messages,
            "steps": self.steps,
            "score": 1.0 if success else 0.0,
            "success": success,
            "pass_fraction": pass_fraction,
            "positive_reward": bool(score) and positive_reward(score),
            "num_tests": score["num_tests"] if score else 0,
            "passes": score["passes"] if score else [],
            "failures": score["failures"] if score else [],
            "error_type": error_type,
            "error_message": self.model_error or (self.faults[-1]["message"] if environment_error else None)
            or (self.code_fault["message"] if self.code_fault else None),
            "terminated": self.terminated,
            "format_errors": self.env.format_errors,
            "environment_error": environment_error,
            "environment_faults": self.faults,
            "code_fault": self.code_fault,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model_seconds": round(self.model_seconds, 4),
            "env_seconds": round(self.env_seconds, 4),
            **self.token_fields(),
        }


class AppWorldEpisodes:
    """Makes AppWorld episodes for `run_rollouts(..., new_episode=episodes)` and owns their servers; a context
    manager that stops the servers it started:

        with AppWorldEpisodes(root, split="dev") as episodes:
            records = run_rollouts(model, load_tasks("dev", root), config, new_episode=episodes)

    Each live episode holds its own server (AppWorld's server holds one task at a time); a server goes back to the
    pool when its episode is recorded, so the pool never grows past the number of live episodes
    (`rollout.batch_size`; ~250 MB of memory each). `servers`: already started servers to use first
    (e.g. a test's); they are not stopped on exit."""

    def __init__(self, root: str | Path | None = None, split: str = "dev", servers: list[AppWorldServer] = (),
                 server_config: AppWorldServerConfig | None = None, env_config: AppWorldEnvConfig | None = None,
                 retries: int = 1):
        """`root`: the data root (else APPWORLD_ROOT); `split`: the tasks' split, for the records' `task_source`;
        `retries`: episode restarts after a server failure before it is recorded as an environment error."""
        self.root = data_root(root)
        self.split, self.retries = split, retries
        self.server_config = server_config or AppWorldServerConfig(root=self.root)
        self.env_config = env_config or AppWorldEnvConfig()
        self.idle: list[AppWorldServer] = list(servers)
        self.owned: list[AppWorldServer] = []
        self.apis: str | None = None

    def __enter__(self) -> AppWorldEpisodes:
        """Fail now, in one line, when AppWorld is not installed or the root has no data, not inside a rollout."""
        appworld_python(self.server_config.venv)
        if not (self.root / "data").is_dir():
            raise FileNotFoundError(f"{self.root} has no data/ folder: the AppWorld data root is the folder that "
                                    "contains data/ (docs/appworld.md)")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for server in self.owned:
            server.stop()
        self.idle = [server for server in self.idle if server not in self.owned]
        self.owned = []

    def _acquire(self) -> AppWorldServer:
        """An idle server (restarted if it died since), else a new one, started by the episode's first reset."""
        if self.idle:
            server = self.idle.pop()
            if server.process is not None:
                try:
                    reason = server.recycle_reason()
                    if reason:  # what the last episode's code left behind must not slow or touch this one
                        log.info("recycling the AppWorld server at %s: %s", server.client.address, reason)
                        server.restart()
                    else:
                        server.ensure_running()
                except AppWorldServerError:
                    pass  # the episode's start meets the failure and handles it
            return server
        server = AppWorldServer(self.server_config)
        self.owned.append(server)
        return server

    def _release(self, server: AppWorldServer) -> None:
        self.idle.append(server)

    def __call__(self, task: AppWorldTask, sample_index: int, tool_format: str | None = None,
                 config: RolloutPhase | None = None) -> AppWorldEpisode:
        """A new episode (`run_rollouts`' `new_episode`); `tool_format` is ignored: actions are code blocks. The
        system prompt lists every app's API names (read once from a server) unless `config.settings.tool_docs` is
        `none`."""
        config = config or RolloutPhase()
        server = self._acquire()
        listed = config.settings.tool_docs != "none"
        if listed and self.apis is None:
            try:
                if server.process is None:
                    server.start()
                self.apis = api_list(server.client.api_docs())
            except AppWorldServerError as error:  # the episode meets it again and handles it; the prompt goes on
                log.warning("AppWorld's api_docs could not be read (%s); the prompt lists no APIs", error.kind)
        return AppWorldEpisode(task, sample_index, config, server, self._release, self.split,
                               self.apis if listed else None, self.env_config, self.retries)
