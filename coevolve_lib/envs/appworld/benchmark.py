"""AppWorld tasks, an episode API over AppWorld's own environment server, and the paper's TGC / SGC metrics.

The agent's action is Python code calling `apis.<app>.<api>(...)`, sent as a fenced ```python block in the model's
reply. The kit only extracts that block (`extract_code`); the code runs inside AppWorld's server, in the kit's
OS-level sandbox around it (`server.py`), never in the kit. The same code path serves the official data
(APPWORLD_ROOT = the folder with AppWorld's downloaded `data/`, docs/appworld.md) and the synthetic world the tests
build (`synthetic.py`).

Errors of the server (down, hung, refusing) raise `AppWorldServerError` out of every call: count them as environment
errors, never as policy failures; `AppWorldServer.ensure_running()` then restarts it and the episode is retried from
`reset()`.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.text_blocks import iter_blocks
from coevolve_lib.envs.appworld.server import AppWorldServer

MAX_STEPS = 30
"""The paper's cap on environment steps per AppWorld episode; exceeding it counts as a failure."""

NO_CODE_OBSERVATION = ("No code was executed: the reply has no ```python fenced code block. Reply with exactly one "
                       "block:\n```python\n# code calling apis.<app>.<api>(...)\n```")
"""The observation for a reply without a code block (a format error the env counts, and a step spent)."""

# The opening fence: the language's trailing blanks sit inside its optional group, so that no two `[ \t]*` share a
# run of blanks (`[ \t]*(?:python|py)?[ \t]*` would try every split of it: quadratic in the run).
_FENCE_OPEN = re.compile(r"```[ \t]*(?:(?:python|py)[ \t]*)?\n", re.IGNORECASE)
_FENCE_CLOSE = re.compile("```")


def extract_code(reply: str) -> str | None:
    """The first fenced code block of a model reply (```python, ```py or a bare ```), None if it has none. The code is
    data here: only AppWorld's server, in its sandbox, runs it. Linear time (`core.text_blocks`)."""
    for start, end in iter_blocks(reply, _FENCE_OPEN, _FENCE_CLOSE):
        return reply[start.end():end.start()].strip()
    return None


def scenario_id(task_id: str) -> str:
    """AppWorld names tasks `<scenario>_<n>` (the scenario's generator id, then the task's number in it)."""
    return task_id.rsplit("_", 1)[0]


def data_root(root: str | Path | None = None) -> Path:
    """The AppWorld data root (the folder containing `data/`): `root`, else the APPWORLD_ROOT environment variable."""
    if root is None:
        root = os.environ.get("APPWORLD_ROOT")
        if not root:
            raise ValueError("no AppWorld data root: pass one or set APPWORLD_ROOT to the folder containing data/ "
                             "(docs/appworld.md)")
    return Path(root)


def load_task_ids(split: str, root: str | Path | None = None) -> list[str]:
    """Task ids of a split, from `<root>/data/datasets/<split>.txt` (official: train, dev, test_normal,
    test_challenge). A `:tag` suffix on a line (AppWorld's dataset tags) is dropped, as AppWorld does."""
    path = data_root(root) / "data" / "datasets" / f"{split}.txt"
    if not path.exists():
        available = sorted(p.stem for p in path.parent.glob("*.txt"))
        raise FileNotFoundError(f"no AppWorld split {split!r} ({path} is missing); splits there: {available}")
    return [line.split(":")[0].strip() for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class AppWorldTask:
    """One AppWorld task, read from its `specs.json` (the server reads the same file when it initializes the task)."""

    task_id: str
    instruction: str
    supervisor: dict
    """The user the agent works for: first_name, last_name, email, phone_number (AppWorld's prompts show them)."""
    datetime: str
    """The task's frozen date and time (ISO format), as AppWorld sets it in the task's world."""

    @property
    def scenario_id(self) -> str:
        return scenario_id(self.task_id)

    @property
    def id(self) -> str:
        """The task id, as every environment's sources name theirs (`Environment.sources`)."""
        return self.task_id


def load_task(task_id: str, root: str | Path | None = None) -> AppWorldTask:
    path = data_root(root) / "data" / "tasks" / task_id / "specs.json"
    if not path.exists():
        raise FileNotFoundError(f"no AppWorld task {task_id!r} ({path} is missing)")
    specs = json.loads(path.read_text())
    supervisor = specs.get("supervisor", specs.get("main_user"))  # AppWorld reads the old key too
    fields = ("first_name", "last_name", "email", "phone_number")  # what the server's initialize returns
    return AppWorldTask(task_id=task_id, instruction=specs["instruction"],
                        supervisor={key: supervisor[key] for key in fields}, datetime=specs["datetime"])


def load_tasks(split: str, root: str | Path | None = None) -> list[AppWorldTask]:
    return [load_task(task_id, root) for task_id in load_task_ids(split, root)]


EXECUTION_GRACE_S = 20
"""How much longer than AppWorld's own time-out the client waits for an execution's answer (AppWorld answers within
a second of it: 2.02 s for a busy loop under a 2 s limit)."""


@dataclass
class AppWorldEnvConfig:
    """How an AppWorld episode runs."""

    max_steps: int = MAX_STEPS
    """Environment steps (code executions, replies without code included) before the episode ends as a failure."""
    execution_timeout_s: int = 100
    """AppWorld's own limit on one code execution (its `timeout_seconds`; its default): it interrupts the code and
    answers "Execution timed out" (`timed_out`). The client waits `EXECUTION_GRACE_S` longer for that answer, then
    gives up (code that caught the interrupt): a server fault. The policy's episodes set it to their budget's
    `max_execution_seconds` when that is lower."""
    experiment_name: str = "coevolve"
    """AppWorld's experiment name: where, inside the server's scratch root, it writes the episode's outputs."""
    random_seed: int = 100
    """AppWorld's seed for the task's world (its default)."""
    max_output_chars: int | None = None
    """Most characters of one execution's output the kit reads from the server (`AppWorldClient.execute`): a longer
    one comes back cut a little past it. The policy's episodes set it to their observation budget, which then ends
    the episode (`observation_cap`); None reads all."""


class AppWorldEnv:
    """One episode of one task on one server: `reset()`, then `step(reply)` (or `execute(code)`) until `done`, then
    `score()`. The server holds one task at a time, so one env runs on a server at a time."""

    def __init__(self, task: AppWorldTask, server: AppWorldServer, config: AppWorldEnvConfig | None = None):
        self.task = task
        self.server = server
        self.config = config or AppWorldEnvConfig()
        self.steps = 0
        self.format_errors = 0
        self.completed = False
        self.timed_out = False

    def reset(self) -> dict:
        """Load the task's start state into the server; returns `{task_id, instruction, supervisor, datetime}`, the
        first observation."""
        self.steps, self.format_errors, self.completed, self.timed_out = 0, 0, False, False
        return self.server.client.initialize(
            self.task.task_id, experiment_name=self.config.experiment_name,
            timeout_seconds=self.config.execution_timeout_s, random_seed=self.config.random_seed)

    def step(self, reply: str) -> str:
        """Run the code block of a model reply; a reply without one is a format error (counted in `format_errors`),
        spends a step and returns NO_CODE_OBSERVATION."""
        code = extract_code(reply)
        if code is None:
            self._spend_step()
            self.format_errors += 1
            return NO_CODE_OBSERVATION
        return self.execute(code)

    def execute(self, code: str) -> str:
        """Run `code` on the sandboxed server; returns what it printed, or AppWorld's error text (a normal result)."""
        self._spend_step()
        limit = self.config.execution_timeout_s
        start = time.monotonic()
        output = self.server.client.execute(self.task.task_id, code, max_chars=self.config.max_output_chars,
                                            timeout_s=limit + EXECUTION_GRACE_S)
        # AppWorld's own answer, and the time it took (printing the same words is not a time-out)
        self.timed_out = (time.monotonic() - start >= limit
                          and output.rstrip().endswith(f"Execution timed out after {limit} seconds."))
        self.completed = self.server.client.task_completed(self.task.task_id)
        return output

    def _spend_step(self) -> None:
        if self.done:
            raise RuntimeError(f"the episode of {self.task.task_id} is over ({self.steps} steps, completed: "
                               f"{self.completed}); reset() starts a new one")
        self.steps += 1

    @property
    def truncated(self) -> bool:
        """The step cap was reached without the agent marking the task complete."""
        return self.steps >= self.config.max_steps and not self.completed

    @property
    def done(self) -> bool:
        """The agent marked the task complete (`apis.supervisor.complete_task`) or the step cap was reached."""
        return self.completed or self.steps >= self.config.max_steps

    def score(self) -> dict:
        """AppWorld's evaluation of the task's current state: `{success, pass_fraction, num_tests, passes, failures,
        truncated}`. A truncated episode (step cap without completion) is not a success, as in the paper.
        `pass_fraction` is AppWorld's passed tests / all tests; mind that tests labelled `no_op_pass` pass when the
        agent changed nothing, so a no-op can have pass_fraction > 0."""
        result = self.server.client.grade(self.task.task_id)
        num_tests = result["num_tests"]
        passes = [test["requirement"] for test in result["passes"]]
        return {"success": bool(result["success"]) and not self.truncated,
                "pass_fraction": len(passes) / num_tests if num_tests else 0.0, "num_tests": num_tests,
                "passes": passes, "failures": [test["requirement"] for test in result["failures"]],
                "truncated": self.truncated}

    def close(self) -> None:
        """Release the task's world on the server."""
        self.server.client.close(self.task.task_id)


def positive_reward(score: Mapping) -> bool:
    """The paper's "environment returns a positive reward" for AppWorld: some of the task's tests pass."""
    return score["pass_fraction"] > 0


def measured_records(records: Iterable[Mapping]) -> list[Mapping]:
    """The records that measured the policy: those without `environment_error` (an episode the AppWorld server
    failed twice, `agent.AppWorldEpisode`). TGC and SGC leave the others out and callers report their count
    apart: a server failure is neither a success nor a policy failure."""
    return [record for record in records if not record.get("environment_error")]


def _solved_by_task(records: Iterable[Mapping]) -> dict[str, bool]:
    solved: dict[str, bool] = {}
    for record in measured_records(records):
        if record["task_id"] in solved:
            raise ValueError(f"two records for task {record['task_id']!r}: TGC and SGC take one episode per task")
        solved[record["task_id"]] = bool(record["success"])
    if not solved:
        raise ValueError("no measured records (none, or only environment errors)")
    return solved


def tgc(records: Iterable[Mapping]) -> float:
    """Task Goal Completion: the fraction of tasks solved. `records`: one `{task_id, success}` per task; records with
    `environment_error` are left out (`measured_records`)."""
    solved = _solved_by_task(records)
    return sum(solved.values()) / len(solved)


def scenarios_completed(records: Iterable[Mapping]) -> dict[str, bool]:
    """Per scenario (the task id's prefix before its last `_`), whether all its tasks are solved. A scenario with
    an `environment_error` record is left out: whether it is complete is unknown."""
    records = list(records)
    unmeasured = {scenario_id(r["task_id"]) for r in records if r.get("environment_error")}
    by_scenario: dict[str, list[bool]] = defaultdict(list)
    for task_id, success in _solved_by_task(records).items():
        if scenario_id(task_id) not in unmeasured:
            by_scenario[scenario_id(task_id)].append(success)
    if not by_scenario:
        raise ValueError("no scenario all of whose tasks were measured (every one has an environment error)")
    return {scenario: all(outcomes) for scenario, outcomes in by_scenario.items()}


def sgc(records: Iterable[Mapping]) -> float:
    """Scenario Goal Completion: the fraction of scenarios all of whose tasks are solved. `records`: one `{task_id,
    success}` per task, every task of each scenario; a scenario with an `environment_error` record is left out
    (`scenarios_completed`)."""
    completed = scenarios_completed(records)
    return sum(completed.values()) / len(completed)
