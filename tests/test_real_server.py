"""The evaluated-model path against a real OpenAI-compatible server: `transformers serve` (not the kit's own) serves
the shipped warm-started tiny policy (Qwen3 architecture, so the server parses its tool calls), and
`evaluate --model openai:<folder>` against it gives, task by task, the calls and turn verdicts of the in-process
greedy evaluation of the same weights (issue 31's differential); and one LLM feedback round with the served policy
in every LLM stage."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace

import openai
import pytest
from helpers import BFCL, children_alive_after_kill

from coevolve_lib.cli.local_servers import free_port, transformers_serve
from coevolve_lib.core.config import ExploreConfig, SynthesisConfig
from coevolve_lib.core.llm_calls import RecordedChatModel
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.paths import LIBRARY_DATA, REPO_ROOT
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.engine.feedback import FeedbackConfig, feedback_round
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.envs.bfcl.tasks import load_tasks

POLICY = LIBRARY_DATA / "warm_start" / "tiny"
TASKS = 20


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    with transformers_serve(POLICY, folder / "server.log") as (base_url, log, _):
        yield base_url, log


def evaluate_command(model: str, out, *extra: str, limit: int = TASKS) -> list[str]:
    return [sys.executable, "-m", "coevolve_lib", "evaluate", "--profile", "tiny", "--model", model, "--split", "train",
            "--limit", str(limit), "--out", str(out), "--quiet", *extra]


def evaluate(model: str, out, runs, *extra: str, limit: int = TASKS, status: int = 0):
    """The evaluation's results document (`status` 0), else its stderr."""
    done = subprocess.run(evaluate_command(model, out, *extra, limit=limit), cwd=REPO_ROOT,
                          env={**os.environ, "COEVOLVE_RUNS_DIR": str(runs)}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == status, done.stderr[-3000:]
    return json.loads(out.read_text()) if status == 0 else done.stderr


def requests_logged(log) -> int:
    """Chat-completion requests the server's log holds (answered or failed)."""
    return log.read_text().count('"POST /v1/chat/completions HTTP/1.1"')


IGNORED = "Ignoring unsupported fields in the request"
"""What `transformers serve` logs for a field it drops (measured in 5.17: `n`, `logprobs`, `tool_choice`,
`response_format` and others are answered with HTTP 200 and dropped, not refused): the kit must send none of them."""


def test_served_and_in_process_evaluations_make_the_same_calls_task_by_task(served, tmp_path):
    base_url, log = served
    local = evaluate(str(POLICY), tmp_path / "local.json", tmp_path)
    remote = evaluate(f"openai:{POLICY}", tmp_path / "served.json", tmp_path, "--base-url", base_url)
    assert local["metrics"][0]["n"] == remote["metrics"][0]["n"] == TASKS
    by_task = {r["task_id"]: r for r in read_jsonl(tmp_path / "local.rollouts.jsonl")}
    served_records = {r["task_id"]: r for r in read_jsonl(tmp_path / "served.rollouts.jsonl")}
    assert len(by_task) == TASKS and set(served_records) <= set(by_task)
    for task_id, record in served_records.items():  # every task the server answered: the same episode
        calls = [[call for call in step["calls"]] for step in record["steps"]]
        assert calls == [step["calls"] for step in by_task[task_id]["steps"]], task_id
        assert record["turn_valid"] == by_task[task_id]["turn_valid"], task_id
        assert record["success"] == by_task[task_id]["success"], task_id
    # The one known difference: when the policy writes a malformed tool call, the server's own tool-call parser
    # raises (HTTP 500, a JSONDecodeError in its log) where the in-process parser keeps it as a rejected call. The kit
    # retries, then counts a model error (the episode fails, is counted, and is redone by a resumed evaluation).
    unanswered = set(by_task) - set(served_records)
    assert remote["details"]["model_errors"] == len(unanswered) <= 2
    if unanswered:
        text = log.read_text()
        assert "500 Internal Server Error" in text and "JSONDecodeError" in text
    assert len(served_records) >= TASKS - 2
    assert IGNORED not in log.read_text()


def test_a_server_slower_than_the_deadline_is_one_line_and_the_rerun_measures_everything(served, tmp_path):
    """The server is slower than the reply deadline (`evaluation.deadline_s`, 10 ms here): each episode's reply gives
    up in bounded time, the command says so in one line (status 1, no traceback), and the same command with the
    profile's deadline measures every episode (nothing was kept from the first)."""
    base_url, _ = served
    out, started = tmp_path / "slow.json", time.monotonic()
    stderr = evaluate(f"openai:{POLICY}", out, tmp_path, "--base-url", base_url, "--set", "evaluation.deadline_s=0.01",
                      limit=4, status=1)
    lines = [line for line in stderr.splitlines() if "every episode ended in a model error" in line]
    assert len(lines) == 1 and "Traceback" not in stderr and "no time left for another try" in lines[0], stderr
    assert time.monotonic() - started < 120
    again = evaluate(f"openai:{POLICY}", out, tmp_path, "--base-url", base_url, limit=4)
    assert again["metrics"][0]["n"] == 4 and again["details"]["resumed_episodes"] == 0


ROUND = FeedbackConfig(explore=ExploreConfig(explorer="llm", context_builder="llm", runs=2, calls_per_run=2),
                       synthesis=SynthesisConfig(abstraction="llm", judge=True))
"""An LLM feedback round on one target with every LLM stage: context builder, explorer, abstraction and judge."""


def recorded_round(model_name: str, base_url: str, folder) -> tuple[dict, OpenAIChatModel]:
    """ROUND with the served model, recorded into `folder/llm_calls.jsonl`: its report and the live client."""
    [target] = boundary_targets(1)
    model = OpenAIChatModel(model_name, base_url=base_url, timeout=60.0)
    report = feedback_round(1, folder / "round_001", [target], TaskPool(folder / "pool.jsonl"), ROUND,
                            BFCL.round_stages(), RecordedChatModel(model_name, folder / "llm_calls.jsonl", model),
                            progress=False)
    return report, model


def check_replayed_round(model_name: str, folder, report: dict) -> None:
    """The round again, from its recording alone (no client, no endpoint), in a fresh folder: the same report, and
    every file byte for byte but the wall times of timings.json."""
    [target] = boundary_targets(1)
    replay_dir = folder / "replay"
    again = feedback_round(1, replay_dir / "round_001", [target], TaskPool(replay_dir / "pool.jsonl"), ROUND,
                           BFCL.round_stages(), RecordedChatModel(model_name, folder / "llm_calls.jsonl"),
                           progress=False)
    assert again == report
    assert differing_files(folder, replay_dir, ("round_001/timings.json", "llm_calls.jsonl", "replay")) == []


def test_a_full_llm_feedback_round_runs_against_the_real_server(served, tmp_path):
    """Context builder, explorer, abstraction and judge all through the served policy. A tiny policy is a poor
    explorer: what the round measures is that every stage's calls reach the server and come back counted, and that
    whatever it wrote is validated and its rejections given reasons."""
    base_url, log = served
    before = requests_logged(log)
    report, model = recorded_round(str(POLICY), base_url, tmp_path)
    requests = requests_logged(log) - before
    calls = {stage: cost["calls"] for stage, cost in report["cost"].items()}
    skipped = report["cost"]["explore"]["skipped"]
    # every request the server saw is a counted call or a counted retry; nothing is lost or crashes the round
    assert requests == sum(calls.values()) + model.num_retries and calls["explore"] >= 1
    assert (tmp_path / "round_001" / "report.json").exists() and report["triplets"] <= 2 * 2
    assert report["accepted"] + sum(report["rejection_reasons"].values()) == report["specs"]
    assert IGNORED not in log.read_text()
    if skipped.get("model_error"):  # measured: the tiny policy writes a malformed <tool_call> even when no tools
        # were sent, and the server's own response parser raises on it (HTTP 500); the kit retries, then counts it
        assert "json parser could not parse region as JSON" in log.read_text()
    # One record line per ask, errors included; replayed from it alone, the same round
    assert len(read_jsonl(tmp_path / "llm_calls.jsonl")) == sum(calls.values())
    check_replayed_round(str(POLICY), tmp_path, report)
    # the IGNORED checks can fail: a field the server drops is logged so (the last test on this server: it is left in)
    openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0).chat.completions.create(
        model=str(POLICY), messages=[{"role": "user", "content": "hi"}], max_tokens=2, n=2)
    assert IGNORED in log.read_text()


def boundary_targets(count: int) -> list:
    """Exploration targets of `count` file-system tasks, each with a boundary signal on a failed trajectory."""
    tasks = [t for t in load_tasks("v3", "base") if t.involved_classes == ["GorillaFileSystem"]][:count]
    return [replace(BFCL.target(task), signal={"signal_id": f"boundary/0/x/{i}", "type": "boundary",
                                               "rollout_id": f"0/x/{i}", "task_id": task.id, "step": 0,
                                               "evidence": {"group_scores": [1.0, 0.0]}},
                    trajectory={"rollout_id": f"0/x/{i}", "task_id": task.id, "score": 0.0, "steps": [],
                                "success": False}) for i, task in enumerate(tasks)]


def test_a_server_killed_mid_round_costs_counted_errors_and_the_recorded_rerun_asks_only_what_is_missing(tmp_path):
    """The server dies during a recorded round: the asks still in flight or to come end as counted model errors in
    bounded time and the round finishes. Run again in record mode against the restarted server, the round asks it
    only what the recording lacks or holds as an error: every reply the first server gave is reused, none paid twice."""
    port, record = free_port(), tmp_path / "llm_calls.jsonl"
    config = FeedbackConfig(explore=ExploreConfig(explorer="llm", context_builder="llm", runs=2, calls_per_run=2),
                            synthesis=SynthesisConfig(abstraction="deterministic"))
    targets = boundary_targets(6)

    def run_round(base_url: str):
        live = OpenAIChatModel(str(POLICY), base_url=base_url, timeout=30.0, max_retries=1, backoff_s=0.05)
        report = feedback_round(1, tmp_path / "round_001", targets, TaskPool(tmp_path / "pool.jsonl"), config,
                                BFCL.round_stages(), RecordedChatModel(str(POLICY), record, live), progress=False)
        return report, live

    with transformers_serve(POLICY, tmp_path / "first.log", port) as (base_url, _, server):
        finished = threading.Event()

        def kill_after_two_answers():
            while not finished.is_set() and sum(r["reply"]["error"] is None for r in read_jsonl(record)) < 2:
                time.sleep(0.05)
            server.kill()

        killer = threading.Thread(target=kill_after_two_answers)
        killer.start()
        first, _ = run_round(base_url)
        finished.set()
        killer.join()
    lines = read_jsonl(record)
    answered = {(r["scope"], r["key"], r["n"]) for r in lines if r["reply"]["error"] is None}
    assert len(answered) >= 2 and first["cost"]["explore"]["skipped"].get("context_model_error", 0) + \
        first["cost"]["explore"]["skipped"].get("model_error", 0) >= 1  # the asks after the kill, counted
    shutil.rmtree(tmp_path / "round_001")  # a finished round is kept: to redo it, its folder goes
    with transformers_serve(POLICY, tmp_path / "second.log", port) as (base_url, log, _):
        second, live = run_round(base_url)
    new = read_jsonl(record)[len(lines):]
    requests = requests_logged(log)
    # Every live reply is a new line, so nothing answered before was asked again; the server's log agrees (each new
    # line is one request and its retries; measured once 34 logged for 22 lines and 13 counted retries, so the count
    # is bounded, not matched: a retry's request can fail before the server logs it).
    assert not {(r["scope"], r["key"], r["n"]) for r in new} & answered
    assert len(new) <= requests <= len(new) + live.num_retries
    assert second["targets"] == len(targets) and (tmp_path / "round_001" / "report.json").exists()


def differing_files(recorded, replayed, unlike: tuple[str, ...]) -> list[str]:
    """The files two run folders hold with other bytes (both must hold the same names), but for the paths in
    `unlike`."""
    def files(folder):
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
                if p.is_file() and not any(str(p.relative_to(folder)).startswith(u) for u in unlike)}

    ours, theirs = files(recorded), files(replayed)
    assert sorted(ours) == sorted(theirs) and "round_001/report.json" in ours, (sorted(ours), sorted(theirs))
    return [name for name in ours if ours[name] != theirs[name]]


def test_a_server_killed_mid_evaluation_costs_counted_model_errors_and_the_rerun_resumes(tmp_path):
    """The server dies while episodes are in flight: the client's bounded retries end each unanswered episode as a
    counted model error (no traceback), finished episodes stay on disk, and the same command against the restarted
    server runs only the episodes that are missing."""
    port, out = free_port(), tmp_path / "served.json"
    rollouts = out.with_suffix(".rollouts.jsonl")
    with transformers_serve(POLICY, tmp_path / "first.log", port) as (base_url, _, server):
        run = subprocess.Popen(evaluate_command(f"openai:{POLICY}", out, "--base-url", base_url), cwd=REPO_ROOT,
                               env={**os.environ, "COEVOLVE_RUNS_DIR": str(tmp_path)}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while len(read_jsonl(rollouts)) < 5 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        server.kill()
        stdout, stderr = run.communicate(timeout=300)
    kept = read_jsonl(rollouts)
    assert 5 <= len(kept) < TASKS and "Traceback" not in stderr, stderr[-2000:]
    first = json.loads(out.read_text())
    assert first["details"]["model_errors"] == TASKS - len(kept)  # every unanswered episode counted, none lost
    with transformers_serve(POLICY, tmp_path / "second.log", port) as (base_url, log, _):
        second = evaluate(f"openai:{POLICY}", out, tmp_path, "--base-url", base_url)
    again = read_jsonl(rollouts)
    assert again[:len(kept)] == kept  # the finished episodes are kept as they were, not run again
    assert {r["task_id"] for r in again} >= {r["task_id"] for r in kept} and len(again) >= TASKS - 2
    assert second["metrics"][0]["n"] == TASKS and second["details"]["model_errors"] == TASKS - len(again)


KIT_WITH_A_SERVER = '''
import sys, time
from pathlib import Path
from coevolve_lib.cli.local_servers import transformers_serve
with transformers_serve(sys.argv[1], Path(sys.argv[2])):
    print("started", flush=True)
    time.sleep(600)
'''


def test_a_served_model_dies_with_the_kit_however_the_kit_ends(tmp_path):
    """Issue 47: `transformers serve` starts in a session of its own (its group is stopped whole), so a kit process
    killed with SIGKILL, which runs no `finally`, left it serving, parent 1. The parent-death signal takes it down."""
    alive = children_alive_after_kill(KIT_WITH_A_SERVER, str(POLICY), str(tmp_path / "server.log"), folder=tmp_path)
    assert not alive, [p.pid for p in alive]
