"""Synthesized AppWorld tasks: written as real AppWorld tasks by AppWorld's own code and validated by AppWorld's own
server and evaluator, on the synthetic world (`appworld_synthetic`) and an overlay root over it.

Needs `.venv-appworld` (`make appworld`), as tests/test_appworld.py's real-server tests do.
"""

import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coevolve_lib.core.config import RunError, SynthesisConfig
from coevolve_lib.engine.tasks import accept_unvalidated
from coevolve_lib.envs.appworld.benchmark import AppWorldEnv, load_task
from coevolve_lib.envs.appworld.server import AppWorldServer, AppWorldServerConfig
from coevolve_lib.envs.appworld.synthetic import build_synthetic_world
from coevolve_lib.envs.appworld.validation import (
    WRITTEN,
    appworld_task_id,
    overlay_root,
    validate_appworld,
    write_tasks,
)

CONFIG = SynthesisConfig()


def _spec(name: str, query: str, actions: list[str], answer_from: str | None = None) -> dict:
    return {"spec_id": f"spec-{name}", "query": query, "intent": query, "action_sequence": actions,
            "answer_from": answer_from, "initial_config": {"appworld_task": "synask_1"},
            "involved_classes": ["simple_note"], "data_version": "appworld",
            "completion_criterion": "AppWorld's evaluation of the written task",
            "source": {"task_id": "synask_1", "signal_id": None, "signal_type": None, "context_id": None,
                       "run_ids": []}, "abstraction": "test"}


ANSWER = _spec("answer", "How many of my Simple Note notes mention 'list', checked twice around note 3?",
               ["simple_note.search_notes(query='list')", "simple_note.show_note(note_id=3)",
                "simple_note.search_notes(query='list')"], "count")
STATE = _spec("state", "Create a Simple Note note titled 'Plan' with the content 'draft', then change its content to "
              "'final' and show it.",
              ["simple_note.create_note(title='Plan', content='draft')",
               "simple_note.update_note(note_id=5, content='final')", "simple_note.show_note(note_id=5)"])
RAISES = _spec("raises", "Show my notes 999, 1 and 2.", ["simple_note.show_note(note_id=999)",
                                                         "simple_note.show_note(note_id=1)",
                                                         "simple_note.show_note(note_id=2)"])


def _files(root: Path) -> list[tuple[str, int, int]]:
    """Every file and link under `root/data` with its size and modification time (links not followed)."""
    out = []
    for folder, dirs, names in os.walk(root / "data"):
        for name in names + dirs:
            stat = os.lstat(os.path.join(folder, name))
            out.append((os.path.relpath(os.path.join(folder, name), root), stat.st_size, stat.st_mtime_ns))
    return sorted(out)


@pytest.fixture(scope="module")
def world():
    world = build_synthetic_world()
    return world, _files(world.root)


@pytest.fixture(scope="module")
def root(world, tmp_path_factory):
    return overlay_root(world[0].root, tmp_path_factory.mktemp("synthesized"))


@pytest.fixture(scope="module")
def server(root):
    with AppWorldServer(AppWorldServerConfig(root=root)) as server:  # started before any task is written
        yield server


@pytest.fixture(scope="module")
def api_docs(server):
    return server.client.api_docs()


@pytest.fixture(scope="module")
def written(root, api_docs):
    """One writer run for the round's specs; its seconds are printed for the report."""
    start = time.perf_counter()
    results = write_tasks(root, [ANSWER, STATE, RAISES], api_docs)
    print(f"\nwrite_tasks: 3 specs in {time.perf_counter() - start:.1f} s")
    return results


def test_the_overlay_links_the_source_and_is_idempotent(tmp_path):
    source = tmp_path / "source"
    (source / "data" / "tasks" / "a_1").mkdir(parents=True)
    (source / "data" / "base_dbs").mkdir()
    root = overlay_root(source, tmp_path / "out")
    assert root == tmp_path / "out" / "appworld_root"
    assert (root / "data" / "base_dbs").is_symlink() and (root / "data" / "tasks" / "a_1").is_symlink()
    assert not (root / "data" / "tasks").is_symlink()
    (root / "data" / "tasks" / "syn0_1").mkdir()  # a synthesized task
    (source / "data" / "tasks" / "b_1").mkdir()
    assert overlay_root(source, tmp_path / "out") == root
    assert sorted(p.name for p in (root / "data" / "tasks").iterdir()) == ["a_1", "b_1", "syn0_1"]
    assert (root / "data" / "tasks" / "b_1").is_symlink() and (root / "data" / "tasks" / "syn0_1").is_dir()
    assert sorted(p.name for p in (source / "data" / "tasks").iterdir()) == ["a_1", "b_1"]
    # the same run folder on a rebuilt world (another cache folder): its tasks came from the old one, so it stops
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(source, rebuilt)
    with pytest.raises(RunError, match="was made on the AppWorld data root .*/source, not .*/rebuilt"):
        overlay_root(rebuilt, tmp_path / "out")


def test_processes_making_the_same_overlay_at_once_do_not_collide(tmp_path):
    """Every process of a multi-GPU run makes its engine's overlay at the same moment."""
    source = tmp_path / "source"
    for n in range(200):
        (source / "data" / "tasks" / f"t_{n}").mkdir(parents=True)
    with ThreadPoolExecutor(8) as pool:
        roots = list(pool.map(lambda _: overlay_root(source, tmp_path / "out"), range(8)))
    assert set(roots) == {tmp_path / "out" / "appworld_root"}
    assert len(list((roots[0] / "data" / "tasks").iterdir())) == 200


def test_the_task_id_is_a_content_hash_in_appworlds_form():
    task_id = appworld_task_id(ANSWER)
    assert task_id.startswith("syn") and task_id.endswith("_1") and task_id.count("_") == 1
    assert len(task_id) == len("syn") + 16 + len("_1")
    assert appworld_task_id({**ANSWER, "spec_id": "other"}) == task_id
    assert appworld_task_id({**ANSWER, "answer_from": None}) != task_id


def test_one_writer_batch_writes_the_tasks_and_reports_errors(root, written):
    answer, state, raises = (written[spec["spec_id"]] for spec in (ANSWER, STATE, RAISES))
    assert answer["written"] and answer["error"] is None and answer["answer"] == 4 and answer["changes"] == 0
    assert len(answer["observations"]) == 3 and '"content": "4417"' in answer["observations"][1]
    assert state["written"] and state["answer"] is None and state["changes"] == 1
    assert not raises["written"] and "The note with id 999 does not exist" in raises["error"]
    tasks = root / "data" / "tasks"
    assert (tasks / answer["task_id"] / "ground_truth" / "evaluation.py").exists()
    assert not (tasks / raises["task_id"]).exists()
    assert not list(root.glob(".writer-*"))  # the writer's scratch root is gone
    start = time.perf_counter()  # written once: a second call runs nothing
    assert write_tasks(root, [ANSWER, STATE, RAISES], {}) == written
    assert time.perf_counter() - start < 1 and len(list((root / WRITTEN).iterdir())) == 3


def test_an_answer_task_is_accepted_by_appworlds_evaluator(server, api_docs, root, written):
    verdict = validate_appworld(ANSWER, CONFIG, server, api_docs, root, set())
    assert verdict["accepted"] and verdict["reason"] == "objective_met", verdict
    assert verdict["task_id"] == appworld_task_id(ANSWER) and verdict["reference_actions"] == ANSWER["action_sequence"]
    assert set(verdict) == set(accept_unvalidated(ANSWER, CONFIG))  # validation.validate's verdict/v1 keys
    assert verdict["judge"] is None and verdict["cost"]["calls"] == 0 and len(verdict["observations"]) == 3
    # The server, started before the task was written, loads it; its active task shows the new instruction.
    env = AppWorldEnv(load_task(verdict["task_id"], root), server)
    assert env.reset()["instruction"] == ANSWER["query"]
    assert env.execute("print(apis.supervisor.show_active_task()['instruction'])").strip() == ANSWER["query"]
    wrong = env.execute("apis.supervisor.complete_task(answer=3)")
    assert env.completed and not env.score()["success"], wrong
    env.close()


def test_a_state_changing_task_is_accepted_and_a_no_op_or_wrong_change_fails(server, api_docs, root, written):
    verdict = validate_appworld(STATE, CONFIG, server, api_docs, root, set())
    assert verdict["accepted"] and verdict["reason"] == "objective_met", verdict
    env = AppWorldEnv(load_task(verdict["task_id"], root), server)
    env.reset()
    env.execute("apis.supervisor.complete_task()")
    no_op = env.score()
    assert not no_op["success"] and no_op["failures"] == ["the database changes equal the reference solution's"]
    env.reset()
    env.execute("\n".join([
        'passwords = {p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}',
        'token = apis.simple_note.login(username="ada.okafor@example.com", password=passwords["simple_note"])'
        '["access_token"]',
        "apis.simple_note.create_note(title='Plan', content='draft', access_token=token)",
        "apis.simple_note.update_note(note_id=5, content='finale', access_token=token)",
        "apis.supervisor.complete_task()"]))
    assert env.completed and not env.score()["success"]
    env.close()
    # A source task still loads from the overlay root.
    assert server.client.initialize("synask_1")["instruction"] == load_task("synask_1", root).instruction
    server.client.close("synask_1")


def test_rejections(server, api_docs, root, written):
    def reason(spec, known=()):
        verdict = validate_appworld(spec, CONFIG, server, api_docs, root, set(known))
        assert not verdict["accepted"] and verdict["reasons"][0] == verdict["reason"]
        return verdict["reason"], verdict["detail"]

    assert reason(RAISES)[0] == "call_error" and "999" in reason(RAISES)[1]
    unknown = _spec("unknown", "Frobnicate.", ["simple_note.frobnicate(note_id=1)"] * 3)
    assert reason(unknown) == ("invalid_call", "call 0 rejected: unknown AppWorld API simple_note.frobnicate; "
                               "call 1 rejected: unknown AppWorld API simple_note.frobnicate; "
                               "call 2 rejected: unknown AppWorld API simple_note.frobnicate")
    assert reason({**ANSWER, "spec_id": "short", "action_sequence": ANSWER["action_sequence"][:2]})[0] == "too_short"
    assert reason(ANSWER, {appworld_task_id(ANSWER)})[0] == "duplicate"
    assert reason(ANSWER, {ANSWER["spec_id"]})[0] == "duplicate"
    looks = _spec("looks", "Look at notes 1, 2 and 3.", [f"simple_note.show_note(note_id={i})" for i in (1, 2, 3)])
    assert reason(looks) == ("no_effect", "no database change and no answer")  # a one-spec call writes it itself


def test_without_validation_a_spec_is_written_even_when_its_reference_raises(server, api_docs, root, written):
    """Table 11's "w/o validation" on AppWorld: what validation rejects is written and kept as abstracted, unchecked:
    a reference that raised (its expected outcome: what it changed before it raised, nothing here) and one with no
    effect. AppWorld's server loads the kept task, and its evaluator passes an episode that does nothing: the outcome
    the broken reference defined. Validation still rejects the same spec; a call that cannot be rendered is refused."""
    from coevolve_lib.envs.appworld.validation import accept_appworld_unvalidated

    kept = accept_appworld_unvalidated(RAISES, CONFIG, api_docs, root, set())
    assert kept["accepted"] and kept["reason"] == "unvalidated", kept
    assert "The note with id 999 does not exist" in kept["detail"] and kept["task_id"] == appworld_task_id(RAISES)
    env = AppWorldEnv(load_task(kept["task_id"], root), server)
    env.reset()
    env.execute("apis.supervisor.complete_task()")
    assert env.score()["success"]
    env.close()
    assert validate_appworld(RAISES, CONFIG, server, api_docs, root, set())["reason"] == "call_error"
    looks = _spec("looks-kept", "Look at notes 1, 2 and 3.", [f"simple_note.show_note(note_id={i})" for i in (1, 2, 3)])
    assert accept_appworld_unvalidated(looks, CONFIG, api_docs, root, set())["accepted"]
    unknown = _spec("unknown-kept", "Frobnicate.", ["simple_note.frobnicate(note_id=1)"] * 3)
    assert accept_appworld_unvalidated(unknown, CONFIG, api_docs, root, set())["reason"] == "invalid_call"
    assert accept_appworld_unvalidated(RAISES, CONFIG, api_docs, root, {kept["task_id"]})["reason"] == "duplicate"


@pytest.mark.parametrize("says", [True, False])
def test_the_judge_reads_appworlds_execution_and_may_reject_an_accepted_task(server, api_docs, root, written, says):
    """Fig. 13 on AppWorld, asked through a real OpenAI-compatible server (the kit's, replying with a scripted
    verdict): it runs only after AppWorld's evaluator accepted the task, sees each call as {name, arguments} with its
    output, and a `false` rejects the task as "judge_rejected"."""
    from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
    from coevolve_lib.core.model_specs import load_chat_model
    from coevolve_lib.core.models import ChatModel
    from coevolve_lib.core.openai_model import OpenAIChatModel

    reply = f"Success: {str(says).lower()}\nReason: [the answer {'is' if says else 'is not'} the count asked for]"
    judge_config = SynthesisConfig(judge=True)
    with ChatServer(load_chat_model("tiny"), faults=FaultConfig(scripted_reply=reply)) as chat_server:
        endpoint = OpenAIChatModel("tiny", base_url=chat_server.base_url, timeout=30)
        prompts = []

        class Asked(ChatModel):
            name, native_tools = endpoint.name, endpoint.native_tools

            def generate(self, conversations, tools=None, config=None):
                prompts.extend(c[-1]["content"] for c in conversations)
                return endpoint.generate(conversations, tools, config)

        verdict = validate_appworld(ANSWER, judge_config, server, api_docs, root, set(), Asked())
        raises = validate_appworld(RAISES, judge_config, server, api_docs, root, set(), Asked())
    assert verdict["accepted"] is says and verdict["judge"]["success"] is says and verdict["cost"]["calls"] == 1
    assert verdict["reason"] == ("objective_met" if says else "judge_rejected")
    assert re.search(r"AppWorld's evaluation: (\d+)/\1 tests pass", verdict["detail"]), verdict["detail"]
    assert raises["reason"] == "call_error" and raises["judge"] is None  # never judged: execution rejected it
    [prompt] = prompts
    assert '{"name": "simple_note.show_note", "arguments": {"note_id": 3}} -> {' in prompt and ANSWER["query"] in prompt


def test_the_source_root_is_never_written(world, written, server):
    source, before = world
    assert _files(source.root) == before
