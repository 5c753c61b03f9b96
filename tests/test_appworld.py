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

from coevolve_lib.envs.appworld import (
    NO_CODE_OBSERVATION, AppWorldEnv, AppWorldEnvConfig, AppWorldTask, extract_code, load_task, load_task_ids,
    load_tasks, positive_reward, scenario_id, sgc, tgc)
from coevolve_lib.envs.appworld_client import AppWorldClient, AppWorldServerError
from coevolve_lib.envs.appworld_server import (
    AppWorldNotInstalledError, AppWorldServer, AppWorldServerConfig, appworld_python, free_port)
from coevolve_lib.envs.appworld_synthetic import SYNTHETIC_SPLIT, build_synthetic_world

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


def test_client_tells_a_dead_server_and_a_hung_one(fake_server):
    url, routes = fake_server
    with pytest.raises(AppWorldServerError, match="not reachable") as error:
        AppWorldClient(f"http://127.0.0.1:{free_port()}").task_completed("t_1")
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
    code = ("import sys, coevolve_lib.envs.appworld, coevolve_lib.envs.appworld_synthetic; "
            "print([m for m in sys.modules if m.split('.')[0] == 'appworld'])")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          check=True).stdout.strip() == "[]"
    builder = ROOT / "coevolve_lib" / "envs" / "appworld_world_builder.py"  # runs in AppWorld's venv only
    importers = [path.name for path in (ROOT / "coevolve_lib").rglob("*.py") if path != builder
                 and "appworld" in _imported_packages(path)]
    assert importers == []


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return {name.split(".")[0] for name in names}


# --- the real AppWorld server on the synthetic world ----------------------------------------------------------------

@pytest.fixture(scope="session")
def world():
    return build_synthetic_world()


@pytest.fixture(scope="session")
def server(world):
    with AppWorldServer(AppWorldServerConfig(root=world.root)) as server:
        yield server


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
    assert all(task.supervisor["email"] == "ada.okafor@example.com" for task in tasks)
    with pytest.raises(FileNotFoundError, match="splits there"):
        load_task_ids("test_normal", world.root)


def test_correct_solutions_succeed_and_tgc_sgc_on_the_synthetic_split(server, world):
    records = []
    for task_id in load_task_ids(SYNTHETIC_SPLIT, world.root):
        solve = task_id != "synask_2"  # one unsolved task: its scenario is not complete
        env, output, score = _episode(server, world, task_id, world.solutions[task_id] if solve else None)
        assert score["success"] is solve, (task_id, output, score)
        assert env.completed is solve
        records.append({"task_id": task_id, "success": score["success"]})
    assert tgc(records) == 4 / 5
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
    assert server.ensure_running() and server.restarts == 1 and server.alive()
    with pytest.raises(AppWorldServerError, match="not initialized on this server"):
        env.execute("print(1)")  # the fresh server holds no task
    env.reset()
    env.execute(world.solutions["synnote_3"])
    assert env.done and env.score()["success"]
    env.close()
    assert not server.ensure_running()
