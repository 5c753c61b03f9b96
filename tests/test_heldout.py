"""The held-out sets: (a) new tasks in the pool's environments and (b) tasks in unseen (val-split) environments, both
built the way the pool is, frozen against committed ids, and kept out of every pool by the leak guard."""

import json

import pytest

from coevolve_lib.engine import heldout
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.feedback import screen_heldout
from coevolve_lib.engine.pool import content_keys
from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks
from coevolve_lib.profiles import data_engine_config


def _sets(config, tmp_path):
    return DataEngine(config, tmp_path, "bfcl").heldout_sets()


def test_the_tiny_sets_come_from_the_right_environments_and_match_the_committed_ids(tmp_path):
    config = data_engine_config("tiny")
    engine = DataEngine(config, tmp_path, "bfcl")
    sets = engine.heldout_sets()
    assert set(sets) == {"new_tasks", "new_envs"} and config.heldout.rank_by == "new_tasks"
    pool_envs = {t.id for t in engine.environment.sources("pool")}
    val_ids = {t.id for t in split_tasks(load_tasks("v3", "base"), "val")}
    (_, new_tasks), (_, new_envs) = sets["new_tasks"], sets["new_envs"]
    assert len(new_tasks) == config.heldout.new_tasks.size and len(new_envs) == config.heldout.new_envs.size
    assert {t["provenance"]["origin_task"] for t in new_tasks} == pool_envs  # every pool environment, nothing else
    assert {t["provenance"]["origin_task"] for t in new_envs} <= val_ids
    assert all(t["involved_classes"] == ["GorillaFileSystem"] and 3 <= len(t["reference_actions"]) <= 4
               for t in new_tasks + new_envs)
    committed = json.loads(heldout.COMMITTED_SETS.read_text())
    for key, tasks in sets.values():
        assert key in committed, "a tiny held-out set is not committed: the comparison results need its ids"
        assert committed[key]["task_ids"] == sorted(t["task_id"] for t in tasks)
    assert _sets(config, tmp_path) == sets  # cached: the same sets again
    # the "w/o validation" ablation (Table 11) is measured on the same validated sets
    assert _sets(data_engine_config("tiny", synthesis={"validate": False}), tmp_path / "nv") == sets
    # and so is a run whose own explorer is an LLM (Table 12): the sets are built offline whatever the run's explorer
    llm = data_engine_config("tiny", explorer_model="openai:x", explore={"explorer": "llm", "context_builder": "llm"},
                             synthesis={"abstraction": "llm", "judge": True})
    assert _sets(llm, tmp_path / "llm") == sets


def test_no_d0_task_is_a_held_out_task_and_the_d0_report_counts_the_leaks_it_refused(tmp_path):
    engine = DataEngine(data_engine_config("tiny"), tmp_path, "bfcl")
    report = engine.initial_pool(progress=False)
    held_out = {key for _, tasks in engine.heldout_sets().values() for task in tasks for key in content_keys(task)}
    assert engine.pool.tasks and not any(content_keys(task) & held_out for task in engine.pool.tasks)
    verdicts = [json.loads(line) for line in (tmp_path / "round_000" / "verdicts.jsonl").read_text().splitlines()]
    leaks = sum(v["reason"] == "heldout_leak" for v in verdicts)
    assert report["rejection_reasons"].get("heldout_leak", 0) == leaks


def test_a_held_out_set_explored_as_d0_is_leaves_d0_without_its_tasks(tmp_path, caplog):
    """The guard on the real path: a set (a) explored with D_0's own seed and runs holds D_0's tasks, so D_0 must
    refuse each of them as a leak and keep the rest, and say so in a line (issue 47: only the report told)."""
    config = data_engine_config("tiny", heldout={"new_tasks": {"size": 20, "runs": 8, "seed": 0},
                                                 "new_envs": {"size": 0}})
    engine = DataEngine(config, tmp_path, "bfcl")
    report = engine.initial_pool(progress=False)
    (_, held_out), = engine.heldout_sets().values()
    held_ids = {t["task_id"] for t in held_out}
    assert report["rejection_reasons"]["heldout_leak"] >= len(held_out) == 20
    assert engine.pool.tasks and not held_ids & engine.pool.ids
    leaks = [r.message for r in caplog.records if "held-out tasks; refused (heldout_leak)" in r.message]
    assert leaks == [f"environment bfcl: round 0 validated {report['rejection_reasons']['heldout_leak']} task(s) that "
                     "are held-out tasks; refused (heldout_leak). An explorer that ignores its seed re-draws the "
                     "held-out sets' tasks"]


def test_a_task_sharing_environment_and_actions_or_environment_and_query_is_a_leak():
    held = {"initial_config": {"fs": 1}, "query": "Make  a folder 'a'.", "reference_actions": ["mkdir(dir_name='a')"]}
    excluded = frozenset(content_keys(held))
    accepted = {"accepted": True, "reason": "objective_met", "reasons": [],
                "reference_actions": held["reference_actions"]}
    same_actions = {"initial_config": {"fs": 1}, "query": "Another wording."}
    same_query = {"initial_config": {"fs": 1}, "query": "Make a folder 'a'."}  # whitespace does not matter
    other_world = {"initial_config": {"fs": 2}, "query": held["query"]}
    assert screen_heldout(same_actions, accepted, excluded)["reason"] == "heldout_leak"
    assert screen_heldout(same_query, {**accepted, "reference_actions": ["ls()"]}, excluded)["reason"] == "heldout_leak"
    assert screen_heldout(other_world, accepted, excluded) is accepted
    assert screen_heldout(same_actions, accepted, frozenset()) is accepted
    rejected = {**accepted, "accepted": False, "reason": "call_error"}
    assert screen_heldout(same_actions, rejected, excluded) is rejected  # a rejection keeps its own reason


def test_a_changed_set_under_a_committed_key_is_an_error(tmp_path, monkeypatch):
    config = data_engine_config("tiny", heldout={"new_envs": {"size": 5, "runs": 1}, "new_tasks": {"size": 0}})
    key, tasks = _sets(config, tmp_path)["new_envs"]
    committed = tmp_path / "sets.json"
    monkeypatch.setattr(heldout, "COMMITTED_SETS", committed)
    heldout.commit_set(key, tasks, "tiny")
    assert _sets(config, tmp_path)["new_envs"][1] == tasks
    entry = json.loads(committed.read_text())
    entry[key]["ids_sha256"] = heldout.ids_digest(["something else"])
    committed.write_text(json.dumps(entry))
    with pytest.raises(RuntimeError, match="differs from the one committed"):
        _sets(config, tmp_path)


def test_the_key_follows_what_decides_the_tasks(tmp_path):
    def keys(config):
        return {name: key for name, (key, _) in _sets(config, tmp_path / str(len(list(tmp_path.iterdir())))).items()}

    small = {"new_tasks": {"size": 4, "runs": 1}, "new_envs": {"size": 4, "runs": 1}}
    base = keys(data_engine_config("tiny", heldout=small))
    reseeded = keys(data_engine_config("tiny", heldout={**small, "new_tasks": {"size": 4, "runs": 1, "seed": 7}}))
    assert reseeded["new_tasks"] != base["new_tasks"] and reseeded["new_envs"] == base["new_envs"]
    assert keys(data_engine_config("tiny", heldout=small, max_targets=3)) == base  # a round setting, not a set's
    # (a) follows the pool's environments: another warm-start split gives the pool (and the set) other ones
    moved = keys(data_engine_config("tiny", {"environment": {"warm_start": {"seed": 5}}}, heldout=small))
    assert moved["new_tasks"] != base["new_tasks"] and moved["new_envs"] == base["new_envs"]
