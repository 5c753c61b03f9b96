"""AppWorld exploration and deterministic abstraction against AppWorld's REAL server on the synthetic world (as
tests/test_appworld.py: it needs `.venv-appworld`, built by `make appworld`)."""

import json
import os
import signal

import pytest

from coevolve_lib.core.config import ExploreConfig, SynthesisConfig
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import explore_target, split_runs
from coevolve_lib.engine.tasks import content_id
from coevolve_lib.envs.appworld.abstraction import COMPLETION_CRITERION, abstract_appworld
from coevolve_lib.envs.appworld.calls import (
    api_tool_docs,
    code_calls,
    is_failed_output,
    parse_appworld_call,
    solution_code,
)
from coevolve_lib.envs.appworld.explore import (
    EXCLUDED_CALLS,
    AppWorldExplorer,
    AppWorldLLMExplorer,
    AppWorldReplay,
    explorable_apis,
    make_appworld_explorer,
)

UNGUIDED = ExploreConfig(runs=2, calls_per_run=8, seed=3)


@pytest.fixture(scope="module")
def explorer(server, api_docs):
    return AppWorldExplorer(server, api_docs)


class ApiDocsEnvironment:
    """What a target asks of its environment (`Environment.tool_docs`, `is_error`), from the real server's API docs:
    the explorers under test run on the real server; `AppWorldEnvironment` itself runs in test_appworld_loop.py."""

    def __init__(self, api_docs: dict | None):
        self.api_docs = api_docs

    def tool_docs(self, target) -> list[dict]:
        return api_tool_docs(self.api_docs, target.involved_classes)

    def is_error(self, observation: str) -> bool:
        return is_failed_output(observation)


def _target(signal=None, trajectory=None, api_docs=None):
    return ExplorationTarget("synnote_1", ApiDocsEnvironment(api_docs), "appworld", {"appworld_task": "synnote_1"},
                             ["simple_note"], "Create a new note in my Simple Note account titled 'Dentist'.", signal,
                             trajectory)


@pytest.fixture(scope="module")
def unguided(explorer):
    return explore_target(_target(), UNGUIDED, None, explorer)


def test_account_and_irreversible_apis_are_never_explored(api_docs):
    apis = explorable_apis(api_docs, ["simple_note"])
    assert {"simple_note.search_notes", "simple_note.show_note", "simple_note.update_note",
            "supervisor.show_profile"} <= set(apis)
    forbidden = {"simple_note.login", "simple_note.logout", "simple_note.signup", "simple_note.delete_account",
                 "simple_note.update_account_name", "simple_note.reset_password", "simple_note.verify_account",
                 "supervisor.show_account_passwords", *EXCLUDED_CALLS}
    assert not forbidden & set(apis)


def test_unguided_runs_read_real_data_and_reuse_what_they_saw(unguided, api_docs):
    context, triplets, cost = unguided
    assert context is None and cost["skipped"] == {}
    runs = split_runs(triplets)
    assert list(runs) == ["unguided/synnote_1/run0", "unguided/synnote_1/run1"]
    assert all(len(run) == UNGUIDED.calls_per_run for run in runs.values())
    assert all(t["schema"] == "triplet/v1" and t["explorer"] == "appworld_schema" for t in triplets)
    for triplet in triplets:
        assert parse_appworld_call(triplet["action"], api_docs).to_source() == triplet["action"]
        assert triplet["valid"] == (not triplet["observation"].startswith("Execution failed"))
    assert sum(t["valid"] for t in triplets) >= len(triplets) // 2
    observed = " ".join(t["observation"] for t in triplets if t["valid"])
    assert "Grocery list" in observed or "Gate code" in observed  # the world's own notes
    reused = []
    for run in runs.values():
        seen_ids = set()
        for triplet in run:
            note_id = dict(parse_appworld_call(triplet["action"]).kwargs).get("note_id")
            if triplet["valid"] and note_id in seen_ids:
                reused.append(triplet["action"])
            if triplet["valid"] and triplet["observation"].lstrip().startswith(("[", "{")):
                seen_ids |= set(_values(json.loads(triplet["observation"]), "note_id"))
    assert reused, "no call reused a note_id an earlier output of its run showed"


def _values(value, key):
    if isinstance(value, dict):
        yield from ([value[key]] if key in value else [])
        for item in value.values():
            yield from _values(item, key)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item, key)


def test_runs_are_reproducible_for_a_seed_and_differ_across_runs(unguided, explorer):
    _, triplets, _ = unguided
    runs = split_runs(triplets)
    first, second = ([(t["action"], t["valid"]) for t in run] for run in runs.values())
    assert first != second
    again = explorer.explore(_target(), None, ExploreConfig(runs=1, calls_per_run=UNGUIDED.calls_per_run,
                                                            seed=UNGUIDED.seed))
    assert [(t["action"], t["valid"], t["observation"]) for t in again] == \
        [(t["action"], t["valid"], t["observation"]) for t in runs["unguided/synnote_1/run0"]]


def test_exploration_triplets_abstract_into_tasks(unguided, api_docs):
    context, triplets, _ = unguided
    specs, cost = abstract_appworld(("synnote_1", None), triplets, _target().source(context), SynthesisConfig(),
                                    api_docs)
    assert specs, cost
    for spec in specs:
        assert 3 <= len(spec["action_sequence"]) <= 6 and spec["data_version"] == "appworld"
        assert all(parse_appworld_call(action, api_docs) for action in spec["action_sequence"])


def test_guided_exploration_draws_the_focus_api(explorer):
    """The heuristic context of a rare-pattern signal on an AppWorld rollout focuses on its API."""
    failed = "Execution failed. Traceback:\nException: Response status code is 409:\n{\"message\": \"no note 9\"}"
    trajectory = {"schema": "rollout/v1", "task_id": "synnote_1", "score": 0.0, "success": False,
                  "error_type": "appworld:tests_failed", "error_message": "1 test failed", "terminated": "completed",
                  "steps": [{"step": 0, "raw": "", "code": "apis.simple_note.update_note(note_id=9, ...)",
                             "output": failed, "calls": ["simple_note.update_note"], "observations": [failed]}]}
    signal_record = {"schema": "signal/v1", "signal_id": "rare/2/synnote_1/0", "type": "rare", "task_id": "synnote_1",
                     "evidence": {"patterns": [{"pattern": "simple_note.update_note", "count": 1}], "total": 40}}
    config = ExploreConfig(runs=1, calls_per_run=6, focus_ratio=0.9)
    context, triplets, cost = explore_target(_target(signal_record, trajectory, explorer.api_docs), config, None,
                                              explorer)
    assert context["focus_pattern"] == ["simple_note.update_note"]
    assert "1 call(s) returned errors" in context["failure_cause"]
    assert len(triplets) == 6 and all(t["signal_id"] == "rare/2/synnote_1/0" for t in triplets)
    assert [t["run_id"] for t in triplets] == ["ctx/rare/2/synnote_1/0/run0"] * 6
    focused = [t for t in triplets if t["action"].startswith("simple_note.update_note(")]
    assert len(focused) >= 4, [t["action"] for t in triplets]
    assert any(t["valid"] for t in focused)


class ScriptedExplorerModel(ChatModel):
    """Replies in order (the last repeated) and keeps every prompt: a unit-test stand-in for the explorer LLM."""

    name, native_tools = "scripted-explorer", False

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        self.prompts += conversations
        return [Generation(self.replies[min(len(self.prompts) - 1, len(self.replies) - 1)], None, 50, 10, 0.0, "stop")
                for _ in conversations]


def test_the_llm_explorer_runs_the_models_calls_on_the_server(server, api_docs):
    """Fig. 9's prompts with AppWorld's APIs; the model's calls are parsed (never evaluated) and run on the server;
    a reply without a tag, a refused API and an unknown one are invalid steps; the runs go one after the other."""
    model = ScriptedExplorerModel([
        "Let me look.\n<action>simple_note.search_notes(query='Gate')</action>",
        "I think I am done.",
        "<action>simple_note.login(username='a@b.c', password='x')</action>",
        "<action>simple_note.frobnicate()</action>",
        "Note 3 looked relevant: <action>simple_note.show_note(note_id=3)</action>"])
    explorer = make_appworld_explorer(ExploreConfig(explorer="llm"), model, server, api_docs)
    assert isinstance(explorer, AppWorldLLMExplorer)
    config = ExploreConfig(explorer="llm", runs=2, calls_per_run=5)
    context, triplets, cost = explore_target(_target(), config, model, explorer)
    assert context is None and len(model.prompts) == 10  # unguided; 2 runs x 5 steps, one model call each
    system, user = model.prompts[0]
    assert "simple_note.search_notes(query='groceries')" in system["content"]  # the AppWorld action format
    assert "- simple_note.show_note(note_id: integer): Show detailed information" in user["content"]
    assert "access_token" not in user["content"] and "simple_note.login" not in user["content"]
    first = [t for t in triplets if t["run_id"].endswith("run0")]
    assert [t["valid"] for t in first] == [True, False, False, False, True]
    assert first[0]["action"] == "simple_note.search_notes(query='Gate')" and "Gate code" in first[0]["observation"]
    assert first[1]["observation"].startswith("No valid action: no <action>")
    assert "not an API this exploration may call" in first[2]["observation"]
    assert "unknown AppWorld API simple_note.frobnicate" in first[3]["observation"]
    assert '"content": "4417"' in first[4]["observation"]
    assert "Step 0: simple_note.search_notes(query='Gate') -> " in model.prompts[1][1]["content"]  # the history
    second = [t for t in triplets if t["run_id"].endswith("run1")]  # the script's last reply, five times
    assert [t["action"] for t in second] == ["simple_note.show_note(note_id=3)"] * 5 and all(t["valid"] for t in second)
    assert cost["calls"] == 10 and cost["skipped"] == {"no_valid_action": 3}


NOTES = json.dumps([{"note_id": 3, "title": "Gate code", "tags": ["home"]}])
NOTE = json.dumps({"note_id": 3, "title": "Gate code", "content": "4417", "tags": ["home"]})
ALL_NOTES = json.dumps([{"note_id": n, "title": f"note {n}"} for n in range(1, 5)])
FAILED = "Execution failed. Traceback:\nException: Response status code is 409"


def _triplets(run, steps):
    return [{"schema": "triplet/v1", "run_id": run, "step": k, "action": action, "observation": observation,
             "valid": not observation.startswith("Execution failed"), "task_id": "synnote_1", "signal_id": None,
             "signal_type": None, "explorer": "appworld_schema"} for k, (action, observation) in enumerate(steps)]


def test_abstraction_writes_count_field_and_state_tasks(api_docs):
    search, show = "simple_note.search_notes(query='Gate')", "simple_note.show_note(note_id=3)"
    triplets = (_triplets("r/run0", [(search, NOTES), (show, NOTE), ("simple_note.show_note(note_id=9)", FAILED),
                                     (search, NOTES), ("simple_note.search_notes(page_limit=20)", ALL_NOTES)])
                + _triplets("r/run1", [("supervisor.show_profile()", '{"email": "ada.okafor@example.com"}'),
                                       (search, NOTES), (show, NOTE)])
                + _triplets("r/run2", [(search, NOTES), (show, NOTE),
                                       ("simple_note.update_note(note_id=3, content='4418')",
                                        '{"message": "Note updated."}')])
                + _triplets("r/run3", [(search, NOTES), (show, NOTE)]))
    source = _target().source()
    specs, cost = abstract_appworld(("synnote_1", None), triplets, source, SynthesisConfig(max_calls=3), api_docs)
    assert cost["skipped"] == {"too_few_calls": 1}  # run3; run0's failed call and repeated search are dropped
    count, field, state = specs
    assert count["action_sequence"] == [search, show, "simple_note.search_notes(page_limit=20)"]
    assert count["answer_from"] == "count"
    assert count["query"] == ("In my Simple Note account, do these steps in order: 1. Search your notes (query: "
                              "'Gate'). 2. Show detailed information of a note, including its content (note_id: 3). "
                              "3. Search your notes (page_limit: 20). Then tell me the number of items the last step "
                              "returned.")
    assert field["answer_from"] == "field:content" and field["involved_classes"] == ["supervisor", "simple_note"]
    assert field["query"].startswith("In my Simple Note account, do these steps in order: 1. Show your "
                                     "supervisor's profile information. 2. Search your notes (query: 'Gate').")
    assert field["query"].endswith("Then tell me the 'content' of what the last step returned.")
    assert state["answer_from"] is None and state["query"].endswith(
        "3. Update a note's title, content, tags, and/or pinned status (note_id: 3, content: '4418'). "
        "Then mark the task complete.")
    for spec, run in zip(specs, ["r/run0", "r/run1", "r/run2"]):
        assert spec["schema"] == "taskspec/v1" and spec["abstraction"] == "deterministic"
        assert spec["spec_id"] == content_id({"appworld_task": "synnote_1"}, spec["query"], spec["action_sequence"])
        assert spec["data_version"] == "appworld" and spec["completion_criterion"] == COMPLETION_CRITERION
        assert spec["source"] == {"task_id": "synnote_1", "signal_id": None, "signal_type": None,
                                  "context_id": None, "run_ids": [run]}
    longer, _ = abstract_appworld(("synnote_1", None), triplets, source, SynthesisConfig(max_calls=6), api_docs)
    assert len(longer) == 3  # no run has a 4th distinct successful call


def test_a_server_killed_mid_exploration_ends_the_run_with_a_counted_skip(server, explorer, monkeypatch):
    """The server dies before run 0's 2nd call: run 0 keeps its one triplet, the skip is counted, run 1 runs on the
    restarted server."""
    execute, executed = server.client.execute, []

    def execute_then_kill(task_id, code):
        executed.append(code)
        if len(executed) == 3:  # the login preamble, the 1st call, then the kill
            os.kill(server.pid, signal.SIGKILL)
            server.process.wait()
        return execute(task_id, code)

    monkeypatch.setattr(server.client, "execute", execute_then_kill)
    restarts = server.restarts
    _, triplets, cost = explore_target(_target(), ExploreConfig(runs=2, calls_per_run=3), None, explorer)
    assert cost["skipped"] == {"server_down": 1}
    assert [len(run) for run in split_runs(triplets).values()] == [1, 3]
    assert server.restarts == restarts + 1 and server.alive()


LLM_TASKS = """Two goals were pursued.
<task>
Description: Read the gate code note.
Query: Search my Simple Note notes for 'Gate', open note 3, then list all my notes and tell me how many there are.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. `simple_note.show_note(note_id=3)`
3. simple_note.search_notes(page_limit=20)
Answer: count
Criterion: the answer is the number of notes.
</task>
<task>
Description: Change the gate code.
Query: Find the note titled 'Gate code', show it, and set its content to '4418'.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. simple_note.show_note(note_id=3)
3. simple_note.update_note(note_id=3, content='4418')
Answer: none
Criterion: note 3's content is '4418'.
</task>
<task>
Description: Read a note's content.
Query: Search for 'Gate', open note 3 and tell me its content.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. simple_note.show_note(note_id=3)
3. simple_note.show_note(note_id=3)
Answer: field: content
Criterion: the answer is the note's content.
</task>
<task>
Description: Log out.
Query: Search, then log out.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. simple_note.show_note(note_id=3)
3. simple_note.logout()
Answer: none
Criterion: logged out.
</task>
<task>
Description: A made-up API.
Query: Archive note 3.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. simple_note.archive_note(note_id=3)
3. simple_note.show_note(note_id=3)
Criterion: archived.
</task>
<task>
Description: An answer rule AppWorld cannot check.
Query: Tell me how I feel about note 3.
ActionSequence:
1. simple_note.search_notes(query='Gate')
2. simple_note.show_note(note_id=3)
3. simple_note.show_note(note_id=3)
Answer: my mood
Criterion: the answer.
</task>"""


def test_the_llm_abstraction_drafts_appworld_tasks_with_their_answer_rule(api_docs):
    """Fig. 12 on AppWorld: the prompt lists the apps' callable APIs without access_token and the records of every
    run; each block's calls are checked against the API docs and its `Answer:` becomes `answer_from`; a block with
    an excluded API, an unknown API or an answer rule AppWorld cannot check is skipped, counted."""
    search, show = "simple_note.search_notes(query='Gate')", "simple_note.show_note(note_id=3)"
    triplets = (_triplets("r/run0", [(search, NOTES), (show, NOTE), ("simple_note.show_note(note_id=9)", FAILED)])
                + _triplets("r/run1", [("simple_note.search_notes(page_limit=20)", ALL_NOTES)]))
    model = ScriptedExplorerModel([LLM_TASKS])
    specs, cost = abstract_appworld(("synnote_1", None), triplets, _target().source(),
                                    SynthesisConfig(abstraction="llm"), api_docs, model)
    [prompt] = [conversation[-1]["content"] for conversation in model.prompts]
    assert "simple_note.show_note(note_id)" in prompt and "access_token)" not in prompt and "Answer: <none" in prompt
    assert "## Run r/run0" in prompt and "## Run r/run1" in prompt and "observation (failed)" in prompt
    assert cost["calls"] == 1 and cost["skipped"] == {"excluded_api": 1, "invalid_action": 1, "invalid_answer": 1}
    count, state, field = specs
    assert [spec["answer_from"] for spec in specs] == ["count", None, "field:content"]
    assert count["action_sequence"] == [search, show, "simple_note.search_notes(page_limit=20)"]
    assert state["action_sequence"][-1] == "simple_note.update_note(note_id=3, content='4418')"
    assert field["query"] == "Search for 'Gate', open note 3 and tell me its content."
    for spec in specs:
        assert spec["abstraction"] == "llm" and spec["involved_classes"] == ["simple_note"]
        assert spec["source"]["run_ids"] == ["r/run0", "r/run1"] and spec["data_version"] == "appworld"
    failed, cost = abstract_appworld(("synnote_1", None), triplets, _target().source(),
                                     SynthesisConfig(abstraction="llm"), api_docs, ScriptedExplorerModel(["no tasks"]))
    assert failed == [] and cost["skipped"] == {"no_task_block": 1}


def test_the_calls_a_replys_code_makes_are_read_without_running_it(api_docs):
    """ReST on AppWorld replays the policy's calls: the ones with literal arguments, as call strings, the login
    preamble, `access_token` and anything not literal left out; code that does not parse gives none."""
    reference = ["simple_note.search_notes(query='Dentist')", "simple_note.show_note(note_id=3)"]
    code = solution_code(reference, api_docs, "field:content") + "\n" + "\n".join([
        "apis.simple_note.show_note(note_id=int('3'))",           # an expression: left out
        "apis.simple_note.show_note(note_id=x, access_token=t)",  # a variable: left out
        "apis.simple_note.show_note(3)",                          # positional: left out
        "apis.simple_note.no_such_api(note_id=3)",                # unknown to AppWorld's docs: left out
        "__import__('os').system('true')",                        # not an API call: left out
        "apis.supervisor.show_addresses()"])
    assert [c.to_source() for c in code_calls(code, api_docs)] == [*reference, "supervisor.show_addresses()"]
    assert code_calls("apis.simple_note.show_note(note_id=3", api_docs) == []  # a syntax error


def test_a_replay_runs_the_policys_own_calls_again_from_the_tasks_start_state(server, api_docs):
    """What ReST's round explores on AppWorld (`RoundStages.replay`): one run of the successful reply's calls, each
    with what it printed; a call the trajectory did not make is never made."""
    reference = ["simple_note.search_notes(query='Dentist')", "supervisor.show_addresses()"]
    trajectory = {"steps": [{"code": solution_code(reference, api_docs)}], "reward": 1.0}
    signal_record = {"signal_id": "rest/r1", "type": "rest", "task_id": "synnote_1", "rollout_id": "r1"}
    replay = AppWorldReplay(server, api_docs)
    triplets = replay.explore(_target(signal_record, trajectory, api_docs), None, ExploreConfig(runs=1))
    assert [t["action"] for t in triplets] == reference and all(t["valid"] for t in triplets)
    assert triplets[0]["observation"].startswith("[") and triplets[0]["explorer"] == "policy"  # the search's list
    assert {(t["run_id"], t["signal_id"], t["signal_type"]) for t in triplets} == {(triplets[0]["run_id"], "rest/r1",
                                                                                    "rest")}
