"""AppWorld: the kit's client, server manager, env and metrics against AppWorld's REAL environment server, on a
synthetic world that AppWorld's own code builds at test time (the official data downloads only from S3).

The real-server tests need `.venv-appworld` (`make appworld`; `make test` builds it first) and fail with that advice
when it is missing. A tiny fake HTTP server stands in for AppWorld only in the fast tests of the client's error
handling, beside them.
"""

import ast
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from helpers import CodeModel

from coevolve_lib.core.config import EpisodeBudget, RolloutConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import GenerationConfig
from coevolve_lib.core.records import config_hash, read_jsonl
from coevolve_lib.envs.appworld.benchmark import (
    NO_CODE_OBSERVATION,
    AppWorldEnv,
    AppWorldEnvConfig,
    AppWorldTask,
    extract_code,
    load_task,
    load_task_ids,
    load_tasks,
    positive_reward,
    scenario_id,
    sgc,
    tgc,
)
from coevolve_lib.envs.appworld.client import AppWorldClient, AppWorldServerError
from coevolve_lib.envs.appworld.episode import AppWorldEpisodes
from coevolve_lib.envs.appworld.evaluate import evaluate_appworld
from coevolve_lib.envs.appworld.server import AppWorldNotInstalledError, appworld_python
from coevolve_lib.envs.appworld.synthetic import SYNTHETIC_SPLIT
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts

ROOT = Path(__file__).resolve().parent.parent


# --- fast tests: parsing, metrics, the client's errors against a fake server ---------------------------------------

def test_extract_code_takes_the_first_fenced_block():
    assert extract_code("Let me look.\n```python\nprint(apis.x.y())\n```\nthen ```python\nz()\n```") == \
        "print(apis.x.y())"
    assert extract_code("```py\na = 1\n```") == "a = 1"
    assert extract_code("```\na = 1\n```") == "a = 1"
    assert extract_code("I would call apis.simple_note.login(...) now.") is None
    assert extract_code("```python\nunterminated") is None


def test_scenario_id_and_metrics():
    assert scenario_id("82e2fac_1") == "82e2fac"
    records = [{"task_id": "a_1", "success": True}, {"task_id": "a_2", "success": True},
               {"task_id": "b_1", "success": True}, {"task_id": "b_2", "success": False}]
    assert tgc(records) == 0.75
    assert sgc(records) == 0.5
    with pytest.raises(ValueError, match="two records"):
        tgc(records + [{"task_id": "a_1", "success": False}])
    # An environment error is neither a success nor a failure: TGC leaves the task out, SGC its scenario.
    records[1] = {"task_id": "a_2", "success": False, "environment_error": True}
    assert tgc(records) == 2 / 3
    assert sgc(records) == 0.0
    with pytest.raises(ValueError, match="no measured records"):
        tgc([records[1]])


class _FakeAppWorld(BaseHTTPRequestHandler):
    """Answers like AppWorld's server: a bare 500 for a refused request, JSON `{"output": ...}` otherwise."""

    routes: dict = {}  # path -> (status, body bytes, delay seconds)

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body, delay = self.routes.get(self.path, (500, b"Internal Server Error", 0))
        time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout test)
            pass

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_server():
    _FakeAppWorld.routes = {"/": (200, b'{"message": "Welcome"}', 0)}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAppWorld)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _FakeAppWorld.routes
    server.shutdown()
    server.server_close()


def test_client_explains_the_servers_bare_500(fake_server):
    url, routes = fake_server
    client = AppWorldClient(url, log_tail=lambda: "Traceback: AppWorld has not been initialized.")
    with pytest.raises(AppWorldServerError, match="'t_1' is not initialized") as error:
        client.execute("t_1", "print(1)")
    assert error.value.kind == "refused"
    assert "the server logged: Traceback: AppWorld has not been initialized." in str(error.value)
    with pytest.raises(AppWorldServerError, match="could not load task 'nosuch_1'"):
        client.initialize("nosuch_1")
    routes["/initialize"] = (200, json.dumps({"output": {"task_id": "t_1"}}).encode(), 0)
    client.initialize("t_1")
    with pytest.raises(AppWorldServerError, match="holds task 't_1', not 't_2'"):
        client.execute("t_2", "print(1)")
    routes["/execute"] = (200, b"<html>oops</html>", 0)
    with pytest.raises(AppWorldServerError, match="non-JSON") as error:
        client.execute("t_1", "print(1)")
    assert error.value.kind == "bad_response"


def test_client_tells_a_dead_server_and_a_hung_one(fake_server, tmp_path):
    url, routes = fake_server
    with pytest.raises(AppWorldServerError, match="not reachable") as error:
        AppWorldClient("", socket_path=str(tmp_path / "nothing-listens.sock")).task_completed("t_1")
    assert error.value.kind == "down"
    routes["/task_completed"] = (200, b'{"output": true}', 2)
    with pytest.raises(AppWorldServerError, match="no answer") as error:
        AppWorldClient(url, timeout_s=0.5).task_completed("t_1")
    assert error.value.kind == "timeout"


def test_a_reply_without_code_is_a_counted_format_error_and_reaches_no_server(fake_server):
    url, routes = fake_server

    class NoServer:  # any request would fail: the fake answers 500 to /execute
        client = AppWorldClient(url)

    task = AppWorldTask(task_id="t_1", instruction="x", supervisor={}, datetime="2023-05-18T12:00:00")
    env = AppWorldEnv(task, NoServer(), AppWorldEnvConfig(max_steps=2))
    assert env.step("I think I am done.") == NO_CODE_OBSERVATION
    assert env.format_errors == 1 and env.steps == 1 and not env.done
    env.step("still no code")
    assert env.done and env.truncated
    with pytest.raises(RuntimeError, match="episode of t_1 is over"):
        env.step("```python\nprint(1)\n```")


def test_a_missing_appworld_venv_names_the_make_target(tmp_path):
    with pytest.raises(AppWorldNotInstalledError, match="make appworld"):
        appworld_python(tmp_path / "no-venv")


def test_make_test_builds_appworlds_venv_first():
    makefile = (ROOT / "Makefile").read_text()
    assert "appworld" in next(line for line in makefile.splitlines() if line.startswith("test:")).split()
    assert "appworld==0.1.3.post1" in (ROOT / "requirements-appworld.txt").read_text().split()


def test_the_kit_never_imports_appworld():
    modules = ("coevolve_lib.envs.appworld.benchmark, coevolve_lib.envs.appworld.synthetic, "
               "coevolve_lib.envs.appworld.validation")
    code = f"import sys, {modules}; print([m for m in sys.modules if m.split('.')[0] == 'appworld'])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          check=True).stdout.strip() == "[]"
    venv_scripts = {"world_builder.py", "task_writer.py"}  # run in AppWorld's venv only
    importers = [path.name for path in (ROOT / "coevolve_lib").rglob("*.py")
                 if "appworld" in _imported_packages(path)]
    assert sorted(importers) == sorted(venv_scripts)


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return {name.split(".")[0] for name in names}


# --- the real AppWorld server on the synthetic world ----------------------------------------------------------------

def _episode(server, world, task_id, code=None):
    """reset, optionally one `execute(code)`, score, close."""
    env = AppWorldEnv(load_task(task_id, world.root), server)
    first = env.reset()
    assert first["instruction"] == env.task.instruction
    output = env.execute(code) if code is not None else None
    score = env.score()
    env.close()
    return env, output, score


def test_the_synthetic_world_loads_through_the_kits_data_path(world):
    assert load_task_ids(SYNTHETIC_SPLIT, world.root) == world.splits[SYNTHETIC_SPLIT]
    assert set(world.splits[SYNTHETIC_SPLIT]) == set(world.solutions)
    assert sorted(load_task_ids("train", world.root) + load_task_ids("dev", world.root)) == sorted(world.solutions)
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)
    assert {task.scenario_id for task in tasks} == {"synnote", "synask"}
    households = {task.task_id: task.supervisor["email"] for task in tasks}
    assert len(set(households.values())) == 8  # Ada's and 7 drawn: the world's start states
    train, dev = ({households[t] for t in world.splits[split]} for split in ("train", "dev"))
    assert not train & dev  # the dev split starts in households the train split never holds
    assert world.start_states == {t: world.start_states[t] for t in world.splits[SYNTHETIC_SPLIT]}
    assert len(set(world.start_states.values())) == len(set(households.values()))
    with pytest.raises(FileNotFoundError, match="splits there"):
        load_task_ids("test_normal", world.root)


def test_correct_solutions_succeed_and_tgc_sgc_on_the_dev_split(server, world):
    records = []  # (every task's solution runs in the next module's evaluation, two episodes at a time)
    for task_id in load_task_ids("dev", world.root):
        solve = task_id != "synask_2"  # one unsolved task: its scenario is not complete
        env, output, score = _episode(server, world, task_id, world.solutions[task_id] if solve else None)
        assert score["success"] is solve, (task_id, output, score)
        assert env.completed is solve
        records.append({"task_id": task_id, "success": score["success"]})
    assert tgc(records) == 5 / 6
    assert sgc(records) == 1 / 2


def test_a_no_op_and_wrong_answers_fail(server, world):
    _, _, no_op = _episode(server, world, "synnote_1")
    assert not no_op["success"] and no_op["num_tests"] == 3
    # AppWorld's no_op_pass tests pass when nothing changed: a no-op still earns a positive pass fraction.
    assert no_op["passes"] == ["no app other than simple_note was changed"] and positive_reward(no_op)
    wrong_content = world.solutions["synnote_2"].replace("orange-kite-77", "orange-kite-78")
    env, _, score = _episode(server, world, "synnote_2", wrong_content)
    assert env.completed and not score["success"]
    assert score["failures"] == ["the added note has the requested title and content"]
    wrong_answer = world.solutions["synask_1"].replace('answer=note["content"]', 'answer="1234"')
    env, _, score = _episode(server, world, "synask_1", wrong_answer)
    assert env.completed and not score["success"]
    assert score["failures"] == ["the task was completed with the correct answer"]


def test_model_replies_run_in_appworlds_sandbox(server, world):
    env = AppWorldEnv(load_task("synask_1", world.root), server)
    env.reset()
    assert "not allowed: os.system" in env.step("```python\nimport os\nos.system('touch /tmp/pwned')\n```")
    assert "Traceback" in env.step("```python\nraise ValueError('policy bug')\n```")  # a normal result
    assert env.step("Done, I think.") == NO_CODE_OBSERVATION and env.format_errors == 1
    apps = json.loads(env.step("```python\nimport json\nprint(json.dumps(apis.api_docs.show_app_descriptions()))\n```"))
    assert "simple_note" in {app["name"] for app in apps}
    assert not env.done
    env.step(f"Here is the plan.\n```python\n{world.solutions['synask_1']}```")
    assert env.done and env.steps == 5 and env.score()["success"]
    env.close()
    assert "simple_note" in server.client.api_docs()
    assert server.client.task("synask_1")["instruction"] == env.task.instruction


def test_an_unknown_task_is_refused_with_a_reason(server):
    with pytest.raises(AppWorldServerError, match="could not load task 'nosuch_1'") as error:
        server.client.initialize("nosuch_1")
    assert error.value.kind == "refused" and server.alive()
    assert "the server logged: Exception: The task directory" in str(error.value)


def test_a_killed_server_is_detected_restarted_and_the_episode_retried(server, world):
    env = AppWorldEnv(load_task("synnote_3", world.root), server)
    env.reset()
    env.execute("passwords = apis.supervisor.show_account_passwords()")
    os.kill(server.pid, signal.SIGKILL)
    server.process.wait()
    with pytest.raises(AppWorldServerError) as error:
        env.execute(world.solutions["synnote_3"])
    assert error.value.kind == "down"
    assert not server.alive()
    restarts = server.restarts
    assert server.ensure_running() and server.restarts == restarts + 1 and server.alive()
    with pytest.raises(AppWorldServerError, match="not initialized on this server"):
        env.execute("print(1)")  # the fresh server holds no task
    env.reset()
    env.execute(world.solutions["synnote_3"])
    assert env.done and env.score()["success"]
    env.close()
    assert not server.ensure_running()


# --- the agent: AppWorld episodes in the kit's rollout loop ---------------------------------------------------------

def _block(code):
    return f"I will run this.\n```python\n{code}\n```"


def test_a_server_that_never_answers_gives_environment_error_records(tmp_path):
    """No server behind the client: reset fails on both attempts; the prompt stays well-formed, the one reply the
    loop asks for is dropped, and each task still gets its record, left out of TGC."""

    class DeadServer:
        process = "running"  # looks started: the episode goes straight to reset()
        client = AppWorldClient("", socket_path=str(tmp_path / "nothing-listens.sock"))

        def ensure_running(self):
            return False

        def recycle_reason(self):
            return None

    tasks = [AppWorldTask(task_id=f"t_{n}", instruction=f"do {n}", supervisor={
        "first_name": "A", "last_name": "B", "email": "a@b.c", "phone_number": "1"}, datetime="2023-05-18T12:00:00")
        for n in (1, 2)]
    model = CodeModel(tasks, {task.task_id: [_block("print(1)")] for task in tasks})
    factory = AppWorldEpisodes(tmp_path, split="dev", servers=[DeadServer()])
    records = run_rollouts(model, tasks, RolloutPhase(RolloutConfig(batch_size=1, tool_docs="none")), progress=False,
                           new_episode=factory)
    assert [r["task_id"] for r in records] == ["t_1", "t_2"] and model.calls == 2
    for record in records:
        assert record["environment_error"] and record["error_type"] == "environment:down"
        assert record["attempts"] == 2 and [f["kind"] for f in record["environment_faults"]] == ["down", "down"]
        assert [m["role"] for m in record["messages"]] == ["system", "user"] and record["steps"] == []
    with pytest.raises(ValueError, match="no measured records"):
        tgc(records)


@pytest.fixture(scope="session")
def episodes(world, server):
    """The episodes factory over the session's server (a second one starts when two episodes are live)."""
    with AppWorldEpisodes(world.root, split=SYNTHETIC_SPLIT, servers=[server]) as episodes:
        yield episodes


def _check_record(record, split=SYNTHETIC_SPLIT):
    assert record["schema"] == "rollout/v1" and record["task_source"] == f"appworld:{split}"
    assert record["scenario_id"] == scenario_id(record["task_id"])
    assert [m["role"] for m in record["messages"][:2]] == ["system", "user"]
    assert "```python" in record["messages"][0]["content"] and "simple_note:" in record["messages"][0]["content"]
    assert all(set(step) == {"step", "raw", "code", "output", "calls", "observations"} for step in record["steps"])
    assert all(len(step["calls"]) == len(step["observations"]) for step in record["steps"])
    assert record["prompt_tokens"] > 0 and record["completion_tokens"] > 0
    assert isinstance(record["success"], bool) and record["score"] == float(record["success"])


def test_the_solutions_model_solves_every_synthetic_task(world, episodes, tmp_path):
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)
    model = CodeModel(tasks, {task_id: [_block(code)] for task_id, code in world.solutions.items()})
    result = evaluate_appworld(model, SYNTHETIC_SPLIT, world.root, RolloutPhase(RolloutConfig(batch_size=2)),
                               out=tmp_path / "appworld.json", episodes=episodes)
    rows = {row["metric"]: row for row in result["metrics"]}
    assert (rows["tgc"]["value"], rows["tgc"]["n"], rows["sgc"]["value"], rows["sgc"]["n"]) == (100.0, 13, 100.0, 2)
    assert rows["tgc"]["eval_set"] == "appworld-synthetic/synthetic"  # never named as an official split
    assert result["details"]["environment_errors"] == 0 and result["details"]["format_errors"] == 0
    assert result["config_hash"] == config_hash(result["config"])  # of what it records, not of machine paths
    records = list(read_jsonl(tmp_path / "appworld.rollouts.jsonl"))
    assert sorted(r["task_id"] for r in records) == sorted(world.solutions)
    for record in records:
        _check_record(record)
        assert record["terminated"] == "completed" and record["error_type"] is None
        assert record["pass_fraction"] == 1.0 and record["positive_reward"] and len(record["steps"]) == 1
        assert record["steps"][0]["code"] == world.solutions[record["task_id"]].strip()
    assert len(episodes.owned) + 1 == len(episodes.idle) == 2  # one server per live episode, then reused
    assert model.calls == 7  # 13 one-step episodes, two at a time


def test_wrong_and_codeless_replies_fail_and_count_format_errors(world, episodes):
    tasks = [load_task(task_id, world.root) for task_id in ("synnote_1", "synnote_2", "synask_1", "synnote_3",
                                                             "synask_2")]
    no_op = _block("apis.supervisor.complete_task()")
    replies = {task.task_id: [no_op] for task in tasks}
    replies["synask_1"] = ["I would look up the note now."]  # never a code block
    replies["synask_2"] = [_block('apis.supervisor.complete_task(answer="7")')]
    records = run_rollouts(CodeModel(tasks, replies), tasks,
                           RolloutPhase(RolloutConfig(max_steps_per_episode=3, batch_size=2)),
                           progress=False, new_episode=episodes)
    assert len(records) == 5 and not any(r["success"] or r["environment_error"] for r in records)
    assert tgc(records) == 0.0 < 1 and sgc(records) == 0.0
    by_task = {r["task_id"]: r for r in records}
    codeless = by_task["synask_1"]
    assert codeless["format_errors"] == 3 and codeless["terminated"] == "episode_step_cap"
    assert codeless["error_type"] == "agent:episode_step_cap" and [s["code"] for s in codeless["steps"]] == [None] * 3
    assert by_task["synask_2"]["error_type"] == "appworld:tests_failed"
    # the no-op completion passes AppWorld's no_op_pass test: a positive reward without success
    assert by_task["synnote_1"]["positive_reward"] and 0 < by_task["synnote_1"]["pass_fraction"] < 1


def test_code_that_makes_the_episode_raise_is_an_environment_error_left_out_of_tgc(world, episodes, monkeypatch):
    """Anything but a server fault raised while a reply runs (here: the kit's `step`) ends that episode as
    `environment_error`, as AppWorld's own faults do: TGC leaves it out, and the batch goes on."""
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)[:2]
    original = AppWorldEnv.step

    def step(env, reply):
        if env.task.task_id == tasks[0].task_id:
            raise RuntimeError("the episode's bookkeeping broke")
        return original(env, reply)

    monkeypatch.setattr(AppWorldEnv, "step", step)
    replies = {task.task_id: [_block(world.solutions[task.task_id])] for task in tasks}
    records = run_rollouts(CodeModel(tasks, replies), tasks, RolloutPhase(RolloutConfig(batch_size=2)), progress=False,
                           new_episode=episodes)
    broken, whole = records
    assert broken["terminated"] == "environment_error" and broken["environment_error"]
    assert broken["error_type"] == "environment:exception" and "RuntimeError" in broken["error_message"]
    assert whole["success"] and tgc(records) == 1.0  # measured on the episode the environment did not break


def test_appworld_episodes_keep_to_the_episode_budget(world, episodes):
    """A reply over `max_reply_chars` never reaches the server, an output over `max_observation_chars` is cut and
    ends the episode, and the code blocks of an episode count against `max_calls_per_episode`."""
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)[:3]
    replies = {tasks[0].task_id: [_block("print('x')" + " " * 500)], tasks[1].task_id: [_block("print('y' * 5000)")],
               tasks[2].task_id: [_block("print(1)")]}
    budget = EpisodeBudget(max_reply_chars=400, max_observation_chars=1000, max_calls_per_episode=2)
    records = run_rollouts(CodeModel(tasks, replies), tasks, RolloutPhase(RolloutConfig(batch_size=2, budget=budget)),
                           progress=False, new_episode=episodes)
    ends = {r["task_id"]: (r["terminated"], len(r["steps"])) for r in records}
    assert ends == {tasks[0].task_id: ("reply_cap", 0), tasks[1].task_id: ("observation_cap", 1),
                    tasks[2].task_id: ("episode_call_cap", 2)}
    assert all(r["error_type"] == f"agent:{r['terminated']}" and not r["success"] for r in records)
    assert len(records[1]["steps"][0]["output"]) == 1000 and records[1]["steps"][0]["output"] == "y" * 1000


def test_code_that_runs_on_ends_the_episode_at_the_execution_budget(world, episodes):
    """Issue 29: a busy loop ran 100 s per reply (AppWorld's default limit); the budget's `max_execution_seconds`
    is AppWorld's own limit now, and its time-out ends the episode (`time_cap`), code that catches the interrupt
    included. Printing AppWorld's time-out text is not a time-out."""
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)[:3]
    catching = "while True:\n    try:\n        while True: pass\n    except BaseException: pass"
    replies = {tasks[0].task_id: [_block("while True: pass")], tasks[1].task_id: [_block(catching)],
               tasks[2].task_id: [_block("print('Execution timed out after 1 seconds.')")] * 2}
    budget = EpisodeBudget(max_execution_seconds=1)
    start = time.monotonic()
    records = run_rollouts(CodeModel(tasks, replies), tasks,
                           RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=2, budget=budget)),
                           progress=False, new_episode=episodes)
    assert time.monotonic() - start < 20
    ends = {r["task_id"]: (r["terminated"], len(r["steps"])) for r in records}
    assert ends == {tasks[0].task_id: ("time_cap", 1), tasks[1].task_id: ("time_cap", 1),
                    tasks[2].task_id: ("episode_step_cap", 2)}
    assert "Execution timed out after 1 seconds" in records[0]["steps"][0]["output"]
    assert records[0]["error_type"] == "agent:time_cap" and not records[0]["environment_error"]


def test_a_huge_output_is_read_no_further_than_the_observation_budget(world, server):
    """Issue 29: the client read a code block's whole output before the budget cut it (610 MiB for a 200 MB print);
    now it reads what holds `max_chars` characters, and the server goes on serving."""
    task = load_tasks(SYNTHETIC_SPLIT, world.root)[0]
    server.client.initialize(task.task_id)
    output = server.client.execute(task.task_id, "print('z' * 20_000_000)", max_chars=1000)
    assert 1000 < len(output) <= 6 * 1000 + 1024 and set(output) == {"z"}
    assert server.client.execute(task.task_id, "print(6 * 7)").strip() == "42"
    server.client.close(task.task_id)


@pytest.mark.parametrize("token_level", [False, True])
def test_the_tiny_model_runs_appworld_episodes(world, episodes, token_level):
    tasks = load_tasks(SYNTHETIC_SPLIT, world.root)[:2]
    config = RolloutPhase(RolloutConfig(max_steps_per_episode=2, batch_size=2), token_level=token_level,
                          generation=GenerationConfig(max_new_tokens=12))
    records = run_rollouts(load_chat_model("tiny"), tasks, config, progress=False, new_episode=episodes)
    assert [r["task_id"] for r in records] == [t.task_id for t in tasks]
    for record in records:
        _check_record(record)
        assert not record["success"] and not record["environment_error"] and 1 <= len(record["steps"]) <= 2
        if token_level:
            assert len(record["completion_ids"]) == len(record["completion_mask"]) > 0
            assert set(record["completion_mask"]) == {0, 1} and len(record["prompt_ids"]) > 100
        else:
            assert "prompt_ids" not in record


def test_a_server_killed_mid_episode_is_retried_or_an_environment_error(world, server):
    """synnote_1: the server is killed before the 2nd reply, the episode starts over on the restarted server and
    succeeds; synnote_2: the server refuses on both attempts (another task loaded behind the episode's back), so it
    is an environment error; synask_1 is unaffected. Every task has a record. (A kill costs a restart, ~20 s:
    one only.)"""
    tasks = [load_task(task_id, world.root) for task_id in ("synnote_1", "synnote_2", "synask_1")]
    faults = {"synnote_1": ["kill"], "synnote_2": ["swap", "swap"], "synask_1": []}

    def fail_before_second_reply(task_id, step):
        if step == 1 and faults[task_id]:
            if faults[task_id].pop(0) == "kill":
                os.kill(server.pid, signal.SIGKILL)
                server.process.wait()
            else:  # the server holds one task: requests for synnote_2 are refused
                server.client.initialize("synask_2")

    look = _block("passwords = apis.supervisor.show_account_passwords()\nprint(len(passwords))")
    replies = {task.task_id: [look, _block(world.solutions[task.task_id])] for task in tasks}
    model = CodeModel(tasks, replies, before_reply=fail_before_second_reply)
    restarts = server.restarts
    with AppWorldEpisodes(world.root, split=SYNTHETIC_SPLIT, servers=[server]) as episodes:
        records = run_rollouts(model, tasks, RolloutPhase(RolloutConfig(batch_size=1)), progress=False,
                               new_episode=episodes)
    retried, failed, clean = records
    assert [r["task_id"] for r in records] == ["synnote_1", "synnote_2", "synask_1"]
    assert retried["success"] and retried["attempts"] == 2 and not retried["environment_error"]
    assert [f["kind"] for f in retried["environment_faults"]] == ["down"]
    assert [m["role"] for m in retried["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert failed["environment_error"] and failed["error_type"] == "environment:refused" and not failed["success"]
    assert failed["terminated"] == "environment_error" and failed["attempts"] == 2
    assert [f["kind"] for f in failed["environment_faults"]] == ["refused", "refused"]
    assert clean["success"] and clean["attempts"] == 1 and not clean["environment_faults"]
    assert tgc(records) == 1.0 and sgc(records) == 1.0  # synnote_2 is left out, and with it its scenario
    assert server.restarts == restarts + 1 and server.alive()
