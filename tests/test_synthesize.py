"""Task abstraction and validation on triplets made from real BFCL executions; the LLM path against the real
loopback server (scripted replies and injected faults)."""

from collections import Counter

import pytest
from helpers import checker_accepts

from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.engine.explore import group_triplets
from coevolve_lib.engine.judge import judge, parse_judge
from coevolve_lib.engine.llm_abstraction import parse_task_blocks
from coevolve_lib.engine.tasks import accept_unvalidated, content_id, to_pool_task
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.abstraction import abstract
from coevolve_lib.envs.bfcl.abstraction_deterministic import _description
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.envs.bfcl.tiny_model import build_tiny
from coevolve_lib.envs.bfcl.validation import validate
from coevolve_lib.prompts import prompt_fields

CONFIG = SynthesisConfig()
FILE_RUN = ["ls()", "cd(folder='nope')", "cd(folder='document')", "mkdir(dir_name='temp')",
            "mv(source='final_report.pdf', destination='temp')", "cd(folder='temp')", "ls()", "wc(file_name='zz')"]
ECHO_RUN = ["cd(folder='archive')", "touch(file_name='notes.txt')",
            "echo(content='budget 2024', file_name='notes.txt')", "cat(file_name='notes.txt')", "rm -rf /"]



@pytest.fixture(scope="module")
def task():
    return next(t for t in load_tasks("v3", "base") if t.id == "multi_turn_base_0")  # TwitterAPI + file system


def source_of(task, signal_id=None):
    return {"task_id": task.id, "data_version": "v3", "initial_config": task.initial_config,
            "involved_classes": task.involved_classes, "description": task.turns[0][0]["content"],
            "signal_id": signal_id, "signal_type": None, "context_id": None}


def make_triplets(task, runs: dict[str, list[str]], signal_id=None) -> list[dict]:
    """triplet/v1 records from executing each run for real in a fresh env of the task."""
    triplets = []
    for run_id, actions in runs.items():
        env = BFCLEnv.from_config(task.initial_config, task.involved_classes)
        for step, action in enumerate(actions):
            [observation] = env.execute(action)
            accepted = not observation.startswith("Error during execution")
            triplets.append({"schema": "triplet/v1", "run_id": run_id, "step": step, "action": action,
                             "observation": observation, "valid": accepted, "task_id": task.id,
                             "signal_id": signal_id, "signal_type": None, "explorer": "schema"})
    return triplets


def spec_of(task, actions, query="Do it."):
    return {"schema": "taskspec/v1", "spec_id": content_id(task.initial_config, query, actions), "intent": "test",
            "query": query, "action_sequence": actions, "completion_criterion": "c",
            "initial_config": task.initial_config, "involved_classes": task.involved_classes, "data_version": "v3",
            "source": {"task_id": task.id, "signal_id": None, "signal_type": None, "context_id": None,
                       "run_ids": []}, "abstraction": "deterministic"}


def argument_values(action):
    call = parse_call(action)
    return [*call.args, *call.kwargs_dict.values()]


# ------------------------------------------------------------------------------------------ deterministic

def test_group_triplets_keys_and_natural_run_order(task):
    triplets = make_triplets(task, {"ctx/a/run10": ["ls()"], "ctx/a/run2": ["pwd()", "ls()"]}, signal_id="rare/1")
    triplets += make_triplets(task, {"unguided/x/run0": ["ls()"]})
    groups = group_triplets(list(reversed(triplets)))
    assert set(groups) == {(task.id, "rare/1"), (task.id, None)}
    assert [(t["run_id"], t["step"]) for t in groups[(task.id, "rare/1")]] == [
        ("ctx/a/run2", 0), ("ctx/a/run2", 1), ("ctx/a/run10", 0)]


def test_deterministic_abstraction_on_real_executions(task):
    runs = {"u/run0": FILE_RUN, "u/run1": FILE_RUN, "u/run2": ECHO_RUN, "u/run3": ["ls()", "pwd()", "cd(folder='x')"]}
    specs, cost = abstract((task.id, None), make_triplets(task, runs), source_of(task), CONFIG)
    assert cost["skipped"] == {"duplicate": 1, "too_few_actions": 1}  # run1 repeats run0; run3 has 2 clean calls
    assert cost["calls"] == 0 and len(specs) == 2
    for spec in specs:
        assert spec["schema"] == "taskspec/v1" and CONFIG.min_calls <= len(spec["action_sequence"]) <= CONFIG.max_calls
        assert spec["spec_id"] == content_id(task.initial_config, spec["query"], spec["action_sequence"])
        assert "cd(folder='nope')" not in spec["action_sequence"]  # a failed no-op probe is dropped
        assert "wc(file_name='zz')" not in spec["action_sequence"]
        for action in spec["action_sequence"]:
            for value in argument_values(action):
                assert repr(value) in spec["query"]  # the agent can copy every argument value
        assert spec["query"].endswith(".") and ", then " in spec["query"]
        verdict = validate(spec, CONFIG)
        assert (verdict["accepted"], verdict["reason"], verdict["reasons"]) == (True, "objective_met", [])
        assert verdict["task_id"] == spec["spec_id"] and verdict["reference_actions"] == spec["action_sequence"]
    first = specs[0]
    assert first["source"]["run_ids"] == ["u/run0"] and "mkdir(dir_name='temp')" in first["action_sequence"]
    assert first["query"].startswith("List the contents") or first["query"].startswith("Change the current")
    # Same triplets, same specs: abstraction is deterministic.
    again, _ = abstract((task.id, None), make_triplets(task, runs), source_of(task), CONFIG)
    assert [s["spec_id"] for s in again] == [s["spec_id"] for s in specs]


def test_short_queries_name_each_step_by_the_first_words_of_its_description(task):
    short = SynthesisConfig(description_words=4)
    runs = {"u/run0": FILE_RUN}
    [spec], _ = abstract((task.id, None), make_triplets(task, runs), source_of(task), short)
    [full], _ = abstract((task.id, None), make_triplets(task, runs), source_of(task), CONFIG)
    assert spec["action_sequence"] == full["action_sequence"] and len(spec["query"]) < len(full["query"])
    assert "create a new directory (dir_name: 'temp')" in spec["query"]
    assert "create a new directory in the current directory (dir_name: 'temp')" in full["query"]
    # four words still tell the functions of a class apart
    docs = {d["name"]: ("GorillaFileSystem", d) for d in bfcl_backend.func_docs("v3", "GorillaFileSystem")}
    phrases = [_description(name, docs, 4) for name in docs]
    assert len(set(phrases)) == len(phrases)


def test_window_skips_calls_that_fail_without_their_prefix(task):
    # `cat` works only after `cd(folder='document')`; a max_calls=3 window must keep the cd with it.
    run = ["ls()", "pwd()", "ls()", "cd(folder='document')", "cat(file_name='final_report.pdf')",
           "touch(file_name='x.txt')"]
    specs, _ = abstract((task.id, None), make_triplets(task, {"r/run0": run}), source_of(task),
                        SynthesisConfig(max_calls=3))
    [spec] = specs
    assert spec["action_sequence"] == run[3:]
    assert validate(spec, CONFIG)["reason"] == "objective_met"


# ---------------------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("actions, reason", [
    (["ls()", "pwd()"], "too_short"),
    (["ls()", "__import__('os').system('x')", "pwd()"], "invalid_call"),
    (["ls()", "no_such_function(a=1)", "pwd()"], "invalid_call"),
    (["ls()", "mkdir(folder='x')", "pwd()"], "call_error"),  # "Error during execution: ... unexpected keyword"
    (["ls()", "cat(file_name='missing.txt')", "pwd()"], "call_error"),  # the backend's {"error": ...}, no change
    (["echo(content='')", "echo(content='')", "echo(content='')"], "no_effect"),
])
def test_each_rejection_reason(task, actions, reason):
    verdict = validate(spec_of(task, actions), CONFIG)
    assert verdict["schema"] == "verdict/v1" and not verdict["accepted"]
    assert verdict["reason"] == reason and verdict["reasons"] == [reason] and verdict["detail"]
    assert len(verdict["observations"]) == len(actions)


def test_duplicate_and_all_reasons_recorded(task):
    spec = spec_of(task, ["ls()", "mkdir(dir_name='new')", "cd(folder='new')"])
    assert validate(spec, CONFIG)["accepted"]
    assert validate(spec, CONFIG, known_task_ids={spec["spec_id"]})["reasons"] == ["duplicate"]
    several = validate(spec_of(task, ["echo(content='')", "nope()"]), CONFIG, known_task_ids=set())
    assert several["reasons"] == ["too_short", "invalid_call", "no_effect"]


def test_without_validation_a_failing_spec_is_kept_unexecuted(task):
    failing = spec_of(task, ["ls()", "cat(file_name='missing.txt')", "pwd()"])  # validation says call_error
    assert validate(failing, CONFIG)["reason"] == "call_error"
    verdict = accept_unvalidated(failing, CONFIG)
    assert verdict["accepted"] and verdict["reason"] == "unvalidated" and verdict["observations"] == []
    assert verdict["reference_actions"] == failing["action_sequence"]
    assert to_pool_task(failing, verdict, 1)["provenance"]["verdict"] == "unvalidated"
    assert accept_unvalidated(failing, CONFIG, known_task_ids={verdict["task_id"]})["reason"] == "duplicate"
    assert accept_unvalidated(spec_of(task, ["ls()", "pwd()"]), CONFIG)["reason"] == "too_short"


def test_nondeterministic_backend_is_rejected(task, monkeypatch):
    # The BFCL classes seed their own RNGs from the scenario, so two fresh envs agree; simulate a backend
    # that does not (e.g. one reading a clock) to show the check fires.
    counter = iter(range(1000))
    file_system = bfcl_backend.backend_class("v3", "GorillaFileSystem")
    monkeypatch.setattr(file_system, "pwd", lambda self: {"current_working_directory": f"/t{next(counter)}"})
    verdict = validate(spec_of(task, ["mkdir(dir_name='a')", "pwd()", "ls()"]), CONFIG)
    assert verdict["reasons"] == ["nondeterministic"]


def test_positive_reward_keeps_the_successful_calls(task):
    actions = ["mkdir(dir_name='a')", "cat(file_name='missing.txt')", "touch(file_name='b.txt')", "mkdir(dir_name='c')"]
    spec = spec_of(task, actions)
    verdict = validate(spec, CONFIG)
    assert (verdict["accepted"], verdict["reason"]) == (True, "positive_reward")
    assert verdict["reference_actions"] == [a for a in actions if not a.startswith("cat")]
    pool_task = to_pool_task(spec, verdict, pool_version=1)
    assert pool_task["task_id"] == verdict["task_id"] != spec["spec_id"]
    assert checker_accepts(pool_task, [[a] for a in pool_task["reference_actions"]])
    # Too few successful calls left: no positive reward.
    short = validate(spec_of(task, ["mkdir(dir_name='a')", "cat(file_name='missing.txt')", "ls()"]), CONFIG)
    assert short["reasons"] == ["call_error"]


# ---------------------------------------------------------------------------------------------- pool tasks

def test_pool_task_reward_is_the_bfcl_checker(task):
    actions = ["cd(folder='document')", "mkdir(dir_name='temp')", "mv(source='final_report.pdf', destination='temp')",
               "ls()"]
    spec = spec_of(task, actions, query="Make a temp folder in document and move final_report.pdf into it.")
    verdict = validate(spec, CONFIG)
    pool_task = to_pool_task(spec, verdict, pool_version=2, provenance_extra={"round": 2})
    assert pool_task["schema"] == "task/v1" and pool_task["pool_version"] == 2
    assert pool_task["provenance"]["verdict"] == "objective_met" and pool_task["provenance"]["round"] == 2
    bfcl_task = pool_task_to_bfcl(pool_task)
    assert bfcl_task.turns == [[{"role": "user", "content": spec["query"]}]]
    assert bfcl_task.ground_truth == [actions] and bfcl_task.category == "synthetic" and not bfcl_task.long_context
    assert checker_accepts(pool_task, [[a] for a in actions])
    assert checker_accepts(pool_task, [actions[:2], actions[2:]])  # parallel calls in one step
    assert not checker_accepts(pool_task, [[a] for a in actions if not a.startswith("mv")])
    assert not checker_accepts(pool_task, [])
    with pytest.raises(ValueError, match="no accepting verdict"):
        to_pool_task(spec, {**verdict, "accepted": False, "reason": "call_error"}, 0)


# --------------------------------------------------------------------------------------------- LLM path

VALID_BLOCK = """<task>
**Description:** Archive the final report.
**Query:** Go into 'document', make a folder 'temp' and move 'final_report.pdf' into it.
**ActionSequence:**
# step0 `cd(folder='document')`
2. mkdir(dir_name='temp')
- mv(source='final_report.pdf', destination='temp')
Criterion: final_report.pdf is inside document/temp.
</task>"""
REPLY = VALID_BLOCK + """
<task>
Description: Broken.
Query: Delete everything.
ActionSequence:
1. os.system('rm -rf /')
2. ls()
3. pwd()
Criterion: gone.
</task>
<task>
Description: no query here
ActionSequence:
1. ls()
</task>"""


@pytest.fixture(scope="module")
def tiny():
    build_tiny()  # no-op when `make setup` already built it
    return load_chat_model("tiny")


def client(server, max_retries=2):
    return OpenAIChatModel("tiny", base_url=server.base_url, timeout=5, backoff_s=0.01, max_retries=max_retries)


def test_prompts_have_the_fields_the_code_fills():
    assert prompt_fields("abstract") == {"environment", "triplets", "min_steps", "output_format"}
    assert prompt_fields("judge") == {"task_description", "query", "ground_truth", "modality_hint",
                                      "trajectory_summary", "final_observation"}


def test_parse_blocks_and_judge_robustly():
    skipped = Counter()
    blocks = parse_task_blocks(REPLY + "\n<task>\nDescription: cut off", skipped)
    assert len(blocks) == 3 and skipped == {"unclosed_block": 1}
    assert blocks[0]["query"].startswith("Go into") and "mkdir" in blocks[0]["action_sequence"]
    assert parse_task_blocks("no blocks", skipped) == [] and skipped["no_task_block"] == 1
    assert parse_judge("Success: [true]\nReason: [all calls made]") == {"success": True, "reason": "all calls made"}
    assert parse_judge("**Success**: False\n**Reason**: wrong file")["success"] is False
    assert parse_judge("Success: true ... on reflection Success: false") is None
    assert parse_judge("It looks fine to me.") is None


def test_llm_abstraction_and_judge_end_to_end(task, tiny):
    llm = SynthesisConfig(abstraction="llm", judge=True)
    triplets = make_triplets(task, {"ctx/c/run0": FILE_RUN, "ctx/c/run1": ECHO_RUN}, signal_id="boundary/7")
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=REPLY)) as server:
        specs, cost = abstract((task.id, "boundary/7"), triplets, source_of(task, "boundary/7"), llm, client(server))
        assert server.num_requests == 1
    assert cost["skipped"] == {"invalid_action": 1, "missing_field": 1} and cost["calls"] == 1
    [spec] = specs
    assert spec["abstraction"] == "llm" and spec["source"]["run_ids"] == ["ctx/c/run0", "ctx/c/run1"]
    assert spec["action_sequence"] == ["cd(folder='document')", "mkdir(dir_name='temp')",
                                       "mv(source='final_report.pdf', destination='temp')"]
    assert spec["completion_criterion"] == "final_report.pdf is inside document/temp."
    for reply, accepted, reason in [("Success: true\nReason: all three calls succeed.", True, "objective_met"),
                                    ("Success: false\nReason: the query names another file.", False, "judge_rejected")]:
        with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply)) as server:
            verdict = validate(spec, llm, client(server))
        assert (verdict["accepted"], verdict["reason"]) == (accepted, reason)
        assert verdict["judge"]["success"] is accepted and verdict["judge_error"] is None
        assert verdict["cost"]["calls"] == 1
    with ChatServer(tiny, faults=FaultConfig(scripted_reply="Looks good!")) as server:
        verdict = validate(spec, llm, client(server))
    assert verdict["accepted"] and verdict["judge"] is None and verdict["judge_error"].startswith("unparsable")
    # A spec the execution rejects never reaches the judge.
    with ChatServer(tiny, faults=FaultConfig(scripted_reply="Success: true\nReason: x")) as server:
        verdict = validate(spec_of(task, ["ls()", "pwd()"]), llm, client(server))
        assert server.num_requests == 0 and verdict["reason"] == "too_short"


@pytest.mark.parametrize("faults, specs_expected, requests", [
    (FaultConfig(faults=["500"], scripted_reply=VALID_BLOCK), 1, 2),  # retried, then served
    (FaultConfig(always="500", scripted_reply=VALID_BLOCK), 0, 3),  # retry budget spent
    (FaultConfig(always="malformed", scripted_reply=VALID_BLOCK), 0, 3),  # a body that is not JSON
])
def test_llm_abstraction_survives_faults(task, tiny, faults, specs_expected, requests):
    llm = SynthesisConfig(abstraction="llm")
    triplets = make_triplets(task, {"r/run0": FILE_RUN})
    with ChatServer(tiny, faults=faults) as server:
        specs, cost = abstract((task.id, None), triplets, source_of(task), llm, client(server))
        assert server.num_requests == requests
    assert len(specs) == specs_expected and cost["calls"] == 1
    assert cost["skipped"] == ({} if specs_expected else {"api_error": 1})


def test_judge_api_error_keeps_the_execution_verdict_and_the_judge_reads_rollouts(task, tiny):
    spec = spec_of(task, ["cd(folder='document')", "mkdir(dir_name='temp')", "ls()"])
    with ChatServer(tiny, faults=FaultConfig(always="500")) as server:
        verdict = validate(spec, SynthesisConfig(judge=True), client(server, max_retries=0))
    assert verdict["accepted"] and verdict["judge"] is None and verdict["judge_error"].startswith("api_error")
    pool_task = to_pool_task(spec, verdict, 0)
    rollout = {"schema": "rollout/v1", "steps": [
        {"turn": 0, "step": 0, "calls": spec["action_sequence"][:2], "observations": verdict["observations"][:2]},
        {"turn": 0, "step": 1, "calls": spec["action_sequence"][2:], "observations": verdict["observations"][2:]}]}
    for reply, expected in [("Success: true\nReason: ok", True), ("Success: false\nReason: no", False), ("hmm", None)]:
        with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply)) as server:
            verdict, _ = judge(pool_task["intent"], pool_task["query"], pool_task["reference_actions"],
                               rollout["steps"], client(server), SynthesisConfig(max_new_tokens=256), Cost())
            assert (None if verdict is None else verdict["success"]) == expected
