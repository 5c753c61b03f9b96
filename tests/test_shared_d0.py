"""D_0 shared by runs built alike (`DataEngine.initial_pool(shared=...)`): when a run shares its D_0 and when it
builds its own. The copy itself is tested on a study's runs (tests/test_study.py) and on AppWorld
(tests/test_appworld_loop.py)."""

import json
from dataclasses import replace

from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.profiles import data_engine_config


def _shared_copies(shared):
    return sorted(p.name for p in shared.glob("d0_*") if p.is_dir())


def test_a_run_killed_before_sharing_its_d0_shares_it_when_it_resumes(tmp_path):
    engine = DataEngine(data_engine_config("tiny"), tmp_path / "run", "bfcl")
    engine.initial_pool(progress=False)  # built, as by a run killed before it shared
    engine.initial_pool(progress=False, shared=tmp_path / "shared")
    assert _shared_copies(tmp_path / "shared") == [f"d0_{engine.d0_key()}"]


def test_a_half_built_d0_is_finished_by_its_run_not_mixed_with_a_shared_one(tmp_path):
    config = data_engine_config("tiny")
    first = DataEngine(config, tmp_path / "first", "bfcl")
    first.initial_pool(progress=False, shared=tmp_path / "shared")
    killed = DataEngine(config, tmp_path / "killed", "bfcl")
    killed.pool.add_round(first.pool.tasks[:3], 0)  # committed to the pool, killed before its report was written
    killed.initial_pool(progress=False, shared=tmp_path / "shared")
    assert [t["task_id"] for t in TaskPool(tmp_path / "killed" / "pool.jsonl").tasks] == [
        t["task_id"] for t in first.pool.tasks[:3]]
    report = json.loads((tmp_path / "killed" / "round_000" / "report.json").read_text())
    assert report["added_to_pool"] == report["pool_size"] == 3  # its own round's report, not the shared copy's


def test_a_d0_built_under_faults_or_recorded_in_its_own_folder_is_not_shared(tmp_path, monkeypatch):
    recorded = DataEngine(replace(data_engine_config("tiny"), llm_calls="record"), tmp_path / "recorded", "bfcl")
    recorded.initial_pool(progress=False, shared=tmp_path / "shared")
    assert recorded.pool.tasks and _shared_copies(tmp_path / "shared") == []
    monkeypatch.setattr("coevolve_lib.engine.data_engine.faults", lambda report: 1)  # e.g. one environment error
    faulty = DataEngine(data_engine_config("tiny"), tmp_path / "faulty", "bfcl")
    faulty.initial_pool(progress=False, shared=tmp_path / "shared")
    assert faulty.pool.tasks and _shared_copies(tmp_path / "shared") == []
