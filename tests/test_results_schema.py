"""Every committed results file validates against the one results schema (results/v2), and bad documents are
rejected with the reason."""

import copy
import json

import pytest

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.results import SCHEMA, InvalidResult, check_result, validate_result, write_result

COMMITTED = sorted((REPO_ROOT / "results").glob("**/*.json"))


def test_there_are_committed_results():
    # the parametrized test below would pass vacuously on an empty list
    assert {p.parent.name for p in COMMITTED} >= {"zero_shot", "comparison", "training", "data_engine"}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_committed_result_validates(path):
    assert validate_result(json.loads(path.read_text()), committed=True) == []


def _round_reports(node) -> list[dict]:
    """Every round report inside a results document (a dict with a round's specs, acceptances and rejections)."""
    if isinstance(node, list):
        return [report for item in node for report in _round_reports(item)]
    if not isinstance(node, dict):
        return []
    own = [node] if {"specs", "accepted", "rejection_reasons"} <= node.keys() else []
    return own + [report for value in node.values() for report in _round_reports(value)]


def test_every_committed_round_report_accounts_for_each_spec():
    """Issue 47: a spec drafted twice lost its acceptance to the repeat, and the counts fell short of the specs."""
    reports = [report for path in COMMITTED for report in _round_reports(json.loads(path.read_text()))]
    assert reports
    for report in reports:
        assert report["accepted"] + sum(report["rejection_reasons"].values()) == report["specs"], report


def _valid() -> dict:
    return {"schema": SCHEMA, "experiment": "zero_shot", "profile": "tiny", "model": "tiny",
            "commit": "0123456789abcdef0123456789abcdef01234567+dirty", "config_hash": "0123456789ab",
            "created": "2026-11-30T12:00:00+00:00", "run_dir": "runs/x",
            "metrics": [{"benchmark": "bfcl", "eval_set": "bfcl/v3/multi_turn_base/val", "metric": "success",
                         "k": 1, "temperature": 0.0, "seed": 0, "n": 2, "value": 50.0}]}


def test_a_valid_document_passes():
    assert validate_result(_valid()) == []


@pytest.mark.parametrize("change, problem", [
    (lambda d: d.pop("commit"), "$: missing field 'commit'"),
    (lambda d: d["metrics"][0].pop("eval_set"), "$.metrics[0]: missing field 'eval_set'"),
    (lambda d: d["metrics"][0].update(n="2"), "$.metrics[0].n: str '2' is not int"),
    (lambda d: d["metrics"][0].update(k=True), "$.metrics[0].k: bool True is not int"),
    (lambda d: d["metrics"][0].update(value="50%"), "$.metrics[0].value: str"),
    (lambda d: d.update(schema="result/v1"), "$.schema: 'result/v1' is not 'results/v2'"),
    (lambda d: d.update(metrics=[]), "$.metrics: no metric rows"),
    (lambda d: d.update(run_dir="/work/main/runs/x"), "$.run_dir: absolute path '/work/main/runs/x'"),
    (lambda d: d.update(details={"rollouts": ["/home/me/r.jsonl"]}), "$.details.rollouts[0]: absolute path"),
    (lambda d: d.update(commit="unknown"), "$.commit: 'unknown' needs a `provenance`"),
    (lambda d: d.update(config_hash="abc"), "$.config_hash: 'abc' is neither"),
    (lambda d: d.update(created="yesterday"), "$.created: 'yesterday' is not an ISO 8601 time"),
])
def test_a_bad_document_is_rejected_with_the_reason(change, problem):
    doc = copy.deepcopy(_valid())
    change(doc)
    problems = validate_result(doc)
    assert any(p.startswith(problem) for p in problems), problems
    with pytest.raises(InvalidResult, match="invalid results/v2 document"):
        check_result(doc)


def test_a_committed_file_may_not_point_outside_the_checkout():
    doc = _valid() | {"run_dir": "../../tmp/runs/x"}
    assert validate_result(doc) == []
    assert validate_result(doc, committed=True) == ["$.run_dir: path '../../tmp/runs/x' leaves the checkout"]


def test_write_result_stamps_provenance_and_makes_paths_repo_relative(tmp_path):
    out = tmp_path / "r.json"
    doc = write_result(out, experiment="x", profile="tiny", model="tiny", config_hash="0123456789ab",
                       run_dir=REPO_ROOT / "runs" / "x",
                       details={"rollouts": str(REPO_ROOT / "runs" / "x" / "r.jsonl")},
                       metrics=[{"benchmark": "bfcl", "eval_set": "pool/d0", "metric": "greedy_success", "value": 0.0}])
    assert json.loads(out.read_text()) == doc and doc["schema"] == SCHEMA and doc["commit"]
    assert doc["run_dir"] == "runs/x" and doc["details"]["rollouts"] == "runs/x/r.jsonl"
    with pytest.raises(InvalidResult, match=r"\$.metrics\[0\]: missing field 'value'"):
        write_result(tmp_path / "bad.json", experiment="x", profile="tiny", model="tiny", config_hash="0123456789ab",
                     metrics=[{"benchmark": "bfcl", "eval_set": "pool/d0", "metric": "greedy_success"}])
    assert not (tmp_path / "bad.json").exists()
