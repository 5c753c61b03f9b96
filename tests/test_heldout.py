"""The held-out set: built the way the pool is, from val-split environments only, frozen against committed ids."""

import json

import pytest

from coevolve_lib import heldout
from coevolve_lib.profiles import data_engine_config
from coevolve_lib.envs.bfcl import load_tasks, split_tasks


def _build(config):
    return heldout.heldout_tasks(config.data_version, config.classes, config.explore, config.synthesis, config.heldout)


def test_the_tiny_held_out_set_comes_from_val_environments_and_matches_the_committed_ids():
    config = data_engine_config("tiny")
    key, tasks = _build(config)
    val_ids = {t.id for t in split_tasks(load_tasks("v3", "base"), "val")}
    assert len(tasks) == config.heldout.size
    assert {t["provenance"]["origin_task"] for t in tasks} <= val_ids
    assert all(t["involved_classes"] == ["GorillaFileSystem"] and 3 <= len(t["reference_actions"]) <= 4
               for t in tasks)
    committed = json.loads(heldout.COMMITTED_SETS.read_text())
    assert key in committed, "the tiny profile's held-out set is not committed: the comparison results need its ids"
    assert committed[key]["task_ids"] == sorted(t["task_id"] for t in tasks)
    assert _build(config) == (key, tasks)  # cached: the same set again
    # the "w/o validation" ablation (Table 11) is measured on the same validated set
    assert _build(data_engine_config("tiny", synthesis={"validate": False})) == (key, tasks)
    # and so is a run whose own explorer is an LLM (Table 12): the set is built offline whatever the run's explorer
    llm = data_engine_config("tiny", explorer_model="openai:x", explore={"explorer": "llm", "context_builder": "llm"},
                             synthesis={"abstraction": "llm", "judge": True})
    assert _build(llm) == (key, tasks)


def test_a_changed_set_under_a_committed_key_is_an_error(tmp_path, monkeypatch):
    config = data_engine_config("tiny", heldout={"size": 5, "runs": 1})
    key, tasks = _build(config)
    committed = tmp_path / "sets.json"
    monkeypatch.setattr(heldout, "COMMITTED_SETS", committed)
    heldout.commit_set(key, tasks, "tiny")
    assert _build(config)[1] == tasks
    entry = json.loads(committed.read_text())
    entry[key]["ids_sha256"] = heldout.ids_digest(["something else"])
    committed.write_text(json.dumps(entry))
    with pytest.raises(RuntimeError, match="differs from the one committed"):
        _build(config)


def test_the_key_follows_what_decides_the_tasks():
    config = data_engine_config("tiny")
    key = heldout.heldout_key(config.data_version, config.classes, config.explore, config.synthesis, config.heldout)
    other = data_engine_config("tiny", heldout={"seed": 7})
    assert heldout.heldout_key(other.data_version, other.classes, other.explore, other.synthesis, other.heldout) != key
    more_targets = data_engine_config("tiny", max_targets=3)  # a round setting, not a held-out one
    assert heldout.heldout_key(more_targets.data_version, more_targets.classes, more_targets.explore,
                               more_targets.synthesis, more_targets.heldout) == key
