"""The seam's contracts and fault containment, unit by unit (fast, with a fake reply model; the same paths through the
command line and the real tiny model: `test_outside_environment.py`)."""

import json
import logging
import sys
from pathlib import Path

import pytest

from coevolve_lib.core import extensions
from coevolve_lib.core.config import ConfigError, DataEngineConfig, RolloutConfig, SynthesisConfig
from coevolve_lib.core.environment import ContractError, checked_evaluation, environment_class
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.results import write_result
from coevolve_lib.engine.feedback import screen_shape
from coevolve_lib.engine.signals import SIGNALS, Signal, signal_class
from coevolve_lib.engine.tasks import verdict
from coevolve_lib.profiles import run_config
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.rollout.record_contract import rollout_problem
from coevolve_lib.training.rollout_func import select_groups

sys.path.insert(0, str(Path(__file__).parent / "outside_env"))
from kv_store.environment import KeyValueStore, StoreEpisode, evaluation_tasks  # noqa: E402

TASKS = evaluation_tasks()


class Answers(ChatModel):
    """Answers every turn with text and no call: each episode ends after one reply. Unit tests only."""

    name, native_tools = "answers", True

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        return [Generation("Done.", None, 5, 2, 0.0, "stop") for _ in conversations]


class RaisingTool(StoreEpisode):
    """The store whose tool raises in the first sample of each task."""

    def feed(self, generation):
        if self.sample_index == 0:
            raise KeyError("the store's index is gone")
        super().feed(generation)


class RaisingRecord(StoreEpisode):
    def record(self, model_name):
        raise OSError("the store's log cannot be written")


class NoScore(StoreEpisode):
    def record(self, model_name):
        record = super().record(model_name)
        del record["score"]
        return record


def test_a_tool_that_raises_ends_its_episode_as_environment_error_and_the_batch_goes_on(caplog):
    with caplog.at_level(logging.WARNING):
        records = run_rollouts(Answers(), TASKS, RolloutPhase(RolloutConfig(batch_size=3)), RaisingTool,
                               samples_per_task=2, progress=False)
    assert len(records) == 8
    failed = [r for r in records if r["terminated"] == "environment_error"]
    assert [r["sample_index"] for r in failed] == [0] * 4 and not any(r["success"] for r in failed)
    assert all(r["error_type"] == "environment:exception" and "KeyError" in r["error_message"] for r in failed)
    assert all(r["terminated"] == "completed" for r in records if r["sample_index"] == 1)
    assert "a tool or feed() raised KeyError" in caplog.text and "RaisingTool" in caplog.text


def test_a_record_that_raises_still_gives_a_record_of_the_episode():
    [record] = run_rollouts(Answers(), TASKS[:1], RolloutPhase(), RaisingRecord, progress=False)
    assert record["task_id"] == TASKS[0]["task_id"] and record["terminated"] == "environment_error"
    assert record["messages"][0]["role"] == "user" and "OSError" in record["error_message"]
    assert rollout_problem(record, token_level=False) is None


def test_a_record_that_breaks_the_contract_is_one_line_naming_the_field():
    with pytest.raises(ContractError, match=r"NoScore: record\(\) returned a rollout record that breaks the contract "
                                            r"\(rollout.record_contract.ROLLOUT_FIELDS\): score: missing$"):
        run_rollouts(Answers(), TASKS[:1], RolloutPhase(), NoScore, progress=False)


def test_a_new_episode_that_raises_is_one_line():
    def no_start(task, sample_index, tool_format, config):
        raise ValueError("no such start state")

    with pytest.raises(ContractError, match=r"no_start: new_episode\(\) raised ValueError for a task \(no such start"):
        run_rollouts(Answers(), TASKS[:1], RolloutPhase(), no_start, progress=False)


@pytest.mark.parametrize("change, problem", [
    ({"score": 1.5}, "score: 1.5, not in [0, 1]"),
    ({"success": 1}, "success: int 1, not bool"),
    ({"score": True}, "score: bool True, not int or float"),
    ({"steps": [{"calls": [3]}]}, "steps[0]: not a mapping with `calls`, a list of call strings"),
    ({"task_id": None}, "task_id: NoneType None, not str"),
])
def test_rollout_problem_names_the_field(change, problem):
    good = {"task_id": "t", "sample_index": 0, "messages": [], "steps": [{"calls": ["f()"]}], "score": 0.0,
            "success": False, "terminated": "completed"}
    assert rollout_problem(good, token_level=False) is None
    assert rollout_problem({**good, **change}, token_level=False) == problem
    assert rollout_problem(good, token_level=True) == "prompt_ids: missing or not a list of token ids (token-level " \
                                                      "rollouts)"


def test_an_evaluation_without_counts_is_one_line(tmp_path):
    environment = KeyValueStore(DataEngineConfig(), tmp_path)
    row = {"benchmark": "kv", "eval_set": "kv/val", "metric": "success", "value": 0.0, "n": 2}
    doc = write_result(tmp_path / "r.json", experiment="x", profile="p", model="m", config_hash="0" * 12,
                       metrics=[row])
    with pytest.raises(ContractError, match=r"^environment kv: evaluate\(\) returned .*: \$.metrics\[0\].correct: "
                                            r"missing or not an integer$"):
        checked_evaluation(environment, doc)
    assert checked_evaluation(environment, {**doc, "metrics": [{**row, "correct": 0}]})["metrics"][0]["n"] == 2
    with pytest.raises(ContractError, match=r"\$: missing field 'schema' \(and 8 more\)$"):
        checked_evaluation(environment, {"metrics": []})


def test_an_accepted_task_without_enough_calls_or_a_query_is_rejected():
    spec = {"spec_id": "s", "query": "  "}
    accepted = verdict(spec, "t", ["f()"], [], "objective_met")
    shaped = screen_shape(spec, accepted, SynthesisConfig().min_calls)
    assert (shaped["accepted"], shaped["reasons"]) == (False, ["too_short", "empty_query"])
    assert screen_shape({**spec, "query": "q"}, verdict(spec, "t", ["f()"] * 3, [], "objective_met"), 3)["accepted"]
    rejected = verdict(spec, "t", [], ["call_error"], "objective_met")
    assert screen_shape(spec, rejected, 3) is rejected  # the environment's own reason stays


def test_dynamic_sampling_trains_on_groups_an_environment_fault_touched_last():
    groups = [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    assert select_groups(groups, 2) == [0, 2]
    assert select_groups(groups, 2, faulty={0}) == [1, 2]  # a clean uniform group before a faulty varied one
    assert select_groups(groups, 4, faulty={0}) == [0, 1, 2, 3]


def test_names_are_found_by_entry_point_and_by_reference_and_refused_in_one_line(tmp_path, monkeypatch):
    package = tmp_path / "demo_env.py"
    package.write_text("from kv_store.environment import KeyValueStore\n\nclass Demo(KeyValueStore):\n"
                       "    name = 'demo'\n\nclass Unnamed(KeyValueStore):\n    name = ''\n")
    (tmp_path / "demo-1.0.dist-info").mkdir()
    (tmp_path / "demo-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    (tmp_path / "demo-1.0.dist-info" / "entry_points.txt").write_text(
        "[coevolve_lib.environments]\ndemo = demo_env:Demo\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "demo_env", raising=False)
    from coevolve_lib.core.environment import ENVIRONMENTS

    try:
        assert ("demo", "entry point coevolve_lib.environments of demo 1.0 (demo_env:Demo), not loaded") in \
            extensions.registered("environments", ENVIRONMENTS)
        assert environment_class("demo").name == "demo"
        assert environment_class("demo_env:Demo") is environment_class("demo")
        with pytest.raises(ValueError, match="environment 'demo_env:Unnamed' has no `name`"):
            environment_class("demo_env:Unnamed")
        with pytest.raises(ValueError, match="demo_env has no attribute 'Nothing'"):
            environment_class("demo_env:Nothing")
    finally:
        for name in ("demo", "demo_env:Demo"):
            ENVIRONMENTS.pop(name, None)


def test_an_outside_signal_may_not_take_a_kit_signal_s_type(tmp_path, monkeypatch):
    (tmp_path / "clash_signals.py").write_text(
        "from coevolve_lib.engine.signals import Signal\n\nclass Mine(Signal):\n    type = 'boundary'\n"
        "    def observe(self, step, rollouts):\n        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kit_boundary = SIGNALS["boundary"]
    with pytest.raises(ValueError, match="signal type 'clash_signals:Mine' has the type 'boundary' of "):
        signal_class("clash_signals:Mine")
    assert SIGNALS["boundary"] is kit_boundary
    assert issubclass(signal_class("boundary"), Signal)


def test_a_profile_file_inherits_a_kit_profile_and_one_beside_it(tmp_path):
    (tmp_path / "base.yaml").write_text("inherits: tiny\ntraining: {max_steps: 3}\n")
    (tmp_path / "mine.yaml").write_text("inherits: base.yaml\ntraining: {feedback_every: 3}\n")
    run = run_config(str(tmp_path / "mine.yaml"))
    assert (run.training.max_steps, run.training.feedback_every) == (3, 3)
    assert run.model == run_config("tiny").model and run.profile == str(tmp_path / "mine.yaml")
    (tmp_path / "bad.yaml").write_text(json.dumps({"trainin": {}}))
    with pytest.raises(ConfigError, match=r"bad.yaml: unknown section\(s\) \['trainin'\]"):
        run_config(str(tmp_path / "bad.yaml"))
