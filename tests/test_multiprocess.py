"""A real 2-process `accelerate launch` on CPU (issue 22): the tiny profile's printed command, made tiny (2 GRPO steps
of 2 tasks x K = 4, a feedback round after the first, no evaluation), runs as printed; then the same command resumes the
run from its step-1 checkpoint. Each process on one torch thread; ~30 s on 2 cores."""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.profiles import run_config
from coevolve_lib.training.plan import plan

OVERRIDES = ["training.launch.num_processes=2", "training.max_steps=2", "training.feedback_every=1",
             "training.eval_limit=0", "training.tasks_per_step=2", "training.group_size=4", "training.draw_factor=1",
             "training.max_completion_tokens=256", "training.reward=prefix", 'data_engine.signals.enabled=["boundary"]',
             "data_engine.d0_size=8", "data_engine.max_targets=2", "data_engine.explore.runs=1",
             "data_engine.explore.calls_per_run=4", "data_engine.heldout.new_tasks.size=5",
             "data_engine.heldout.new_tasks.runs=1", "data_engine.heldout.new_envs.size=6",
             "data_engine.heldout.new_envs.runs=1"]
"""The prefix reward, on the shipped warm start, differs within groups (so GRPO has an advantage: the weights move)
and the boundary signal then finds targets for round 1."""
EPISODES = 2 * 4


def launch(command: list[str]) -> subprocess.CompletedProcess:
    """Run the printed command from the repository root, with this interpreter's `accelerate` and a free port (the
    printed command keeps accelerate's default 29500, which another run on the machine may hold)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COEVOLVE_MAX_TORCH_THREADS": "1"}
    command = [*command[:2], "--main_process_port", str(port), *command[2:]]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    print(f"{shlex.join(command[:8])} ...: exit {proc.returncode} in {time.perf_counter() - start:.1f} s")
    return proc


def step_files(out: Path) -> dict[str, int]:
    return {f"{folder}/{p.name}": p.stat().st_mtime_ns for folder in ("rollouts", "signals")
            for p in sorted((out / folder).glob("step_*.jsonl"))}


def episodes(out: Path, step: int) -> list:
    """What the step's episodes did (their timings left out)."""
    return [(r["task_id"], r["sample_index"], r["reward"], r["steps"])
            for r in read_jsonl(out / "rollouts" / f"step_{step:05d}.jsonl")]


def assert_step_2_is_trained_again_exactly(command: list[str], out: Path, pool: TaskPool) -> None:
    """The 2-step run in `out` dies after its step-1 checkpoint (the later checkpoint and the model are gone, the later
    records stay); `command` again keeps step 1 as it was (not trained again) and trains step 2 again from the
    checkpoint, exactly: the same episodes, and no round after the last step."""
    shutil.rmtree(out / "trainer" / "checkpoint-2")
    shutil.rmtree(out / "final")
    (out / "summary.json").unlink()
    metrics, files, step2 = (out / "metrics.jsonl").read_text(), step_files(out), episodes(out, 2)

    resumed = launch(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert (out / "metrics.jsonl").read_text().splitlines()[0] == metrics.splitlines()[0]
    after = step_files(out)
    assert after.keys() == files.keys()
    assert all((after[name] == files[name]) == ("step_00001" in name) for name in files), (files, after)
    assert episodes(out, 2) == step2
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    assert TaskPool(out / "pool.jsonl").tasks == pool.tasks


@pytest.mark.paper  # 26 s: `make test-paper`, with every other `accelerate launch` of two processes
def test_the_printed_two_process_command_trains_feeds_back_and_resumes(tmp_path):
    out = tmp_path / "run"
    command = shlex.split(plan(run_config("tiny", OVERRIDES), out, OVERRIDES)["commands"]["train"])
    assert command[:3] == ["accelerate", "launch", "--multi_gpu"] and "--num_processes" in command

    first = launch(command)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count('{"profile": "tiny"') == 1  # the summary, from the main process only
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]  # one row per step, not one per process
    # Both processes' episodes are gathered: a single process would have rolled out its share only.
    assert all(r["train/episodes"] == EPISODES for r in rows)
    assert {p.name for p in (out / "trainer" / "checkpoint-2").glob("rng_state_*.pth")} == \
        {"rng_state_0.pth", "rng_state_1.pth"}
    # The feedback round after step 1 ran once (the main process) and grew the pool.
    report = json.loads((out / "round_001" / "report.json").read_text())
    pool = TaskPool(out / "pool.jsonl")
    assert report["pool_version"] == 1 and report["added_to_pool"] > 0 and rows[0]["feedback/tasks_added"] > 0
    assert len(pool.ids) == len(pool.tasks) and pool.version == 1  # no round after the last step
    start = load_file(Path(json.loads((out / "run_config.json").read_text())["policy"]) / "model.safetensors")

    def moved(weights: dict) -> int:
        return sum(not torch.equal(start[name], weights[name]) for name in start)

    assert moved(load_file(out / "final" / "model.safetensors")) > len(start) // 2

    assert_step_2_is_trained_again_exactly(command, out, pool)
    assert moved(load_file(out / "trainer" / "checkpoint-2" / "model.safetensors")) > len(start) // 2


APPWORLD_OVERRIDES = ["training.launch.num_processes=2", "training.max_steps=2", "training.feedback_every=1",
                      "training.tasks_per_step=2", "training.group_size=4", "training.draw_factor=1",
                      "training.reward=prefix", 'data_engine.signals.enabled=["boundary"]', "data_engine.d0_size=8",
                      "data_engine.max_targets=2", "data_engine.heldout.new_envs.size=0"]
"""`tiny-appworld` made tiny: its shipped warm start, the prefix reward (it varies within groups more often than the
binary one, so the weights move and the boundary signal finds round 1's targets), no held-out set."""


@pytest.mark.paper  # ~3 min: `make test-paper`, with every other `accelerate launch` of two processes
def test_appworld_on_two_processes_each_with_its_servers_trains_feeds_back_and_resumes(tmp_path):
    """The AppWorld profile's printed 2-process command: each process rolls out its share of a step's groups on
    AppWorld servers of its own, explores its share of D_0's and round 1's start states, and the main process writes
    and validates the round's tasks into the run's one data root; a run that died after its step-1 checkpoint
    resumes and trains step 2 again exactly."""
    out = tmp_path / "run"
    command = shlex.split(plan(run_config("tiny-appworld", APPWORLD_OVERRIDES), out,
                               APPWORLD_OVERRIDES)["commands"]["train"])
    first = launch(command)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/episodes"] == EPISODES for r in rows)
    # D_0's 5 start states: both processes explored their share, each on its own server
    shares = [read_jsonl(out / "round_000" / f"explorations.p{index}.jsonl") for index in (0, 1)]
    assert all(shares) and not (out / "round_000" / "explorations.jsonl").exists()
    for round_dir in (out / "round_000", out / "round_001"):  # AppWorld writes and validates on the main process
        assert read_jsonl(round_dir / "verdicts.p0.jsonl") and not (round_dir / "verdicts.p1.jsonl").exists()
    report = json.loads((out / "round_001" / "report.json").read_text())
    assert report["added_to_pool"] > 0 and rows[0]["feedback/tasks_added"] == report["added_to_pool"]
    pool = TaskPool(out / "pool.jsonl")
    for task in pool.tasks:  # every pool task is written in the run's one data root, where both processes read it
        assert (out / "appworld_root" / "data" / "tasks" / task["task_id"] / "ground_truth").is_dir()
    start = load_file(Path(json.loads((out / "run_config.json").read_text())["policy"]) / "model.safetensors")
    final = load_file(out / "final" / "model.safetensors")
    assert sum(not torch.equal(start[name], final[name]) for name in start) > len(start) // 2

    assert_step_2_is_trained_again_exactly(command, out, pool)  # AppWorld's episodes too, on fresh servers


COLLECTIVE_WAIT = '''
import sys, time
from datetime import timedelta

import torch.distributed.distributed_c10d as c10d

# torch's default collective timeout, 10 minutes for NCCL, stands here at 3 s (the old process group had no other)
c10d.default_pg_timeout = timedelta(seconds=3)
from accelerate import PartialState

from coevolve_lib.profiles import run_config
from coevolve_lib.training.processes import distributed_state

if sys.argv[1] == "kit":
    state = distributed_state(run_config("tiny", ["training.launch.num_processes=2"]))
else:  # how train() made the process group before: no timeout of its own
    state = PartialState(cpu=True)
if state.process_index == 0:
    time.sleep(8)  # the main process works alone (a round's share, a warm start) while the other waits
state.wait_for_everyone()
print(f"process {state.process_index} waited", flush=True)
'''


@pytest.mark.paper  # 25 s: `make test-paper`, beside the paper profiles' multi-process rehearsals
def test_the_process_group_waits_for_work_longer_than_the_default_timeout(tmp_path):
    """Issue 28: the run's process group is made with the timeout sized from its rounds (at least 30 minutes), so a
    process that waits 8 s for the main one passes where the default (here 3 s) kills the run."""
    script = tmp_path / "collective_wait.py"
    script.write_text(COLLECTIVE_WAIT)
    kit = launch(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", str(script), "kit"])
    assert kit.returncode == 0, kit.stderr[-2000:]
    assert kit.stdout.count("waited") == 2
    before = launch(["accelerate", "launch", "--multi_gpu", "--num_processes", "2", str(script), "default"])
    assert before.returncode != 0 and "waited" not in before.stdout.replace("process 0 waited", "")


def test_a_run_with_another_process_count_than_its_profile_is_one_line(tmp_path):
    """Issue 28: one process of a profile that plans two would train half of every step and skip its evaluation,
    silently; it is refused before anything is built."""
    proc = subprocess.run([sys.executable, "-m", "coevolve_lib", "train", "--profile", "tiny", "--quiet", "--out",
                           str(tmp_path / "run"), "--set", "training.launch.num_processes=2"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "this run has 1 process(es) but the profile plans 2 (training.launch.num_processes): a step would train " \
        "2 of its 4 tasks" in proc.stderr
    assert "--set training.launch.num_processes=1" in proc.stderr
    assert not (tmp_path / "run" / "round_000").exists()


@pytest.mark.slow
def test_fsdp_with_local_rollouts_is_refused_in_one_line(tmp_path):
    """Issue 28: under FSDP every rollout forward pass is a collective, so two processes whose episodes differ in
    length would wait for each other for ever; a launch that asks for FSDP without vLLM stops at once, and so does a
    profile whose accelerate config is FSDP's."""
    command = ["accelerate", "launch", "--use_fsdp", "--num_processes", "2", "-m", "coevolve_lib", "train",
               "--profile", "tiny", "--quiet", "--out", str(tmp_path / "run"), "--set",
               "training.launch.num_processes=2"]
    proc = launch(command)
    assert proc.returncode != 0
    # Each process refuses on its own; the first to exit makes torchrun stop the other, which may not have got as far
    # (measured in a fresh clone, whose first imports compile every module: 1 of 2 lines), so at least one line, and
    # no process started D_0.
    assert proc.stderr.count("accelerate launched this run with FSDP: FSDP shards the policy") >= 1
    assert not (tmp_path / "run" / "round_000").exists()
    planned = subprocess.run([sys.executable, "-m", "coevolve_lib", "train", "--profile", "paper-qwen3-4b",
                              "--dry-run", "--set",
                              "training.launch.accelerate_config=configs/accelerate/fsdp2_1x8.yaml"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert planned.returncode == 2 and "Traceback" not in planned.stderr
    assert "fsdp2_1x8.yaml: FSDP shards the policy" in planned.stderr and "use_vllm=true" in planned.stderr


@pytest.mark.paper  # 20 s: `make test-paper`, beside the paper profiles' multi-process rehearsals
def test_two_nodes_sharing_one_folder_train_on_the_same_pool(tmp_path):
    """Issue 46: a multi-node run's printed command, run as two "nodes" (two `accelerate launch` groups of one process
    each, machine ranks 0 and 1 over loopback) on one shared run folder: every file one process reads is settled by
    digest (`Shards.settle`), and after each round every process holds the main process's pool (`check_same_pool`:
    the run would stop otherwise). The same tiny run as the single-launch test, one round after step 1 of 2."""
    out = tmp_path / "run"
    overrides = [*OVERRIDES, "training.launch.num_machines=2"]
    printed = plan(run_config("tiny", overrides), out, overrides)["commands"]["train"]
    assert "--machine_rank $NODE_RANK --main_process_ip $MASTER_ADDR" in printed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COEVOLVE_MAX_TORCH_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    nodes = []
    for rank in (0, 1):
        command = printed.replace("$NODE_RANK", str(rank)).replace("$MASTER_ADDR", "127.0.0.1") \
            .replace("--main_process_port 29500", f"--main_process_port {port}")
        nodes.append(subprocess.Popen(shlex.split(command), cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = [node.communicate(timeout=300) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], results[0][1][-2000:] + results[1][1][-2000:]
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/episodes"] == EPISODES for r in rows)
    assert [r.get("feedback/round") for r in rows] == [1, None]  # no round after the last step
    assert TaskPool(out / "pool.jsonl").version == 1
    # each node explored its share of D_0 and of the rounds: a file per process per stage
    assert {p.name for p in (out / "round_000").glob("explorations.p*.jsonl")} == {"explorations.p0.jsonl",
                                                                                  "explorations.p1.jsonl"}
