"""Renamed profile fields (`core.config.RENAMED_FIELDS`): the name before still loads, with one notice, and run
identities keep it, so every run hash the committed results name is still the hash of the run that made it."""

import json

import pytest

from coevolve_lib import profiles
from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.config import ConfigError, run_identity
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.studies import run as study_lib


def committed_run_hashes() -> list[tuple[str, dict, study_lib.Variant, int, str]]:
    """(file, its config, variant, seed, the run hash its rows name) for every study results file of results/tiny."""
    found = []
    for path in sorted((REPO_ROOT / "results" / "tiny").glob("*/tiny_seeds*.json")):
        result = json.loads(path.read_text())
        config = result["config"]
        variants = {v["name"]: study_lib.Variant(**v) for v in config.get("variants", ())}
        named = {(r["variant"], r["seed"], r["config_hash"]) for r in result["metrics"] if r.get("variant") in variants}
        found += [(path.parent.name, config, variants[name], seed, hash_) for name, seed, hash_ in sorted(named)]
    return found


def test_every_committed_run_hash_is_still_its_runs_hash():
    runs = committed_run_hashes()
    assert len(runs) >= 20 and {study for study, *_ in runs} >= {"comparison", "signals", "validation", "baselines"}
    changed = [(study, variant.name, seed) for study, config, variant, seed, hash_ in runs
               if study_lib.run_hash(study_lib.variant_run("tiny", config["overrides"], variant, seed)) != hash_]
    assert not changed


def test_a_renamed_field_keeps_its_recorded_name_in_the_run_identity():
    identity = run_identity(profiles.run_config("tiny-appworld"))
    assert identity["evaluation"]["benchmark"] == "appworld" and "environment_name" not in identity["evaluation"]


def test_the_name_before_loads_the_same_run_with_one_notice(capsys, tmp_path):
    profiles._NOTED.clear()
    before = profiles.run_config("tiny", ["evaluation.benchmark=bfcl"])
    profiles.run_config("tiny", ["evaluation.benchmark=bfcl"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "evaluation.benchmark is evaluation.environment_name now" in err
    assert study_lib.run_hash(before) == study_lib.run_hash(profiles.run_config("tiny"))
    old = tmp_path / "old.yaml"
    old.write_text("inherits: tiny-appworld\nevaluation: {benchmark: appworld}\n")
    assert profiles.run_config(str(old)).evaluation.environment_name == "appworld"
    assert "old.yaml: evaluation.benchmark is" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="evaluation.benchmark and evaluation.environment_name name one field"):
        profiles.run_config("tiny", ["evaluation.benchmark=bfcl", "evaluation.environment_name=bfcl"])


def test_evaluate_reads_the_old_flag_as_environment(capsys, tmp_path):
    assert cli(["evaluate", "--out", str(tmp_path / "e.json"), "--benchmark", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert "--benchmark is --environment now" in err and "unknown environment 'nosuch'" in err
