"""The four-way comparison (Tables 2-3 at small scale): every variant trained once and reused, results on the
held-out set and the BFCL val split, bootstrap intervals, the table and the learning-curve figure."""

import json

import pytest

from coevolve_lib.__main__ import main as cli

import coevolve_lib.compare as compare_lib
from coevolve_lib import report
from coevolve_lib.results import validate_result

SMALL = ["data_engine.d0_size=6", "data_engine.warm_start.enabled=false", "data_engine.max_targets=2",
         "data_engine.explore.runs=1", "data_engine.explore.calls_per_run=4", "data_engine.heldout.size=5",
         "data_engine.heldout.runs=1", "training.max_steps=2", "training.tasks_per_step=2", "training.group_size=2",
         "training.feedback_every=1", "rollout.max_new_tokens=12", "rollout.max_steps_per_episode=2",
         "training.max_completion_tokens=64", "training.eval_limit=1", "training.eval_pool_tasks=2"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    results = compare_lib.compare("tiny", [0], SMALL, folder / "runs", pass_k=2, results_path=folder / "r.json",
                                  progress=False)
    return folder, results


def test_every_variant_is_trained_and_measured_on_the_held_out_set_and_bfcl_val(compared):
    folder, results = compared
    for variant in ("static", "random", "coevolve"):
        summary = json.loads((folder / "runs" / f"{variant}_seed0" / "summary.json").read_text())
        assert summary["steps"] == 2 and summary["pool_updates"] == compare_lib.VARIANTS[variant]
    assert {r["variant"] for r in results} == {"zero_shot", "static", "random", "coevolve"}
    heldout = [r for r in results if r["eval_set"].startswith("heldout/")]
    assert {r["metric"] for r in heldout} == {"greedy_success", "pass@2", "sampled_success"}
    assert all(r["n"] == 5 and 0 <= r["value"] <= 100 and len(r["per_task"]) == 5 for r in heldout)
    bfcl = [r for r in results if r["eval_set"] == "bfcl/v3/multi_turn_base/val"]
    assert len(bfcl) == 4 and all(r["n"] == 1 for r in bfcl)
    assert all(r["profile"] == "tiny" and r["config_hash"] and r["run_dir"] for r in results)
    saved = json.loads((folder / "r.json").read_text())
    assert validate_result(saved) == [] and saved["experiment"] == "comparison" and saved["config"]["seeds"] == [0]
    assert saved["metrics"] == json.loads(json.dumps(results))


def test_a_second_call_reuses_every_run(compared, monkeypatch):
    folder, results = compared

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(compare_lib, "train", no_training)
    monkeypatch.setattr(compare_lib, "HFChatModel", no_training)  # sampled evaluations are cached too
    again = compare_lib.compare("tiny", [0], SMALL, folder / "runs", pass_k=2, results_path=folder / "r2.json",
                                progress=False)
    assert [(r["variant"], r["metric"], r["value"]) for r in again] == \
        [(r["variant"], r["metric"], r["value"]) for r in results]


def test_the_table_puts_each_variant_beside_the_paper_with_its_scale(compared):
    _, results = compared
    table = report.comparison_table(results)
    assert list(table.index) == ["zero_shot", "static", "random", "coevolve"]
    assert table.loc["coevolve", "paper BFCL-v3 (Qwen3-4B)"] == "63.00"
    assert table.loc["zero_shot", "vs zero-shot (points)"] == "-"
    assert "seeds [0]" in table.loc["static", "scale"] and "K=2" in table.loc["static", "scale"]


def test_learning_curves_plot(compared, tmp_path):
    folder, _ = compared
    summaries = {v: [json.loads((folder / "runs" / f"{v}_seed0" / "summary.json").read_text())]
                 for v in ("static", "coevolve")}
    report.plot_learning_curves(summaries, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 5000


def test_bootstrap_interval_brackets_the_mean_and_keeps_pairs():
    mean, low, high = report.bootstrap_ci([[1, 0, 1, 1], [1, 1, 0, 1]])
    assert mean == 0.75 and 0.0 <= low < mean < high <= 1.0
    assert report.bootstrap_ci([[0.5] * 4] * 3) == (0.5, 0.5, 0.5)
    # a difference that is the same on every task has no spread, whatever the task draw
    assert report.bootstrap_ci([[1 - 0, 1 - 0], [1 - 0, 1 - 0]]) == (1.0, 1.0, 1.0)


def test_cli_rejects_a_bad_override(capsys):
    assert cli(["compare", "--set", "training.nope=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m coevolve_lib compare: error: training.nope: unknown field; valid: ")
    assert err.count("\n") == 1 and "group_size" in err
