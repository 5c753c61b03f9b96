"""Model-written code against the real AppWorld server in its sandbox (issue 45): the escape routes that got around
AppWorld's own guard, a process left behind, a memory grab, spinning threads, `os.abort()` and a loop that outlives
AppWorld's time-out. Each reply is one step of a real episode through the kit's rollout loop; each test checks the
host (no file, no process), the server (bounded, recycled) and the record (a counted failure of the policy). The
positive control runs the same escape without the sandbox and finds its file on the host."""

import time

import psutil
import pytest
from helpers import CodeModel, children_alive_after_kill

from coevolve_lib.core.config import EpisodeBudget, RolloutConfig
from coevolve_lib.core.sandbox import SandboxConfig, process_footprint
from coevolve_lib.envs.appworld import benchmark
from coevolve_lib.envs.appworld.benchmark import load_tasks, measured_records, sgc, tgc
from coevolve_lib.envs.appworld.episode import AppWorldEpisodes
from coevolve_lib.envs.appworld.server import AppWorldServerConfig
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts

SPLIT = "synthetic"
SPLIT_TASK = "synnote_1"
SYS = ("sys = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
       ".__init__.__globals__['sys']\n")
"""The route around AppWorld's guard found in issue 45: any function's globals lead to `sys`, and `sys.modules` to
`posix`, `signal` and `_thread`."""


def _block(code: str) -> str:
    return f"```python\n{code}\n```"


def _attacks(marker_dir) -> dict[str, str]:
    return {
        "spawn": f"import os\nos.posix_spawn('/bin/sh', ['sh', '-c', 'touch {marker_dir}/pwned_spawn'], "
                 "dict(os.environ))\nprint('spawned')",
        "system": SYS + f"print(sys.modules['posix'].system('touch {marker_dir}/pwned_system; sleep 3001.7 &'))",
        "abort": SYS + "sys.modules['posix'].abort()",
        "threads": SYS + "def spin():\n    while True: pass\n"
                         "for _ in range(3): sys.modules['_thread'].start_new_thread(spin, ())",
        "hang": SYS + "signal = sys.modules['signal']\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True: pass",
    }


def _sleepers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "3001.7" in " ".join(p.info["cmdline"] or [])]


@pytest.fixture
def episodes(world):
    """Episodes on servers of their own (the attacks recycle them), in the default sandbox."""
    with AppWorldEpisodes(world.root, split=SPLIT) as episodes:
        yield episodes


def test_model_code_cannot_reach_the_host_and_its_faults_are_the_policys(world, episodes, tmp_path, monkeypatch):
    monkeypatch.setattr(benchmark, "EXECUTION_GRACE_S", 2)  # the hang is noticed 2 s after AppWorld's time-out
    attacks = _attacks(tmp_path)
    tasks = load_tasks(SPLIT, world.root)[:len(attacks)]  # one attack per task
    names = dict(zip([task.task_id for task in tasks], attacks))
    replies = {task_id: [_block(attacks[name]), _block("print('after')")] for task_id, name in names.items()}
    config = RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=2, tool_docs="none",
                                        budget=EpisodeBudget(max_execution_seconds=2)))
    records = run_rollouts(CodeModel(tasks, replies), tasks, config, progress=False, new_episode=episodes)
    ends = {names[r["task_id"]]: (r["terminated"], r["error_type"]) for r in records}
    assert ends == {"spawn": ("left_running", "agent:left_running"), "system": ("left_running", "agent:left_running"),
                    "abort": ("server_crash", "agent:server_crash"),
                    "threads": ("left_running", "agent:left_running"),
                    "hang": ("execution_hang", "agent:execution_hang")}
    assert list(tmp_path.iterdir()) == []  # no file on the host
    assert _sleepers() == []  # the background sleep died with its sandbox
    for record in records:
        assert not record["success"] and record["score"] == 0.0 and not record["environment_error"]
        assert record["code_fault"]["cause"] == record["terminated"] and len(record["steps"]) == 1
    # every one counts in the metrics' denominators (they were left out as environment errors before)
    assert len(measured_records(records)) == 5 and tgc(records) == 0.0 and sgc(records) == 0.0
    # each fault recycled the server: the one left is fresh and idle
    server, = episodes.idle
    assert server.restarts == 5 and not server.busy_while_idle() and server.recycle_reason() is None


def test_a_memory_grab_stops_at_the_limit_and_the_next_episode_gets_a_fresh_server(world, episodes):
    tasks = load_tasks(SPLIT, world.root)[:2]
    grab = _block("chunks = []\nwhile True:\n    chunks.append(bytearray(100_000_000))")
    replies = {tasks[0].task_id: [grab, _block("print(len(chunks))")], tasks[1].task_id: [_block("print('next')")]}
    config = RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=2, tool_docs="none",
                                        budget=EpisodeBudget(max_execution_seconds=10)))
    model = CodeModel(tasks, replies)
    grabbed = run_rollouts(model, tasks[:1], config, progress=False, new_episode=episodes)[0]
    limit = SandboxConfig().limits.address_space_mb
    assert grabbed["steps"][0]["output"].rstrip().endswith("MemoryError")  # stopped at the address-space limit
    held = int(grabbed["steps"][1]["output"])  # what the code kept: under the limit
    assert 0 < held * 100 < limit
    server, = episodes.idle
    assert limit / 2 < process_footprint(server.pid).memory_mb < limit + 300
    assert "MB" in server.recycle_reason()
    after = run_rollouts(model, tasks[1:], config, progress=False, new_episode=episodes)[0]
    assert after["steps"][0]["output"] == "next\n" and server.restarts == 1  # recycled before the next episode
    assert process_footprint(server.pid).memory_mb < AppWorldServerConfig(root=world.root).max_idle_memory_mb


def test_the_environments_server_is_recycled_before_appworld_runs_out_of_open_files(world, tmp_path, monkeypatch):
    """AppWorld keeps ~12 files open per task it has loaded, so the environment's one server, which D_0 and the rounds
    load every validated task into, refused the next task with "Too many open files" after a few score (building a
    200-task D_0). Between uses it is now recycled at three quarters of the sandbox's open-files limit: here 80, so
    after a handful of tasks, before it fails one."""
    from coevolve_lib.core.sandbox import SandboxLimits
    from coevolve_lib.envs.appworld.environment import AppWorldEnvironment
    from coevolve_lib.profiles import run_config

    environment = AppWorldEnvironment(run_config("tiny-appworld").data_engine, tmp_path, source_root=world.root)
    limits = SandboxLimits(open_files=80)
    monkeypatch.setattr(environment, "server_config", lambda root: AppWorldServerConfig(
        root=root, sandbox=SandboxConfig(limits=limits)))
    try:
        server, loaded = environment.server(), 0
        for task in load_tasks(SPLIT, world.root):
            server.client.initialize(task.task_id, experiment_name="open_files")
            server.client.close(task.task_id)
            loaded += 1
            if server.recycle_reason():
                break
        assert "open files (limit 80" in server.recycle_reason() and loaded < 5
        assert process_footprint(server.pid).open_files <= limits.open_files
        assert environment.server() is server and server.restarts == 1 and server.recycle_reason() is None
        server.client.initialize(SPLIT_TASK, experiment_name="open_files")  # the fresh server loads tasks again
        server.client.close(SPLIT_TASK)
    finally:
        environment.close()


def test_positive_control_the_escape_reaches_the_host_without_the_sandbox(world, tmp_path):
    """The same reply, on a server in mode "none": the file appears on the host, so the sandboxed test above would
    see one if the sandbox let it through."""
    task = load_tasks(SPLIT, world.root)[0]
    escape = _block(SYS + f"print(sys.modules['posix'].system('touch {tmp_path}/pwned'))")
    config = AppWorldServerConfig(root=world.root, sandbox=SandboxConfig(mode="none"))
    with AppWorldEpisodes(world.root, split=SPLIT, server_config=config) as episodes:
        record, = run_rollouts(CodeModel([task], {task.task_id: [escape]}), [task],
                               RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=1, tool_docs="none")),
                               progress=False, new_episode=episodes)
    assert record["steps"][0]["output"] == "0\n" and (tmp_path / "pwned").exists()


def test_a_server_that_exits_between_replies_is_the_environments(world, episodes):
    """Not the code's doing: the server was killed from outside while the model was thinking. The episode starts
    over on a fresh server and succeeds; the fault is recorded as the environment's."""
    task = load_tasks(SPLIT, world.root)[0]
    killed = []

    def kill_once(task_id, step):
        if step == 1 and not killed:
            server, = [s for s in episodes.owned if s.process is not None]
            killed.append(server.pid)
            server.process.kill()
            server.process.wait()
            time.sleep(0.1)

    look = _block("print(len(apis.supervisor.show_account_passwords()))")
    model = CodeModel([task], {task.task_id: [look, _block(world.solutions[task.task_id])]}, before_reply=kill_once)
    record, = run_rollouts(model, [task], RolloutPhase(RolloutConfig(batch_size=1, tool_docs="none")), progress=False,
                           new_episode=episodes)
    assert killed and record["success"] and record["attempts"] == 2 and record["code_fault"] is None
    assert [f["kind"] for f in record["environment_faults"]] == ["down"]


KIT_WITH_A_SERVER = '''
import sys, time
from coevolve_lib.core.sandbox import SandboxConfig
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig
AppWorldServer(AppWorldServerConfig(root=sys.argv[1], sandbox=SandboxConfig(mode=sys.argv[2]))).start()
print("started", flush=True)
time.sleep(600)
'''


@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_a_server_dies_with_the_kit_however_the_kit_ends(world, tmp_path, mode):
    """Issue 47: servers start in sessions of their own, so a kit process killed (SIGKILL; SIGTERM before the kit
    handled it) left them running, parent 1 (4 AppWorld servers for 80 minutes). bubblewrap's --die-with-parent, and
    setpriv's parent-death signal without the sandbox, take each down with the process that started it."""
    alive = children_alive_after_kill(KIT_WITH_A_SERVER, str(world.root), mode, folder=tmp_path)
    assert not alive, [p.pid for p in alive]


def test_sigterm_stops_a_command_like_ctrl_c_and_its_servers_with_it(world, tmp_path):
    """Issue 47: SIGTERM (a scheduler's preemption, `timeout`, `docker stop`) skipped the clean stop: a traceback-free
    one line and the shell's 143 now, the same as SIGINT's, every AppWorld server gone, and the rerun completes."""
    import signal
    import subprocess
    import sys

    from coevolve_lib.core.paths import REPO_ROOT

    command = [sys.executable, "-m", "coevolve_lib", "evaluate", "--profile", "tiny-appworld", "--limit", "1", "--out",
               str(tmp_path / "results.json")]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    servers, deadline = [], time.time() + 120
    while not servers and time.time() < deadline and process.poll() is None:  # an AppWorld server answers
        servers = [p for p in psutil.Process(process.pid).children(recursive=True)
                   if "appworld" in " ".join(p.cmdline())]
        time.sleep(0.2)
    assert servers, "the evaluation started no AppWorld server"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "python -m coevolve_lib evaluate: terminated (SIGTERM); the same command again resumes where it stopped")
    _, alive = psutil.wait_procs(servers, timeout=10)
    assert not alive, [p.pid for p in alive]
    rerun = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
