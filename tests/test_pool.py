"""TaskPool: dedup, idempotent rounds, atomic writes under simulated crashes, seeded sampling, versions."""

import os

import pytest

from coevolve_lib.core.records import CorruptFileError, read_jsonl
from coevolve_lib.engine import pool as pool_module
from coevolve_lib.engine.pool import TaskPool


def tasks(*ids):
    return [{"schema": "task/v1", "task_id": i, "query": f"query {i}", "reference_actions": ["ls()"]} for i in ids]


def test_add_round_dedups_stamps_versions_and_reloads(tmp_path):
    path = tmp_path / "pool" / "tasks.jsonl"
    pool = TaskPool(path)
    assert (pool.version, len(pool), pool.history()) == (-1, 0, [])
    added = pool.add_round(tasks("a", "b", "a"), 0)  # a duplicate inside the batch
    assert [t["task_id"] for t in added] == ["a", "b"] and {t["pool_version"] for t in added} == {0}
    added = pool.add_round(tasks("b", "c"), 1)  # b is already in the pool
    assert [t["task_id"] for t in added] == ["c"]
    assert pool.add_round(tasks("a"), 2) == []  # a round that adds nothing is still committed
    assert pool.version == 2 and len(pool) == 3 and "c" in pool and "z" not in pool and pool.ids == {"a", "b", "c"}
    assert pool.history() == [{"pool_version": 0, "added": 2, "total": 2}, {"pool_version": 1, "added": 1, "total": 3},
                              {"pool_version": 2, "added": 0, "total": 3}]
    reloaded = TaskPool(path)
    assert reloaded.tasks == pool.tasks and reloaded.version == 2 and reloaded.history() == pool.history()
    assert [t["pool_version"] for t in read_jsonl(path)] == [0, 0, 1]
    added[0]["query"] = "mutated"  # returned records are copies: the pool never changes behind its back
    assert pool.tasks[2]["query"] == "query c"


def test_same_round_twice_adds_nothing(tmp_path):
    pool = TaskPool(tmp_path / "tasks.jsonl")
    assert len(pool.add_round(tasks("a"), 0)) == 1
    assert pool.add_round(tasks("x", "y"), 0) == []  # e.g. the loop re-runs round 0 after a crash
    assert TaskPool(tmp_path / "tasks.jsonl").add_round(tasks("x"), 0) == []
    assert pool.add_round(tasks("x"), 3) and pool.add_round(tasks("y"), 1) == []  # rounds only go forward
    assert pool.ids == {"a", "x"} and pool.version == 3


def test_dropped_rounds_are_forgotten_and_can_be_committed_again(tmp_path):
    """What a run killed before committing a round leaves (the rehearsal's kill): the round's tasks and its entry in
    the sidecar gone, on disk too, so the round commits again when it is redone."""
    pool = TaskPool(tmp_path / "tasks.jsonl")
    pool.add_round(tasks("a"), 0)
    pool.add_round(tasks("b"), 1)
    pool.add_round([], 2)
    pool.drop_rounds_from(1)
    for view in (pool, TaskPool(tmp_path / "tasks.jsonl")):
        assert (view.version, view.ids) == (0, {"a"})
    assert [t["task_id"] for t in pool.add_round(tasks("b"), 1)] == ["b"] and pool.version == 1


def test_crash_during_write_leaves_the_previous_pool(tmp_path, monkeypatch):
    path = tmp_path / "tasks.jsonl"
    pool = TaskPool(path)
    pool.add_round(tasks("a", "b"), 0)
    before = path.read_bytes()

    def crash(*args):
        raise OSError("killed during rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        pool.add_round(tasks("c"), 1)
    monkeypatch.undo()
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "tasks.jsonl", "tasks.jsonl.rounds.json"]  # the unrenamed temp file was removed
    assert len(pool) == 2 and pool.version == 0  # memory matches the disk
    assert TaskPool(path).ids == {"a", "b"}
    assert [t["task_id"] for t in pool.add_round(tasks("c"), 1)] == ["c"]  # the round can be retried


def test_leftovers_of_a_killed_writer_do_not_break_loading(tmp_path):
    path = tmp_path / "tasks.jsonl"
    TaskPool(path).add_round(tasks("a", "b"), 0)
    # A process killed mid-write leaves a truncated temp file (the pool itself is only ever renamed into place).
    (tmp_path / "tasks.jsonl.x1y2.tmp").write_text('{"task_id": "c", "pool_vers')
    (tmp_path / "tasks.jsonl.rounds.json").write_text('{"rounds": [0')  # and, worst case, a corrupt sidecar
    pool = TaskPool(path)
    assert pool.ids == {"a", "b"} and pool.version == 0
    assert pool.add_round(tasks("a"), 0) == [] and [t["task_id"] for t in pool.add_round(tasks("c"), 1)] == ["c"]


def test_crash_between_pool_and_sidecar_is_idempotent(tmp_path, monkeypatch):
    path = tmp_path / "tasks.jsonl"
    TaskPool(path).add_round(tasks("a"), 0)

    def crash(*args):
        raise OSError("killed before the sidecar")

    monkeypatch.setattr(pool_module, "write_json_atomic", crash)
    with pytest.raises(OSError):
        TaskPool(path).add_round(tasks("b", "c"), 1)
    monkeypatch.undo()
    pool = TaskPool(path)  # the pool already holds round 1's tasks: replaying the round adds nothing
    assert pool.version == 1 and pool.add_round(tasks("b", "c", "d"), 1) == [] and pool.ids == {"a", "b", "c"}


def test_sample_is_seeded_uniform_and_filters_versions(tmp_path):
    pool = TaskPool(tmp_path / "tasks.jsonl")
    pool.add_round(tasks(*"abcdef"), 0)
    pool.add_round(tasks(*"ghij"), 1)
    draw = [t["task_id"] for t in pool.sample(5, seed=7)]
    assert draw == [t["task_id"] for t in pool.sample(5, seed=7)] and len(set(draw)) == 5  # without replacement
    assert {t["task_id"] for t in pool.sample(4, seed=1, versions={1})} == set("ghij")
    assert len(pool.sample(25, seed=3)) == 25  # more than the pool: with replacement
    assert pool.sample(3, seed=0, versions={9}) == [] and pool.sample(0, seed=0) == []
    seeds = {tuple(t["task_id"] for t in pool.sample(3, seed=s)) for s in range(20)}
    assert len(seeds) > 10  # different seeds, different draws
    counts = {i: 0 for i in "abcdefghij"}
    for s in range(2000):
        for t in pool.sample(2, seed=s):
            counts[t["task_id"]] += 1
    assert min(counts.values()) > 300 and max(counts.values()) < 500  # uniform: 400 expected each


def test_a_corrupt_pool_line_is_an_error_that_names_it_and_loses_nothing(tmp_path):
    path = tmp_path / "tasks.jsonl"
    TaskPool(path).add_round(tasks("a", "b"), 0)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + '{"task_id": "b", "pool_vers\n')  # atomic writes cannot do this: it is corruption
    before = path.read_bytes()
    with pytest.raises(CorruptFileError, match=r"tasks.jsonl, line 2: not a JSON record"):
        TaskPool(path)
    assert path.read_bytes() == before
