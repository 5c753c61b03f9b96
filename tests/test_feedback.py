"""A feedback round end to end on real BFCL environments: D_0, a signal-guided round, resume after a kill,
and the LLM path against the real loopback server with injected faults."""


from dataclasses import replace

import pytest
from helpers import BFCL, checker_accepts

import coevolve_lib.engine.feedback as feedback
from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
from coevolve_lib.core.config import ExploreConfig, SynthesisConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.feedback import FeedbackConfig, feedback_round, synthesize_initial
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.engine.pool_updates.guided import select_targets
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks


@pytest.fixture(scope="module")
def train_tasks():
    return split_tasks(load_tasks("v3", "base"), "train")


def test_d0_yields_validated_multistep_tasks_that_the_checker_can_grade(tmp_path, train_tasks):
    pool = TaskPool(tmp_path / "pool.jsonl")
    report = synthesize_initial(train_tasks[:40], pool, tmp_path / "round_000", FeedbackConfig(), BFCL.target,
                                BFCL.round_stages(), size=30,
                                progress=False)
    assert report["added_to_pool"] == len(pool) == 30 and pool.version == 0
    assert report["signal_types"] == {"unguided": 40} and report["specs"] >= 30
    for task in pool.tasks:
        assert len(task["reference_actions"]) >= 3
        assert checker_accepts(task, [task["reference_actions"]])
        assert not checker_accepts(task, [task["reference_actions"][:1]]) or not _changes_state(task)


def _changes_state(task):
    env = BFCLEnv.from_config(task["initial_config"], task["involved_classes"], task["data_version"])
    before = env.state()
    env.execute(task["reference_actions"][1:])
    return env.state() != before


def _signal_round_inputs(pool):
    """Signals and trajectories on pool tasks: a failed rollout per task, as the extractor would mark them."""
    signals, rollouts = [], {}
    for index, task in enumerate(pool.tasks[:6]):
        env = BFCLEnv.from_config(task["initial_config"], task["involved_classes"], task["data_version"])
        calls = task["reference_actions"][:1]
        rollout_id = f"3/{task['task_id']}/0"
        rollouts[rollout_id] = {"rollout_id": rollout_id, "task_id": task["task_id"], "step": 3, "score": 0.0,
                                "steps": [{"turn": 0, "step": 0, "calls": calls, "observations": env.execute(calls)}],
                                "error_type": "multi_turn:instance_state_mismatch", "success": False}
        signal_type = ["forgetting", "boundary", "rare"][index % 3]
        signals.append({"schema": "signal/v1", "signal_id": f"{signal_type}/{rollout_id}", "type": signal_type,
                        "rollout_id": rollout_id, "task_id": task["task_id"], "step": 3, "evidence": {}})
    return signals, rollouts


def test_signal_round_grows_the_pool_with_provenance(tmp_path, train_tasks):
    pool = TaskPool(tmp_path / "pool.jsonl")
    synthesize_initial(train_tasks[:20], pool, tmp_path / "round_000", FeedbackConfig(), BFCL.target,
                       BFCL.round_stages(), size=10, progress=False)
    signals, rollouts = _signal_round_inputs(pool)
    pairs = select_targets(signals, rollouts, max_targets=6)
    assert sorted(s["type"] for s, _ in pairs) == ["boundary"] * 2 + ["forgetting"] * 2 + ["rare"] * 2
    targets = [ExplorationTarget.from_pool_task(next(t for t in pool.tasks if t["task_id"] == s["task_id"]), BFCL, s, r)
               for s, r in pairs]
    report = feedback_round(1, tmp_path / "round_001", targets, pool, FeedbackConfig(), BFCL.round_stages(),
                            progress=False)
    new = [t for t in pool.tasks if t["pool_version"] == 1]
    assert report["added_to_pool"] == len(new) > 0 and pool.version == 1
    assert set(report["signal_types"]) == {"forgetting", "boundary", "rare"}
    assert report["accepted"] + sum(report["rejection_reasons"].values()) == report["specs"]
    provenance = new[0]["provenance"]
    assert provenance["signal"]["type"] in ("forgetting", "boundary", "rare")
    assert (provenance["context"]["focus_pattern"]
            and provenance["context"]["signal_id"] == provenance["signal"]["signal_id"])


class Killed(BaseException):
    """Stands for the process dying: a BaseException, as KeyboardInterrupt is (the kit contains what an environment
    raises, never a kill)."""


@pytest.mark.parametrize("stage", ["explore", "validate", "commit"])
def test_a_killed_round_resumes_without_losing_or_duplicating_tasks(tmp_path, monkeypatch, train_tasks, stage):
    targets = [BFCL.target(t) for t in train_tasks[:12]]
    reference_pool = TaskPool(tmp_path / "ref" / "pool.jsonl")
    reference = feedback_round(0, tmp_path / "ref" / "round_000", targets, reference_pool, FeedbackConfig(),
                               BFCL.round_stages(), progress=False)

    pool_path = tmp_path / "killed" / "pool.jsonl"
    calls = {"n": 0}
    real = {"explore": BFCL.round_stages().explore, "validate": BFCL.round_stages().validate}

    def dying(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise Killed
        return real[stage](*args, **kwargs)

    steps = BFCL.round_stages()
    if stage == "commit":  # dies after the pool was written, before the report
        monkeypatch.setattr(feedback, "write_json_atomic", lambda *a, **k: (_ for _ in ()).throw(Killed()))
    else:
        steps = replace(steps, **{stage: dying})
    with pytest.raises(Killed):
        feedback_round(0, tmp_path / "killed" / "round_000", targets, TaskPool(pool_path), FeedbackConfig(), steps,
                       progress=False)
    monkeypatch.undo()

    pool = TaskPool(pool_path)
    report = feedback_round(0, tmp_path / "killed" / "round_000", targets, pool, FeedbackConfig(), BFCL.round_stages(),
                            progress=False)
    assert [t["task_id"] for t in pool.tasks] == [t["task_id"] for t in reference_pool.tasks]
    assert len(pool.ids) == len(pool.tasks)  # no duplicates
    for key in ("specs", "accepted", "added_to_pool", "pool_size", "rejection_reasons"):
        assert report[key] == reference[key]


def test_llm_mode_round_survives_faults_on_the_real_loopback_server(tmp_path, train_tasks):
    """Contexts, exploration, abstraction and judging through HTTP; a scripted reply stands in for a strong explorer
    (the tiny model is random), and the server injects 500s, a timeout and malformed bodies."""
    reply = ('{"summary": "s", "failure_cause": "c", "instability_pattern": "p", "focus_pattern": ["ls"], '
             '"exploration_objectives": ["o"], "do_not_repeat": []}\n<action>ls()</action>\n'
             '<task>\nDescription: list twice then pwd\nQuery: List the folder, list it again, print the path.\n'
             "ActionSequence:\n1. ls()\n2. ls(a=True)\n3. pwd()\nCriterion: the three outputs are shown\n</task>\n"
             "Success: true\nReason: all calls made")
    faults = FaultConfig(faults=["500", "timeout", "malformed", "500"], delay_s=1.5, scripted_reply=reply)
    task = next(t for t in train_tasks if t.involved_classes == ["GorillaFileSystem"])
    pool = TaskPool(tmp_path / "pool.jsonl")
    signal = {"signal_id": "boundary/0/x/0", "type": "boundary", "rollout_id": "0/x/0", "task_id": task.id,
              "step": 0, "evidence": {"group_scores": [1.0, 0.0]}}
    trajectory = {"rollout_id": "0/x/0", "task_id": task.id, "score": 0.0, "steps": [], "success": False}
    config = FeedbackConfig(explore=ExploreConfig(explorer="llm", context_builder="llm", runs=2, calls_per_run=2),
                            synthesis=SynthesisConfig(abstraction="llm", judge=True))
    with ChatServer(load_chat_model("tiny"), faults=faults) as server:
        model = OpenAIChatModel("tiny", base_url=server.base_url, timeout=1.0, backoff_s=0.01, max_retries=3)
        target = replace(BFCL.target(task), signal=signal, trajectory=trajectory)
        report = feedback_round(1, tmp_path / "round_001", [target], pool, config, BFCL.round_stages(), model,
                                progress=False)
        requests = server.num_requests
    # 4 faults: 3 absorbed by the client's retries (its budget), the 4th exhausts it: a counted, skipped context
    # call that the context builder then retries once.
    assert model.num_retries == 3 and report["cost"]["explore"]["skipped"] == {"context_model_error": 1}
    assert requests == model.num_retries + sum(report["cost"][stage]["calls"] for stage in report["cost"])
    assert report["accepted"] == 1 and report["added_to_pool"] == 1
    assert report["cost"]["explore"]["calls"] >= 3 and report["cost"]["abstract"]["calls"] == 1
    [added] = pool.tasks
    assert added["reference_actions"] == ["ls()", "ls(a=True)", "pwd()"]
    assert added["provenance"]["context"]["builder"] == "llm"


def test_a_round_past_its_deadline_cuts_the_call_in_flight_and_skips_the_rest(tmp_path, train_tasks):
    """Issue 46: the collective timeout was sized from every explorer call at its deadline (52 h for 4B). A round now
    has a deadline of its own (`data_engine.round_deadline_s`): behind an endpoint that answers 20 s late, a round of
    three targets with a 2 s deadline cuts the first target's call at 2 s (a model error of the round) and skips the
    other two, counted; the round ends, and its rerun returns the same report."""
    import time

    tasks = [t for t in train_tasks if t.involved_classes == ["GorillaFileSystem"]][:3]
    pool = TaskPool(tmp_path / "pool.jsonl")
    config = FeedbackConfig(explore=ExploreConfig(explorer="llm", runs=1, calls_per_run=1, guided=False),
                            deadline_s=2.0)
    with ChatServer(load_chat_model("tiny"), faults=FaultConfig(always="timeout", delay_s=20)) as server:
        model = OpenAIChatModel("tiny", base_url=server.base_url, timeout=60, backoff_s=0.01, deadline_s=600)
        start = time.perf_counter()
        report = feedback_round(1, tmp_path / "round_001", [BFCL.target(task) for task in tasks], pool, config,
                                BFCL.round_stages(), model, progress=False)
        seconds = time.perf_counter() - start
    assert seconds < 8, seconds  # the call in flight cut at 2 s, not its 600 s deadline or the server's 20 s
    assert report["cost"]["explore"]["skipped"]["round_deadline"] == 2 and report["accepted"] == 0
    explorations = [line for line in (tmp_path / "round_001" / "explorations.jsonl").read_text().splitlines()]
    assert sum("data_engine.round_deadline_s" in line for line in explorations) == 2
    assert feedback_round(1, tmp_path / "round_001", [], pool, config, BFCL.round_stages(), model,
                          progress=False) == report


def test_a_spec_drafted_twice_is_validated_once_and_added(tmp_path, train_tasks):
    """Issue 47: verdicts were keyed by spec id, so a round that drafted the same spec from two groups replaced the
    first draft's acceptance with the second's `duplicate` and added nothing (specs 2, accepted 0, added 0), and its
    counts did not add up. Each spec is now validated once; its repeat is a duplicate beside the acceptance."""
    steps = BFCL.round_stages()
    first = {}

    def same_specs(group_key, triplets, source, synthesis, model):  # every group drafts the first group's specs
        if not first:
            first["drafts"] = steps.abstract(group_key, triplets, source, synthesis, model)
        return first["drafts"]

    pool = TaskPool(tmp_path / "pool.jsonl")
    report = feedback_round(1, tmp_path / "round_001", [BFCL.target(task) for task in train_tasks[:2]], pool,
                            FeedbackConfig(), replace(steps, abstract=same_specs), progress=False)
    drafted = len(first["drafts"][0])
    assert drafted > 0 and report["specs"] == 2 * drafted
    assert report["accepted"] > 0 and report["added_to_pool"] == report["accepted"] == len(pool)
    assert report["rejection_reasons"]["duplicate"] >= drafted  # every repeat, and nothing else lost
    assert report["accepted"] + sum(report["rejection_reasons"].values()) == report["specs"]
