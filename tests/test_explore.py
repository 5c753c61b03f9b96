"""Signal-guided re-exploration: prompts, JSON extraction, contexts, the schema explorer on real BFCL v3 tasks,
and the LLM explorer and context builder against the real loopback OpenAI server, with injected faults."""

import json
import re
from dataclasses import replace

import pytest
from helpers import BFCL

from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.core.llm_json import LLMOutputError, extract_json_object
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.engine.contexts import (
    CONTEXT_LIST_FIELDS,
    CONTEXT_TEXT_FIELDS,
    ExplorationTarget,
    build_context,
    heuristic_context,
)
from coevolve_lib.engine.signals import SIGNALS, Signal, register
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.explore import explore
from coevolve_lib.envs.bfcl.explore_llm import parse_action
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.envs.bfcl.tiny_model import build_tiny
from coevolve_lib.prompts import load_prompt, prompt_fields

PROMPT_FIELDS = {
    "explore_system": {"action_format"},
    "explore_user": {"exploration_guidance", "initial_obs", "history_text"},
    "guidance_forgetting": {"context"},
    "guidance_rare": {"context"},
    "guidance_boundary": {"context"},
    "guidance_unguided": set(),
    "context_summary": {"signal", "trajectory_context"},
}
WRONG_CALLS = ["mv(source='final_report.pdf', destination='temp')", "cd(folder='document')",
               "mkdir(dir_name='temp')", "cat(file_name='missing.txt')"]
# Two classes each: GorillaFileSystem, TwitterAPI, TradingBot, MessageAPI, TicketAPI, TravelAPI, VehicleControl, Math.
TASK_IDS = ["multi_turn_base_0", "multi_turn_base_10", "multi_turn_base_20", "multi_turn_base_40",
            "multi_turn_base_60", "multi_turn_base_80", "multi_turn_base_100", "multi_turn_base_120",
            "multi_turn_base_150", "multi_turn_base_180"]


@pytest.fixture(scope="module")
def tasks():
    return {task.id: task for task in load_tasks("v3", "base")}


@pytest.fixture(scope="module")
def failed_target(tasks):
    """A real failed trajectory: the wrong call sequence on task 0, scored by the env like a rollout."""
    task = tasks["multi_turn_base_0"]
    env = BFCLEnv(task)
    observations = env.execute(WRONG_CALLS)
    verdict = env.score()
    assert not verdict["success"]
    trajectory = {"schema": "rollout/v1", "task_id": task.id, "steps": [
        {"turn": 0, "step": 0, "raw": "", "calls": WRONG_CALLS, "observations": observations, "rejected": []}],
        "turn_valid": verdict["turn_valid"], "score": 0.0, "success": False, "terminated": "completed",
        "error_type": verdict["error_type"], "error_message": verdict["error_message"]}
    signal = {"schema": "signal/v1", "signal_id": "boundary/3/multi_turn_base_0/1", "type": "boundary",
              "rollout_id": "3/multi_turn_base_0/1", "task_id": task.id, "step": 3,
              "evidence": {"group_scores": [1.0, 0.0, 0.0, 1.0], "solved": 2}}
    return replace(BFCL.target(task), signal=signal, trajectory=trajectory)


# --- prompts and JSON -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROMPT_FIELDS))
def test_prompts_load_and_format(name):
    assert prompt_fields(name) == PROMPT_FIELDS[name]
    text = load_prompt(name).format(**{f: f"<{f.upper()}>" for f in PROMPT_FIELDS[name]})
    assert all(f"<{f.upper()}>" in text for f in PROMPT_FIELDS[name])
    assert not re.search(r"\{[a-z_]+\}", text)  # nothing left unfilled


def test_context_prompt_shows_the_six_fields():
    text = load_prompt("context_summary").format(signal="s", trajectory_context="t")
    assert all(f'"{name}"' in text for name in CONTEXT_TEXT_FIELDS + CONTEXT_LIST_FIELDS)


@pytest.mark.parametrize("text, expected", [
    ('{"a": 1}', {"a": 1}),
    ('Here is the context:\n```json\n{"a": {"b": [1, 2]}}\n```\nHope it helps.', {"a": {"b": [1, 2]}}),
    ('Sure! {"summary": "braces } and { inside", "x": "}"} trailing {text',
     {"summary": "braces } and { inside", "x": "}"}),
    ('<think>maybe {"draft": 1}</think> final: {"final": true}', {"final": True}),
    ('a list first [1, 2] then {"k": "v"}', {"k": "v"}),
    ('```\nnot json\n```\n{"k": 2}', {"k": 2}),
])
def test_extract_json_object(text, expected):
    assert extract_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "{'a': 1}", '{"a": NaN}', '{"a": 1', "[1, 2]", None,
                                  "{\"a\": __import__('os')}"])
def test_extract_json_object_rejects(text):
    with pytest.raises(LLMOutputError):
        extract_json_object(text)


def test_parse_action_never_runs_code():
    names = {"ls", "cd"}
    assert parse_action("I list first. <action>ls()</action>", names)[0].to_source() == "ls()"
    assert parse_action("<action>cd(folder='a')</action> or <action>ls(a=True)</action>", names)[0].name == "ls"
    for text in ["no tag: ls()", "<action>__import__('os').system('x')</action>", "<action>rm(file_name='x')</action>",
                 "<action>[ls(), ls()]</action>", "<action>cd(folder=x)</action>"]:
        call, _, reason = parse_action(text, names)
        assert call is None and reason


# --- contexts ---------------------------------------------------------------------------------------------------


def test_heuristic_context_on_a_real_failed_trajectory(failed_target):
    context = build_context(failed_target, ExploreConfig())
    assert context["schema"] == "context/v1" and context["builder"] == "heuristic" and context["error"] is None
    assert context["context_id"] == "ctx/boundary/3/multi_turn_base_0/1" and context["signal_type"] == "boundary"
    assert all(isinstance(context[f], str) and context[f] for f in CONTEXT_TEXT_FIELDS)
    assert all(isinstance(context[f], list) and all(isinstance(x, str) for x in context[f])
               for f in CONTEXT_LIST_FIELDS)
    assert {"mv", "cd", "mkdir", "cat"} <= set(context["focus_pattern"])
    # mv before cd fails (the file is in document/), and cat of a missing file fails.
    assert WRONG_CALLS[0] in context["do_not_repeat"] and WRONG_CALLS[3] in context["do_not_repeat"]
    assert WRONG_CALLS[1] not in context["do_not_repeat"]
    assert "2 of 4" in context["instability_pattern"] and failed_target.trajectory["error_type"] in context["summary"]
    assert heuristic_context(failed_target) == {k: context[k] for k in CONTEXT_TEXT_FIELDS + CONTEXT_LIST_FIELDS}


def test_rare_signal_focuses_on_the_rare_patterns_tools(failed_target):
    signal = {**failed_target.signal, "signal_id": "rare/x", "type": "rare",
              "evidence": {"patterns": [{"pattern": "touch>diff", "count": 1}], "total": 300, "theta": 5}}
    target = ExplorationTarget(**{**vars(failed_target), "signal": signal})
    context = heuristic_context(target)
    assert (context["focus_pattern"][:2] == ["touch", "diff"]
            and "touch>diff (1 of 300)" in context["instability_pattern"])


def test_a_registered_signal_type_describes_itself_to_the_context_with_no_edit_in_contexts(failed_target):
    @register
    class Slow(Signal):
        type = "test_slow"

        def observe(self, step, rollouts):
            return []

        @classmethod
        def describe(cls, evidence):
            return f"{evidence['calls']} calls where the reference needs 2."

        @classmethod
        def focus_tools(cls, evidence, known):
            return [name for name in ("wc", "nosuch") if name in known]

    try:
        signal = {**failed_target.signal, "signal_id": "test_slow/x", "type": "test_slow", "evidence": {"calls": 9}}
        context = heuristic_context(ExplorationTarget(**{**vars(failed_target), "signal": signal}))
        assert context["instability_pattern"] == "9 calls where the reference needs 2."
        assert context["focus_pattern"][0] == "wc" and "nosuch" not in context["focus_pattern"]
        # an evidence the type cannot describe, or an unregistered type: the generic sentence
        assert "boundary signal with evidence" in heuristic_context(ExplorationTarget(**{
            **vars(failed_target), "signal": {**failed_target.signal, "evidence": {}}}))["instability_pattern"]
    finally:
        SIGNALS.pop("test_slow")


def test_from_pool_task():
    record = {"schema": "task/v1", "task_id": "abc", "query": "Create notes.txt and list the folder.", "intent": "i",
              "initial_config": {"GorillaFileSystem": {"root": {"w": {"type": "directory", "contents": {}}}}},
              "involved_classes": ["GorillaFileSystem"], "data_version": "v3", "reference_actions": []}
    target = ExplorationTarget.from_pool_task(record, BFCL)
    assert (target.task_id, target.description, target.signal) == ("abc", record["query"], None)
    context, triplets, cost = explore(target, ExploreConfig(runs=2, calls_per_run=3))
    assert context is None and len(triplets) == 6 and triplets[0]["run_id"] == "unguided/abc/run0"
    assert cost == {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "skipped": {}}


# --- schema explorer ----------------------------------------------------------------------------------------------


def _targets(tasks, failed_target, guided):
    out = []
    for task_id in TASK_IDS:
        task = tasks[task_id]
        signal = {**failed_target.signal, "signal_id": f"boundary/0/{task_id}/0", "task_id": task_id}
        calls = [c for turn in task.ground_truth for c in turn][:3]  # the "trajectory" used these tools
        trajectory = {"steps": [{"turn": 0, "step": 0, "calls": calls, "observations": ["{}"] * len(calls),
                                 "rejected": []}], "score": 0.0, "error_type": "x", "error_message": "y"}
        out.append(replace(BFCL.target(task), signal=signal if guided else None, trajectory=trajectory))
    return out


def test_schema_explorer_shape_and_validity(tasks, failed_target):
    config = ExploreConfig(runs=3, calls_per_run=6)
    valid = total = 0
    for guided in (True, False):
        for target in _targets(tasks, failed_target, guided):
            context, triplets, cost = explore(target, config)
            assert (context is not None) == guided and cost["calls"] == 0
            assert len(triplets) == config.runs * config.calls_per_run
            assert [t["step"] for t in triplets] == list(range(config.calls_per_run)) * config.runs
            assert len({t["run_id"] for t in triplets}) == config.runs
            assert all(t["schema"] == "triplet/v1" and t["explorer"] == "schema" and t["task_id"] == target.task_id
                       for t in triplets)
            assert all(t["signal_type"] == ("boundary" if guided else None) for t in triplets)
            valid += sum(t["valid"] for t in triplets)
            total += len(triplets)
    # valid = no error of any kind (BFCL backends refuse many calls with {"error": ...}); ~65% measured
    assert valid >= 0.5 * total


def test_schema_explorer_reuses_observed_names(tasks):
    """After ls() lists a folder, a later cd (cat, ...) mostly uses a listed (or since created) folder (file)."""
    listed = other = 0
    for task in [t for t in tasks.values() if "GorillaFileSystem" in t.involved_classes][:24]:
        _, triplets, _ = explore(BFCL.target(task), ExploreConfig(runs=4, calls_per_run=10, guided=False))
        listing = []
        for t in triplets:
            name = t["action"].split("(", 1)[0]
            if t["step"] == 0:
                listing = []
            wants_file = name in ("cat", "tail", "wc", "sort")
            if name in ("cd", "cat", "tail", "wc", "sort") and any(("." in e) == wants_file for e in listing):
                argument = re.search(r"=\s*'([^']*)'", t["action"]).group(1)
                listed += argument in listing
                other += argument not in listing
            if name == "ls" and t["valid"]:
                listing = json.loads(t["observation"])["current_directory_content"]
            elif name in ("mkdir", "touch") and t["valid"] and listing:
                listing.append(re.search(r"=\s*'([^']*)'", t["action"]).group(1))
            elif name == "cd":
                listing = []  # another folder: the listing no longer applies
    assert listed >= 5 and listed > 2 * other, (listed, other)


def test_schema_explorer_is_seeded(tasks, failed_target):
    target = _targets(tasks, failed_target, True)[0]
    _, first, _ = explore(target, ExploreConfig(seed=1))
    _, again, _ = explore(target, ExploreConfig(seed=1))
    _, other, _ = explore(target, ExploreConfig(seed=2))
    assert first == again and first != other
    by_run = {}
    for t in first:
        by_run.setdefault(t["run_id"], []).append(t["action"])
    assert len({tuple(actions) for actions in by_run.values()}) == len(by_run)  # the R runs differ


def test_guided_runs_use_focus_tools_and_avoid_failed_calls(tasks, failed_target):
    def focus_share(guided):
        hits = total = 0
        for target in _targets(tasks, failed_target, True):
            context = build_context(target, ExploreConfig())
            focus = set(context["focus_pattern"])
            _, triplets, _ = explore(target, ExploreConfig(guided=guided, runs=3, calls_per_run=8))
            hits += sum(t["action"].split("(", 1)[0] in focus for t in triplets)
            total += len(triplets)
        return hits / total

    guided, unguided = focus_share(True), focus_share(False)
    assert guided > unguided + 0.2, (guided, unguided)
    context, triplets, _ = explore(failed_target, ExploreConfig(runs=5, calls_per_run=12))
    assert context["do_not_repeat"] and not {t["action"] for t in triplets} & set(context["do_not_repeat"])


# --- LLM explorer and context builder against the real loopback server ---------------------------------------------

CONTEXT_REPLY = {"summary": "The agent moved a file before entering its folder.", "failure_cause": "mv ran in the "
                 "wrong folder.", "instability_pattern": "Order of cd and mv.", "focus_pattern": ["cd", "mv"],
                 "exploration_objectives": ["Move files after cd"], "do_not_repeat": [WRONG_CALLS[0]]}
# One scripted reply serves both stages: the context builder reads the JSON, the explorer the <action> tag.
SCRIPTED = f"I will list the folder first.\n<action>ls()</action>\n```json\n{json.dumps(CONTEXT_REPLY)}\n```"
LLM_CONFIG = ExploreConfig(explorer="llm", context_builder="llm", runs=2, calls_per_run=3)


@pytest.fixture(scope="module")
def tiny():
    build_tiny()  # a no-op when `make setup` built it; the scripted replies make its weights irrelevant
    return load_chat_model("tiny")


def _client(server, max_retries=0):
    return OpenAIChatModel("tiny", base_url=server.base_url, timeout=0.5, max_retries=max_retries, backoff_s=0.01)


def test_llm_explorer_and_context_end_to_end(tiny, failed_target):
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=SCRIPTED)) as server:
        context, triplets, cost = explore(failed_target, LLM_CONFIG, _client(server))
    assert context["builder"] == "llm" and context["error"] is None
    assert {k: context[k] for k in CONTEXT_REPLY} == CONTEXT_REPLY and context["cost"]["calls"] == 1
    assert len(triplets) == 6 and all(t["valid"] and t["action"] == "ls()" and t["explorer"] == "llm" for t in triplets)
    assert json.loads(triplets[0]["observation"]) == {"current_directory_content": ["document", "archive"]}
    assert [t["run_id"] for t in triplets[:3]] == ["ctx/boundary/3/multi_turn_base_0/1/run0"] * 3
    assert cost["calls"] == 1 + 6 and cost["skipped"] == {} and server.num_requests == 7


def test_llm_unguided_exploration(tiny, failed_target):
    target = ExplorationTarget(**{**vars(failed_target), "signal": None})
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=SCRIPTED)) as server:
        context, triplets, cost = explore(target, LLM_CONFIG, _client(server))
    assert context is None and len(triplets) == 6 and cost["calls"] == 6
    assert triplets[0]["run_id"] == "unguided/multi_turn_base_0/run0" and triplets[0]["signal_id"] is None


@pytest.mark.parametrize("fault", ["500", "timeout", "malformed"])
def test_context_retries_once_after_a_fault(tiny, failed_target, fault):
    faults = FaultConfig(faults=[fault], delay_s=1.0, scripted_reply=SCRIPTED)
    with ChatServer(tiny, faults=faults) as server:
        context, triplets, cost = explore(failed_target, LLM_CONFIG, _client(server))
    assert context["builder"] == "llm" and context["error"] is None and context["cost"]["calls"] == 2
    assert cost["skipped"] == {"context_model_error": 1} and len(triplets) == 6


def test_transient_faults_are_retried_by_the_client(tiny, failed_target):
    faults = FaultConfig(faults=["500", "timeout", "malformed"], delay_s=1.0, scripted_reply=SCRIPTED)
    with ChatServer(tiny, faults=faults) as server:
        model = _client(server, max_retries=3)
        context, triplets, cost = explore(failed_target, LLM_CONFIG, model)
    assert context["builder"] == "llm" and len(triplets) == 6 and cost["skipped"] == {} and model.num_retries == 3


def test_a_dead_endpoint_falls_back_and_ends_runs(tiny, failed_target):
    with ChatServer(tiny, faults=FaultConfig(always="500")) as server:
        context, triplets, cost = explore(failed_target, LLM_CONFIG, _client(server))
    assert context["builder"] == "heuristic" and "model error" in context["error"]
    assert context["focus_pattern"] == heuristic_context(failed_target)["focus_pattern"]
    assert triplets == [] and cost["calls"] == 2 + 2
    assert cost["skipped"] == {"context_model_error": 2, "context_fallback": 1, "model_error": 2}


def test_a_run_whose_model_fails_ends_alone(tiny, failed_target):
    # Request 0 is the context, 1 and 2 are the two runs' first step: one of them fails for good.
    faults = FaultConfig(faults=[None, None, "500"], scripted_reply=SCRIPTED)
    with ChatServer(tiny, faults=faults) as server:
        _, triplets, cost = explore(failed_target, LLM_CONFIG, _client(server))
    assert len(triplets) == 3 and len({t["run_id"] for t in triplets}) == 1
    assert cost["skipped"] == {"model_error": 1}


@pytest.mark.parametrize("reply", ["I am not sure what to do here.", "<action>__import__('os').system('ls')</action>",
                                   "<action>rm(file_name=</action> {'summary': 'single quotes'}"])
def test_replies_without_a_valid_action_or_context(tiny, failed_target, reply):
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply)) as server:
        context, triplets, cost = explore(failed_target, LLM_CONFIG, _client(server))
    assert context["builder"] == "heuristic" and context["error"].startswith("malformed context")
    assert len(triplets) == 6 and not any(t["valid"] for t in triplets)
    assert all(t["observation"].startswith("No valid action") for t in triplets)
    assert cost["skipped"] == {"context_malformed": 2, "context_fallback": 1, "no_valid_action": 6}
