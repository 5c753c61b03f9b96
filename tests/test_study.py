"""Studies at small scale: the four-way comparison (Tables 2-3), every variant trained once and reused (also by
another study), results on the held-out set and the BFCL val split, bootstrap intervals, the table and the
learning-curve figure; the ablation studies' variants."""

import json
import pickle
from dataclasses import replace

import pytest

import coevolve_lib.studies.run as study_lib
from coevolve_lib import profiles
from coevolve_lib.__main__ import main as cli
from coevolve_lib.core import paper
from coevolve_lib.core.results import validate_result
from coevolve_lib.engine.data_engine import EmptyPool
from coevolve_lib.studies import catalog, plots, report
from coevolve_lib.studies.catalog import COMPARISON, SIGNALS, VALIDATION, explorers, sensitivity

SMALL = ["data_engine.d0_size=6", "environment.warm_start.enabled=false", "data_engine.max_targets=2",
         "data_engine.explore.runs=1", "data_engine.explore.calls_per_run=4", "data_engine.heldout.new_tasks.size=4",
         "data_engine.heldout.new_tasks.runs=1", "data_engine.heldout.new_envs.size=5",
         "data_engine.heldout.new_envs.runs=1", "training.max_steps=2", "training.tasks_per_step=2",
         "training.group_size=2", "training.feedback_every=1", "rollout.max_new_tokens=12",
         "rollout.max_steps_per_episode=2", "training.max_completion_tokens=64", "training.eval_limit=1",
         "training.eval_pool_tasks=2"]


STUDY = replace(COMPARISON, pass_k=2)


def folders(study, folder):
    return {p["variant"]: p["folder"] for p in study_lib.planned_runs(study, "tiny", [0], SMALL, folder / "runs")}


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    results = study_lib.run_study(STUDY, "tiny", [0], SMALL, folder / "runs", results_path=folder / "r.json",
                                  progress=False)
    return folder, results


def test_every_variant_is_trained_and_measured_on_the_held_out_set_and_bfcl_val(compared):
    folder, results = compared
    for variant, run_dir in folders(STUDY, folder).items():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["steps"] == 2 and summary["pool_updates"] == {"static": "none", "random": "random",
                                                                     "coevolve": "signals"}[variant]
    assert {r["variant"] for r in results} == {"zero_shot", "static", "random", "coevolve"}
    new_tasks = [r for r in results if r["eval_set"].startswith("heldout/new_tasks/")]
    new_envs = [r for r in results if r["eval_set"].startswith("heldout/new_envs/")]
    # pass@k is sampled on the set the profile ranks by only
    assert {r["metric"] for r in new_tasks} == {"greedy_success", "pass@2", "sampled_success"}
    assert {r["metric"] for r in new_envs} == {"greedy_success"}
    assert all(r["n"] == 4 and 0 <= r["value"] <= 100 and len(r["per_task"]) == 4 for r in new_tasks)
    assert all(r["n"] == 5 and len(r["per_task"]) == 5 for r in new_envs)
    bfcl = [r for r in results if r["eval_set"] == "bfcl/v3/multi_turn_base/val"]
    assert len(bfcl) == 4 and all(r["n"] == 1 for r in bfcl)
    assert all(r["profile"] == "tiny" and r["config_hash"] and r["run_dir"] for r in results)
    saved = json.loads((folder / "r.json").read_text())
    assert validate_result(saved) == [] and saved["experiment"] == "comparison" and saved["config"]["seeds"] == [0]
    assert saved["metrics"] == json.loads(json.dumps(results))
    hashes = {r["variant"]: r["config_hash"] for r in results}
    assert len(set(hashes.values())) == 3 and hashes["zero_shot"] == hashes["static"]
    # the three runs start from the same policy and settings: their step-0 evaluation is made once and shared
    shared = folder / "runs" / study_lib.SHARED_STARTS
    [evaluation] = shared.glob("eval_*")
    starts = [(d / "eval" / "step_00000.json").read_text() for d in folders(STUDY, folder).values()]
    assert starts[0] == starts[1] == starts[2] == (evaluation / "step_00000.json").read_text()
    assert {f.name for f in evaluation.iterdir()} == {"step_00000.json", "val_step_00000.json",
                                                      "val_step_00000.rollouts.jsonl"}
    # and they differ only in training, so D_0 is built once (by the first) and copied by the others
    [d0] = [p for p in shared.glob("d0_*") if p.is_dir()]
    built = [json.loads(line) for line in (d0 / "pool.jsonl").read_text().splitlines()]
    for run_dir in folders(STUDY, folder).values():
        d0_tasks = [t for t in map(json.loads, (run_dir / "pool.jsonl").read_text().splitlines())
                    if t["pool_version"] == 0]
        assert d0_tasks == built and built
        for name in ("report.json", "timings.json"):  # the build's own wall seconds: one build, copied
            assert (run_dir / "round_000" / name).read_text() == (d0 / "round_000" / name).read_text()


def test_a_second_call_reuses_every_run_and_another_study_shares_the_coevolve_run(compared, monkeypatch):
    folder, results = compared

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(study_lib, "train", no_training)
    monkeypatch.setattr(study_lib, "HFChatModel", no_training)  # sampled evaluations are cached too
    again = study_lib.run_study(STUDY, "tiny", [0], SMALL, folder / "runs", results_path=folder / "r2.json",
                                progress=False)
    assert [(r["variant"], r["metric"], r["value"]) for r in again] == \
        [(r["variant"], r["metric"], r["value"]) for r in results]
    reference = replace(SIGNALS, variants=SIGNALS.variants[:1])  # Table 5's reference is Table 3's CoEvolve run
    [planned] = study_lib.planned_runs(reference, "tiny", [0], SMALL, folder / "runs")
    assert planned["finished"] and planned["folder"] == folders(STUDY, folder)["coevolve"]
    rows = study_lib.run_study(reference, "tiny", [0], SMALL, folder / "runs", results_path=folder / "r3.json",
                               progress=False)
    assert {r["paper_row"] for r in rows} == {"CoEvolve"}


def test_the_table_puts_each_variant_beside_the_paper_with_its_scale(compared):
    _, results = compared
    table = report.study_table(results, ("table3",), "BFCL")
    assert list(table.index) == ["zero_shot", "static", "random", "coevolve"]
    assert table.loc["coevolve", "paper BFCL"] == "63.00" and table.loc["zero_shot", "paper BFCL"] == "26.50"
    ranked, other = "held-out (a) new tasks, pool envs", "held-out (b) unseen envs"
    assert list(table.columns[1:3]) == [f"{ranked} greedy_success %", f"{ranked}: vs zero_shot (points)"]
    assert table.loc["zero_shot", f"{ranked}: vs zero_shot (points)"] == "-"
    assert table.loc["static", f"{other}: vs zero_shot (points)"].count("[") == 1  # both sets, each with its CI
    for cell in table[f"{ranked}: vs zero_shot (points)"].iloc[1:]:  # and what the CI tells
        low, high = (float(x) for x in cell.split("[")[1].split("]")[0].split(", "))
        assert cell.endswith(" excludes 0" if low > 0 or high < 0 else " includes 0")
    assert "seeds [0]" in table.loc["static", "scale"] and "K=2" in table.loc["static", "scale"]
    assert table.loc["static", f"{ranked} pass@2 %"].count("[") == 1
    d0_sizes = {r["d0_tasks"] for r in results}
    assert len(d0_sizes) == 1 and f"D_0 {d0_sizes.pop()} tasks" in table.loc["coevolve", "scale"]
    # trained runs carry their final pool and their signals' share per round; the zero-shot row trained nothing
    by_variant = {r["variant"]: r for r in results}
    assert "pool_tasks" not in by_variant["zero_shot"] and "final pool" not in table.loc["zero_shot", "scale"]
    coevolve = by_variant["coevolve"]
    assert coevolve["pool_tasks"] >= coevolve["d0_tasks"]
    assert f"final pool {coevolve['pool_tasks']} tasks" in table.loc["coevolve", "scale"]
    assert set(coevolve["signal_shares"]) == {"forgetting", "boundary", "rare"}
    assert all(len(values) == 2 and all(0 <= v <= 100 for v in values)  # 2 steps, F = 1: two rounds
               for values in coevolve["signal_shares"].values())
    assert "signals, % of rollouts per round (seed 0): boundary " in table.loc["coevolve", "scale"]
    # a variant that ended with an earlier one's weights on every seed is that policy, and its row says so (at this
    # scale the 2 GRPO steps may leave the weights as they were: then static's row names zero_shot)
    twin = results + [{**r, "variant": "static_again"} for r in results if r["variant"] == "static"]
    again = report.study_table(twin, ("table3",), "BFCL").loc["static_again", "scale"]
    assert "THE SAME POLICY AS " in again and again.endswith(": equal final weights on every seed")
    assert "THE SAME POLICY" not in table.loc["zero_shot", "scale"]
    # ranked by the other set on request: its columns come first
    assert report.study_table(results, ("table3",), "BFCL", rank_by="new_envs").columns[1].startswith(other)
    differences = report.paired_differences(results, [("coevolve", "static"), ("coevolve", "random")])
    assert len(differences) == 8  # two pairs x (two held-out sets, D_0, BFCL val)
    assert set(differences["reading"]) <= {"coevolve above static", "coevolve below static",
                                           "coevolve above random", "coevolve below random",
                                           "no difference the CI can tell"}


def test_ablation_variants_change_only_what_they_name():
    base = profiles.run_config("tiny", [])
    runs = {v.name: study_lib.variant_run("tiny", [], v, 0) for v in (*SIGNALS.variants, *VALIDATION.variants)}
    assert list(runs["no_rare"].data_engine.signals.enabled) == ["forgetting", "boundary"]
    assert runs["no_validation"].data_engine.synthesis.validate is False
    assert runs["coevolve"].data_engine == base.data_engine and runs["coevolve"].training == base.training
    grid = sensitivity([50], [2])
    assert [v.paper_row for v in grid.variants[1:]] == ["N = 50", "F = 2"]
    assert {"N = 50", "F = 20", "N = 25"} <= set(paper.column("table4", "BFCL")) | set(paper.column("table14", "BFCL"))
    assert study_lib.variant_run("tiny", [], grid.variants[2], 0).training.feedback_every == 2
    # Table 12: the profile's own explorer is the comparison's static and CoEvolve runs; another explorer is an LLM
    matched = explorers({"Qwen-Plus": "openai:qwen-plus"}, "Qwen-Max")
    runs = {v.name: study_lib.variant_run("tiny", [], v, 0) for v in matched.variants}
    comparison = {v.name: study_lib.variant_run("tiny", [], v, 0) for v in COMPARISON.variants}
    assert study_lib.run_hash(runs["default_static"]) == study_lib.run_hash(comparison["static"])
    assert study_lib.run_hash(runs["default_coevolve"]) == study_lib.run_hash(comparison["coevolve"])
    plus = runs["explorer1_coevolve"].data_engine
    assert plus.explorer_model == "openai:qwen-plus" and plus.explore.explorer == "llm"
    assert plus.synthesis.abstraction == "llm" and runs["explorer1_static"].training.pool_updates == "none"


def test_learning_curves_plot(compared, tmp_path):
    folder, _ = compared
    summaries = {v: [json.loads((d / "summary.json").read_text())] for v, d in folders(STUDY, folder).items()}
    fig = plots.plot_learning_curves(summaries, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 5000
    assert all(", n=" in ax.get_title() for ax in fig.axes[:-1])  # each panel says how many tasks it holds


def test_the_pool_panel_steps_up_where_the_rounds_ran_not_at_the_evaluations():
    """Issue 49: the pool panel was drawn from the evaluation points only, so a pool that grew at steps 4 and 8 of an
    evaluation every 12 steps showed flat until 12. It is drawn from the rounds."""
    run = {"pool_size_start": 91, "steps": 12, "eval_curve": [{"step": 0}, {"step": 12}],
           "rounds": [{"step": 4, "pool_size_after": 150}, {"step": 8, "pool_size_after": 200}]}
    assert list(plots.pool_curve(run).items()) == [(0, 91), (4, 150), (8, 200), (12, 200)]


def test_bootstrap_interval_brackets_the_mean_and_keeps_pairs():
    mean, low, high = report.bootstrap_ci([[1, 0, 1, 1], [1, 1, 0, 1]])
    assert mean == 0.75 and 0.0 <= low < mean < high <= 1.0
    assert report.bootstrap_ci([[0.5] * 4] * 3) == (0.5, 0.5, 0.5)
    # a difference that is the same on every task has no spread, whatever the task draw
    assert report.bootstrap_ci([[1 - 0, 1 - 0], [1 - 0, 1 - 0]]) == (1.0, 1.0, 1.0)


def test_pool_sizes_are_printed_per_seed_in_seed_order():
    rows = [{"variant": "coevolve", "seed": seed, "eval_set": name, "d0_tasks": 91, "pool_tasks": pool}
            for seed, pool in ((2, 855), (0, 840), (1, 855)) for name in ("a", "b")]
    assert report._pool_cell(rows, "coevolve") == ", D_0 91 tasks, final pool 840/855/855 tasks (seeds 0/1/2)"
    assert report._pool_cell([r for r in rows if r["seed"] == 1], "coevolve") == ", D_0 91 tasks, final pool 855 tasks"
    assert (report._pool_cell([{**r, "pool_tasks": 91} for r in rows], "coevolve")
            == ", D_0 91 tasks, final pool 91 tasks")
    assert report._pool_cell([{"variant": "zero_shot", "seed": 0}], "zero_shot") == ""


def test_cli_rejects_a_bad_override(capsys):
    assert cli(["compare", "--set", "training.nope=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m coevolve_lib compare: error: training.nope: unknown field; valid: ")
    assert err.count("\n") == 1 and "group_size" in err


def test_unfinished_runs_train_side_by_side_in_their_own_processes(tmp_path):
    study = study_lib.Study("two", (), (study_lib.Variant("a", ("training.pool_updates=none",)),
                                        study_lib.Variant("b", ("training.pool_updates=none",
                                                                "training.learning_rate=0.002"))))
    plans = study_lib.planned_runs(study, "tiny", [0], SMALL, tmp_path / "runs")
    study_lib.train_in_parallel(plans, jobs=2, progress=False)
    for planned in study_lib.planned_runs(study, "tiny", [0], SMALL, tmp_path / "runs"):
        assert planned["finished"], planned["variant"]
        log = (planned["folder"] / "train.log").read_text()  # each process's output went to its run's log
        assert "train_runtime" in log
    summaries = [json.loads((p["folder"] / "summary.json").read_text()) for p in plans]
    assert plans[0]["folder"] != plans[1]["folder"] and all(s["steps"] == 2 for s in summaries)


def test_a_run_whose_d0_holds_no_task_is_kept_in_the_results_as_not_trained(tmp_path):
    """Exploration runs of 2 calls cannot give a task of 3 (`synthesis.min_calls`): D_0 is empty, the run cannot
    train, and the study records that, with what D_0 did, instead of stopping or dropping the run."""
    study = study_lib.Study("stuck", ("table12",), (study_lib.Variant("short_runs",
                                                                      ("data_engine.explore.calls_per_run=2",)),))
    rows = study_lib.run_study(study, "tiny", [0], SMALL, tmp_path / "runs", results_path=tmp_path / "r.json",
                               progress=False)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert rows == [] and saved["metrics"] == [] and validate_result(saved) == []
    [entry] = saved["details"]["not_trained"]
    assert entry["variant"] == "short_runs" and entry["seed"] == 0 and entry["reason"].startswith("D_0 has no task")
    assert entry["d0"]["accepted"] == 0 and entry["d0"]["triplets"] > 0 and entry["d0"]["explorer_calls"] == 0

    # a study's worker process raises it and its parent reads it back whole (train_in_parallel)
    again = pickle.loads(pickle.dumps(EmptyPool(entry["reason"], {"targets": 13})))
    assert isinstance(again, EmptyPool) and str(again) == entry["reason"] and again.report == {"targets": 13}


def test_a_study_by_name():
    assert catalog.study_named("signals") is SIGNALS
    assert catalog.study_named("baselines", reflector="explorer").variants[0].overrides[-1] == (
        "training.baselines.reflexion_reflector=explorer")
    assert [v.name for v in catalog.study_named("sensitivity", [16], [1]).variants] == ["coevolve", "n16", "f1"]
    with pytest.raises(profiles.ConfigError, match="no study 'nope'"):
        catalog.study_named("nope")


def test_several_studies_train_each_shared_run_once(monkeypatch, tmp_path):
    side_by_side, in_turn = [], []
    monkeypatch.setattr(study_lib, "train_in_parallel", lambda planned, jobs, progress: side_by_side.extend(planned))
    monkeypatch.setattr(study_lib, "train", lambda run, folder, **options: in_turn.append(folder))
    studies = [COMPARISON, SIGNALS, VALIDATION]
    runs = study_lib.train_studies(studies, "tiny", [0], ["training.max_steps=2"], jobs=2, runs_dir=tmp_path)
    assert runs == side_by_side and len({p["folder"] for p in runs}) == len(runs) == 7  # 3 + 3 + 1: coevolve once
    assert [p["variant"] for p in runs] == ["static", "random", "coevolve", "no_forgetting", "no_rare",
                                            "no_boundary", "no_validation"]
    assert study_lib.train_studies(studies, "tiny", [0], ["training.max_steps=2"], runs_dir=tmp_path) == runs
    assert in_turn == [p["folder"] for p in runs]  # one job: in this process, in turn
