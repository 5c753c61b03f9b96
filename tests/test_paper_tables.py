"""Assembling the paper's tables from results files: a missing file is an error naming the notebook to run (or a
"not run" cell when allowed), a file from another configuration is always an error, and every kit row carries its
scale. The results documents here are written by the same `run_study` path's row builder from a config the test
resolves, with per-task outcomes chosen by the test (the checks under test read hashes, not training)."""

import json
import re
from pathlib import Path

import pytest

from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.results import write_result
from coevolve_lib.profiles import run_config
from coevolve_lib.studies import catalog, kit_table, results_folder, verdicts
from coevolve_lib.studies import tables as paper_tables
from coevolve_lib.studies.catalog import COMPARISON
from coevolve_lib.studies.run import results_file, run_hash, settings_hash, variant_run

OVERRIDES = ["training.max_steps=2"]


BFCL_SETS = ("heldout/new_tasks/abc", "heldout/new_envs/def", "pool/d0", "bfcl/v3/multi_turn_base/val")
APPWORLD_SETS = ("heldout/new_envs/def", "pool/d0", "appworld-synthetic/dev")  # tiny-appworld's: set (b) only


def study_doc(results_dir: Path, study, outcomes: dict[str, list[float]], profile: str = "tiny",
              eval_sets=BFCL_SETS, overrides=OVERRIDES, weights: dict[str, str] | None = None) -> Path:
    """A results file of `study` on `profile`, seed 0: rows on each of `eval_sets` per variant of `outcomes` (with
    `weights`, each variant's final-weights digest)."""
    rows = []
    benchmark = eval_sets[-1].split("/")[0].removesuffix("-synthetic")
    for variant, values in outcomes.items():
        study_variant = next((v for v in study.variants if v.name == variant), study.variants[0])
        run = variant_run(profile, overrides, study_variant, 0)
        per_task = {f"t{i}": value for i, value in enumerate(values)}
        paper_row = study.zero_shot if variant == "zero_shot" else study_variant.paper_row
        for eval_set in eval_sets:
            rows.append({"variant": variant, "paper_row": paper_row, "benchmark": benchmark,
                         "eval_set": eval_set, "metric": "greedy_success", "k": 1, "temperature": 0.0, "seed": 0,
                         "n": len(per_task), "value": 100 * sum(per_task.values()) / len(per_task),
                         "steps": run.training.max_steps, "tasks_per_step": 8, "group_size": 8, "profile": profile,
                         "model": "tiny", "config_hash": run_hash(run), "run_dir": "runs/x", "per_task": per_task,
                         **({"weights_sha256": weights[variant]} if weights else {})})
    settings = {"profile": profile, "seeds": [0], "overrides": overrides, "pass_k": study.pass_k,
                "rank_by": run_config(profile).data_engine.heldout.rank_by,
                "variants": [{"name": v.name, "overrides": list(v.overrides), "paper_row": v.paper_row}
                             for v in study.variants]}
    path = results_file(results_dir, study.name, profile, [0], 2)
    write_result(path, experiment=study.name, profile=profile, model="tiny",
                 config_hash=settings_hash(profile, [0], overrides, study), config=settings, metrics=rows)
    return path


def comparison_doc(results_dir: Path, outcomes: dict[str, list[float]], overrides=OVERRIDES,
                   weights: dict[str, str] | None = None) -> Path:
    """A comparison results file of profile tiny, seed 0: rows on both held-out sets, D_0 and BFCL val per variant."""
    return study_doc(results_dir, COMPARISON, outcomes, overrides=overrides, weights=weights)


OUTCOMES = {"zero_shot": [0, 0, 1, 0], "static": [1, 0, 1, 0], "random": [1, 0, 1, 0], "coevolve": [1, 1, 1, 0]}


def test_a_missing_results_file_names_the_notebook_to_run(tmp_path):
    with pytest.raises(results_folder.MissingResults, match="comparison results .* run notebooks/07"):
        paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0]))


def test_allowed_missing_files_give_not_run_cells_never_zeros(tmp_path):
    results = results_folder.Results(tmp_path, "tiny", [0], allow_missing=True)
    tables = paper_tables.assemble(results)
    assert len(results.missing) == 15  # 9 files of the BFCL studies and runs, 6 of the AppWorld studies (notebook 15)
    for table in tables:  # every cell the kit would have measured says it did not run, with the reason
        kit_columns = [c for c in table.kit.columns if c.startswith("kit")] or list(table.kit.columns)
        cells = [str(v) for c in kit_columns for v in table.kit[c] if str(v) != "-"]
        assert cells and all("not run" in cell or "not reproducible" in cell for cell in cells), table.table_ids
    text = "\n".join(t.markdown() for t in tables)
    for table_id in ("table1", "table2", "table3", "table4", "table14", "table5", "table6", "table7", "table8",
                     "table10", "table11", "table12", "table13", "table15"):
        assert f"## {table_id.replace('table', 'Table ')}." in text


def test_measured_rows_sit_beside_the_paper_with_their_scale(tmp_path):
    comparison_doc(tmp_path, OUTCOMES)
    results = results_folder.Results(tmp_path, "tiny", [0], allow_missing=True)
    tables = {t.table_ids[0]: t for t in paper_tables.assemble(results)}
    table3 = tables["table3"].kit
    assert list(table3.index) == ["zero_shot", "static", "random", "coevolve"]
    assert table3.loc["coevolve", "held-out (a) new tasks, pool envs greedy_success %"].startswith("75.0 [")
    assert table3.loc["coevolve", "held-out (b) unseen envs greedy_success %"].startswith("75.0 [")
    assert table3.loc["coevolve", "D_0 (trained on) greedy_success %"].startswith("75.0 [")
    assert table3.loc["coevolve", "paper BFCL"] == "63.00"
    assert "profile=tiny, model=tiny, 2 steps" in table3.loc["static", "scale"]
    cross = tables["table8"].kit["kit held-out (a) new tasks, pool envs"]
    assert cross["baseline wrong, CoEvolve correct"] == 25.0 and cross["baseline correct, CoEvolve correct"] == 50.0
    assert tables["table10"].kit.loc["Reflexion", "kit held-out (a) new tasks, pool envs %"].startswith("not run")
    assert any("(b) unseen envs" in c for c in tables["table2"].kit.columns)  # both sets on every row
    path = kit_table.write_markdown(list(tables.values()), tmp_path / "tables.md", "# t")
    assert "| coevolve |" in path.read_text() and "63.00" in path.read_text()


def test_a_kit_row_that_ended_with_an_earlier_rows_weights_says_so(tmp_path):
    weights = {"zero_shot": "w0", "static": "w1", "random": "w2", "coevolve": "w1"}
    comparison_doc(tmp_path, OUTCOMES, weights=weights)
    tables = {t.table_ids[0]: t for t in paper_tables.assemble(
        results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))}
    table6 = tables["table6"].kit["scale"]  # its rows: the zero-shot policy and CoEvolve, each a _kit_cells row
    assert table6["BFCL (Ours)"].endswith("; THE SAME POLICY AS static: equal final weights on every seed")
    assert "THE SAME POLICY" not in table6["Zero-shot baseline"]
    assert tables["table3"].kit.loc["coevolve", "scale"].endswith("THE SAME POLICY AS static: equal final weights "
                                                                 "on every seed")


def appworld_doc(results_dir: Path, eval_set: str, before: float, after: float,
                 config_hash: str | None = None) -> None:
    """Notebook 14's result: TGC / SGC of the tiny-appworld run before (step 0) and after (step 2) training."""
    metrics = [{"benchmark": "appworld", "eval_set": eval_set, "metric": metric, "value": value, "n": 2, "step": step}
               for step, value in ((0, before), (2, after)) for metric in ("tgc", "sgc")]
    write_result(results_dir / "appworld" / "coevolve_tiny-appworld.json", experiment="appworld_coevolve",
                 profile="tiny-appworld", model="tiny", metrics=metrics,
                 config_hash=config_hash or run_hash(run_config("tiny-appworld")),
                 provenance="profile=tiny-appworld, model=tiny, steps=2")


@pytest.mark.parametrize("eval_set", ["appworld-synthetic/dev", "appworld/test_normal"])
def test_appworld_cells_show_notebook_14s_run_and_never_pass_the_synthetic_world_off_as_the_papers(tmp_path,
                                                                                                   eval_set):
    appworld_doc(tmp_path, eval_set, 0.0, 50.0)
    tables = {t.table_ids[0]: t for t in paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0],
                                                                                    allow_missing=True))}
    start, trained = tables["table1"].kit["AppWorld (TGC/SGC)"]
    assert "TGC 0.0% of 2" in start and "step 0" in start and "TGC 50.0% of 2" in trained and "step 2" in trained
    synthetic = eval_set.startswith("appworld-synthetic")
    assert all(("not run" in cell and "synthetic world" in cell) == synthetic for cell in (start, trained))
    assert any("CoEvolve: " in note and "TGC 50.0%" in note for note in tables["table2"].notes)


def test_the_appworld_studies_stand_under_each_table_beside_the_papers_appworld_column(tmp_path):
    comparison_doc(tmp_path, OUTCOMES)
    study_doc(tmp_path, COMPARISON, OUTCOMES, "tiny-appworld", APPWORLD_SETS)
    baselines = catalog.baselines()  # its ReST run missing: said in the row, never a number
    study_doc(tmp_path, baselines, {"zero_shot": [0, 0], **{v.name: [1, 0] for v in baselines.variants
                                                           if v.name != "rest"}}, "tiny-appworld", APPWORLD_SETS)
    grid = catalog.sensitivity([16], [1])  # Tables 4 and 14: only Table 4 has an AppWorld column
    study_doc(tmp_path, grid, {v.name: [1, 0] for v in grid.variants}, "tiny-appworld", APPWORLD_SETS)
    results = results_folder.Results(tmp_path, "tiny", [0], allow_missing=True)
    tables = {t.table_ids[0]: t for t in paper_tables.assemble(results)}
    (table4,) = tables["table4"].also
    assert table4.kit.loc["coevolve", "paper AppWorld"] == "35.12" and table4.kit.loc["n16", "paper AppWorld"] == "-"
    table3 = tables["table3"]
    assert not any("AppWorld column" in note for note in table3.notes)  # its AppWorld rows are there
    (appworld,) = table3.also
    assert "synthetic world, not the paper's TestN" in appworld.label and "tiny-appworld" in appworld.label
    assert appworld.kit.loc["coevolve", "paper AppWorld"] == "35.71"
    assert appworld.kit.loc["coevolve", "held-out (b) unseen envs greedy_success %"].startswith("75.0 [")
    assert "profile=tiny-appworld" in appworld.kit.loc["static", "scale"] and "BFCL val %" not in appworld.kit
    assert appworld.kit.loc["coevolve", "AppWorld TGC on appworld-synthetic/dev %"] == "75.0 (n=4)"
    (table2,) = tables["table2"].also
    assert table2.kit.iloc[0]["kit CoEvolve AppWorld TGC %"].startswith("75.0 [")  # appworld-synthetic/dev
    cross = tables["table8"].kit
    assert cross["kit AppWorld held-out (b) unseen envs"]["baseline wrong, CoEvolve correct"] == 25.0
    assert cross["paper AppWorld"]["baseline wrong, CoEvolve correct"] == "16.67%"
    (table10,) = tables["table10"].also
    assert table10.kit.loc["ReST", "kit AppWorld TGC %"] == "not run: not in the study"
    assert table10.kit.loc["Curriculum Learning", "kit AppWorld TGC %"].startswith("50.0 [")
    assert not any("(a) new tasks" in column for column in table10.kit)  # a set tiny-appworld has none of
    assert tables["table5"].also == [] and any("AppWorld column: not run" in n for n in tables["table5"].notes)
    text = kit_table.write_markdown(list(tables.values()), tmp_path / "tables.md", "# t").read_text()
    assert text.count("**Kit on AppWorld, the kit's synthetic world") == 4  # Tables 2-4, 10 (8's are columns)


def test_an_appworld_result_of_another_configuration_is_refused(tmp_path):
    appworld_doc(tmp_path, "appworld-synthetic/dev", 0.0, 0.0, config_hash="0" * 12)
    with pytest.raises(results_folder.StaleResults, match="AppWorld training result ran another configuration"):
        paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))


def test_results_of_another_configuration_are_refused(tmp_path):
    path = comparison_doc(tmp_path, OUTCOMES)
    doc = json.loads(path.read_text())
    doc["metrics"][2]["config_hash"] = "0" * 12  # a run of another configuration
    path.write_text(json.dumps(doc))
    with pytest.raises(results_folder.StaleResults, match="another configuration"):
        paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))


def test_a_changed_study_is_refused(tmp_path, monkeypatch):
    comparison_doc(tmp_path, OUTCOMES)
    changed = COMPARISON.__class__(COMPARISON.name, COMPARISON.tables, COMPARISON.variants[:2],
                                   COMPARISON.zero_shot, COMPARISON.pass_k)
    monkeypatch.setattr(paper_tables, "COMPARISON", changed)
    monkeypatch.setitem(paper_tables.STUDIES, "comparison", changed)
    with pytest.raises(results_folder.StaleResults, match="other settings than the current study"):
        paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))


def test_two_files_for_the_same_seeds_are_ambiguous(tmp_path):
    comparison_doc(tmp_path, OUTCOMES)
    path = results_file(tmp_path, "comparison", "tiny", [0], 2)
    path.with_name(path.name.replace("steps2", "steps10")).write_text(path.read_text())
    with pytest.raises(results_folder.StaleResults, match="several current comparison results"):
        paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))


def test_a_file_of_an_older_configuration_beside_the_current_one_is_passed_over(tmp_path):
    """A fresh clone's `make reproduce` writes a new training length beside the committed older file."""
    path = comparison_doc(tmp_path, OUTCOMES)
    old = json.loads(path.read_text())
    for row in old["metrics"]:
        row["config_hash"], row["value"] = "0" * 12, 99.0
    path.with_name(path.name.replace("steps2", "steps10")).write_text(json.dumps(old))
    results = results_folder.Results(tmp_path, "tiny", [0], allow_missing=True)
    assert results.study(COMPARISON, "07") == json.loads(path.read_text())
    path.unlink()  # only the old one left: refused, saying why
    with pytest.raises(results_folder.StaleResults, match="another configuration"):
        results.study(COMPARISON, "07")


def test_the_tables_notebook_stops_on_missing_results(tmp_path):
    import os
    import subprocess
    import sys

    from coevolve_lib.core.paths import REPO_ROOT

    env = {**os.environ, "COEVOLVE_RESULTS_DIR": str(tmp_path / "results"),
           "COEVOLVE_FIGURES_DIR": str(tmp_path / "figures"), "COEVOLVE_RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-m", "coevolve_lib", "notebook", "notebooks/20_paper_tables.ipynb",
                           str(tmp_path / "out.ipynb"), "--quiet"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1
    assert "MissingResults: comparison results for seeds [0] not found" in done.stderr
    assert not (tmp_path / "results" / "tables.md").exists()


def test_table12_puts_each_explorer_beside_the_paper_row_it_stands_for():
    from coevolve_lib.studies.catalog import explorers

    study = explorers({"Qwen-Plus": "openai:qwen-plus"}, "Qwen-Max")
    rows = [{"variant": v.name, "benchmark": "bfcl", "metric": "greedy_success", "eval_set": eval_set, "seed": 0,
             "steps": 2,
             "tasks_per_step": 8, "group_size": 8, "per_task": {"t0": float(v.name.endswith("coevolve")), "t1": 0.0}}
            for v in study.variants for eval_set in ("heldout/new_tasks/abc", "bfcl/v3/multi_turn_base/val")]
    doc = {"profile": "paper-qwen3-4b", "model": "m", "config": {"seeds": [0], "variants": [
        {"name": v.name, "overrides": list(v.overrides), "paper_row": v.paper_row} for v in study.variants]},
        "metrics": rows}
    table = paper_tables.table12(doc)
    kit = table.kit
    assert list(kit.index) == ["the profile's (paper-qwen3-4b)", "openai:qwen-plus"]
    assert list(kit["paper row"]) == ["Qwen-Max", "Qwen-Plus"] and list(kit["paper CoEvolve"]) == ["63.00", "59.50"]
    assert kit.loc["openai:qwen-plus", "kit CoEvolve held-out (a) new tasks, pool envs %"].startswith("50.0")
    assert kit.loc["openai:qwen-plus", "kit synthesis only held-out (a) new tasks, pool envs %"].startswith("0.0")
    assert "Qwen3-4B" in table.notes[0]  # the paper's explorer no endpoint was given for


def test_table12_says_a_replayed_explorer_whose_d0_held_no_task_trained_nothing():
    from coevolve_lib.studies.catalog import explorers

    study = explorers({"Qwen3-4B": "openai:policy"}, "", {"Qwen3-4B": "coevolve_lib/data/llm_calls/x.jsonl"})
    rows = [{"variant": v.name, "benchmark": "bfcl", "metric": "greedy_success", "eval_set": "heldout/new_tasks/abc",
             "seed": 0, "steps": 2, "tasks_per_step": 8, "group_size": 8, "per_task": {"t0": 1.0, "t1": 0.0}}
            for v in study.variants if v.name.startswith("default")]
    d0 = {"targets": 13, "explorer_calls": 112, "triplets": 8, "valid_triplets": 0, "specs": 0, "accepted": 0,
          "explore_skipped": {"model_error": 104, "no_valid_action": 8}, "rejection_reasons": {}}
    doc = {"profile": "tiny", "model": "m", "config": {"seeds": [0], "variants": [
        {"name": v.name, "overrides": list(v.overrides), "paper_row": v.paper_row} for v in study.variants]},
        "metrics": rows, "details": {"not_trained": [{"variant": f"explorer1_{kind}", "seed": 0, "reason": "D_0 has no "
                                                      "task", "d0": d0} for kind in ("static", "coevolve")]}}
    table = paper_tables.table12(doc)
    row = table.kit.loc["openai:policy (replayed: coevolve_lib/data/llm_calls/x.jsonl)"]
    assert row["paper row"] == "Qwen3-4B" and row["paper CoEvolve"] == "56.50"
    cells = [value for column, value in row.items() if column.startswith("kit ")]
    assert cells and all(value == "not trained (D_0 empty)" for value in cells)
    assert table.kit.loc["the profile's (tiny)",
                         "kit synthesis only held-out (a) new tasks, pool envs %"].startswith("50.0")
    [static, coevolve] = [n for n in table.notes if "not trained" in n]
    assert static.startswith("explorer1_static seed 0") and "112 explorer calls" in static
    assert "model_error 104" in static
    with pytest.raises(ConfigError, match="not in explorer_models"):
        explorers({}, "", {"Qwen3-4B": "x.jsonl"})


def test_table12_renders_when_no_variant_trained():
    """Issue 47: with every explorer's D_0 empty, Table 12 raised `RuntimeError: generator raised StopIteration`."""
    from coevolve_lib.studies.catalog import explorers

    study = explorers({"Qwen3-4B": "openai:policy"}, "", {"Qwen3-4B": "coevolve_lib/data/llm_calls/x.jsonl"})
    d0 = {"targets": 13, "explorer_calls": 0, "triplets": 0, "valid_triplets": 0, "specs": 0, "accepted": 0,
          "explore_skipped": {}, "rejection_reasons": {}}
    doc = {"profile": "tiny", "model": "m", "config": {"seeds": [0], "variants": [
        {"name": v.name, "overrides": list(v.overrides), "paper_row": v.paper_row} for v in study.variants]},
        "metrics": [], "details": {"not_trained": [{"variant": v.name, "seed": 0, "d0": d0} for v in study.variants]}}
    table = paper_tables.table12(doc)
    assert all("no variant trained" in scale for scale in table.kit["scale"])
    assert (table.kit.loc["openai:policy (replayed: coevolve_lib/data/llm_calls/x.jsonl)",
                          "kit CoEvolve held-out (a) new tasks, pool envs %"] == "not trained (D_0 empty)")


def rows(variant: str, outcomes: list[float], eval_set: str = "heldout/new_tasks/abc", seed: int = 0) -> dict:
    return {"variant": variant, "metric": "greedy_success", "eval_set": eval_set, "seed": seed, "benchmark": "bfcl",
            "per_task": {f"t{i}": value for i, value in enumerate(outcomes)}}


def test_a_claim_is_reproduced_contradicted_or_unresolved_by_its_paired_interval():
    """Issue 49: the verdict read the rendered cells' words; it is computed from the rows' paired differences."""
    better, worse = [1.0] * 30 + [0.0] * 10, [1.0] * 10 + [0.0] * 30
    results = [rows("coevolve", better), rows("static", worse), rows("random", better)]
    where = "heldout/new_tasks/abc"
    assert verdicts.compared(results, "coevolve", "static", where).outcome == "reproduced"
    assert verdicts.compared(results, "static", "coevolve", where).outcome == "contradicted"
    assert verdicts.compared(results, "coevolve", "random", where).outcome == "unresolved"
    assert verdicts.compared(results, "coevolve", "rest", where).outcome == "not measured"
    found = verdicts.compared(results, "coevolve", "static", where)
    assert found.evidence.startswith("+50.0 [+") and "held-out (a)" in found.evidence and "1 seed(s)" in found.evidence
    line = verdicts.line([found, verdicts.compared(results, "coevolve", "random", where)])
    assert line.startswith("verdict at this scale: reproduces part of the paper's direction, the rest within noise: "
                           "coevolve above static: +50.0")
    assert verdicts.line([found]).startswith("verdict at this scale: reproduces the paper's direction: ")
    assert "contradicts the paper" in verdicts.line([found, verdicts.compared(results, "static", "coevolve", where)])
    assert "cannot resolve the paper's direction" in verdicts.line(
        [verdicts.compared(results, "coevolve", "random", where)])


def test_a_study_claim_takes_its_direction_from_the_papers_numbers():
    """Table 10: the paper has CoEvolve 63.00 above GRPO 58.00 and Reflexion 31.00; Table 4: F = 20 (57.50) below
    F = 10 (63.00). The claim follows the paper's numbers whichever way the pair is given."""
    better, worse = [1.0] * 30 + [0.0] * 10, [1.0] * 10 + [0.0] * 30
    doc = {"config": {"rank_by": "new_tasks"}, "metrics": [
        {**rows("coevolve", worse), "paper_row": "CoEvolve"}, {**rows("static", better), "paper_row": "GRPO"},
        {**rows("reflexion", worse), "paper_row": "Reflexion"}]}
    found = verdicts.paper_claims(doc, ("table10",), [("static", "coevolve"), ("coevolve", "reflexion")])
    assert [(f.claim, f.outcome) for f in found] == [("coevolve above static", "contradicted"),
                                                     ("coevolve above reflexion", "unresolved")]
    assert verdicts.paper_claims(doc, ("table10",), [("coevolve", "nosuch")]) == []  # no paper number: no claim


def test_every_table_has_a_verdict_line_and_the_header_every_studys_seeds(tmp_path):
    """Issue 49: a verdict line under every table, measured or not run, and the seeds of each study in the header."""
    comparison_doc(tmp_path, OUTCOMES)
    tables = paper_tables.assemble(results_folder.Results(tmp_path, "tiny", [0], allow_missing=True))
    for table in tables:
        assert table.verdict and table.verdict.startswith(verdicts.PREFIX), table.table_ids
        assert f"- {table.verdict}" in table.markdown()
    by_id = {t.table_ids[0]: t for t in tables}
    assert "coevolve above zero_shot: +50.0" in by_id["table1"].verdict
    assert "static above zero_shot" in by_id["table3"].verdict and "coevolve above random" in by_id["table3"].verdict
    assert by_id["table5"].verdict == verdicts.unresolvable("signals results not run")
    header = kit_table.header("tiny", [0], {"comparison": [0, 1, 2]}, 0)
    assert "(profile tiny, seeds [0]; comparison: seeds [0, 1, 2])" in header


def test_table15_states_its_levels_against_the_papers_range():
    inside = verdicts.level_finding("SR", [20.0, 22.5], [14.76, 28.61, 21.0])
    outside = verdicts.level_finding("SR", [71.05, 74.22], [14.76, 28.61, 21.0])
    assert inside.outcome == "reproduced" and outside.outcome == "contradicted"
    assert outside.evidence == "71.05-74.22% over 2 round(s)"


def test_a_row_that_is_another_tables_run_says_so():
    """Issue 49: Table 12's row of the profile's own explorer is the comparison's static and CoEvolve seed-0 runs."""
    explorers = {"metrics": [{"variant": "default_static", "seed": 0, "config_hash": "a"},
                             {"variant": "default_static", "seed": 0, "config_hash": "a"},
                             {"variant": "explorer1_static", "seed": 0, "config_hash": "c"}]}
    comparison = {"metrics": [{"variant": "static", "seed": 0, "config_hash": "a"},
                              {"variant": "static", "seed": 1, "config_hash": "b"}]}
    assert paper_tables.shared_runs(explorers, comparison, "the comparison") == [
        "default_static is the comparison's static run (the same run: equal config hashes), seed(s) [0]"]
    assert paper_tables.shared_runs(explorers, None, "the comparison") == []


def test_tables_md_links_every_figure_with_its_caption(tmp_path):
    """Issue 49: no figure was linked from tables.md. Every committed figure of the tiny profile has a caption, and
    the links resolve from where tables.md lies."""
    root = Path(__file__).resolve().parent.parent
    figures = root / "figures" / "tiny"
    index = kit_table.figure_index(figures, root / "results" / "tiny" / "tables.md")
    links = re.findall(r"\]\(([^)]+)\): (.*)", index)
    assert len(links) == len(list(figures.rglob("*.png"))) >= 10
    assert all(caption != "no caption" for _, caption in links)
    assert all((root / "results" / "tiny" / link).resolve().is_file() for link, _ in links)
    assert kit_table.figure_index(tmp_path, tmp_path / "tables.md").endswith("No figure drawn yet.\n")


def test_every_interval_the_readme_quotes_is_in_the_tables_it_names():
    """Issue 49: the README quoted numbers no results file held any more. Every `mean [low, high]` it quotes is one of
    results/tiny/tables.md's cells or notes (regenerated by `make reproduce`), so a rerun that moves a number fails
    here until the README says what was measured."""
    import re

    root = Path(__file__).resolve().parent.parent
    interval = re.compile(r"[+-]?\d+\.\d \[[+-]?\d+\.\d, [+-]?\d+\.\d\]")
    quoted = interval.findall((root / "README.md").read_text())
    measured = set(interval.findall((root / "results" / "tiny" / "tables.md").read_text()))
    assert len(quoted) >= 10
    assert [q for q in quoted if q not in measured] == []


def test_missing_appworld_studies_are_not_run_rows_and_counted(tmp_path):
    """Notebook 15 runs the studies it is given (by default one): the others' AppWorld rows read "not run", and the
    header's count of missing files says so, where a missing BFCL study stops the tables."""
    results = results_folder.Results(tmp_path, "tiny", [0])
    appworld = results.on_appworld()
    assert appworld.profile == "tiny-appworld" and appworld.study(COMPARISON, "15") is None
    assert len(results.missing) == 1 and "comparison results for seeds [0] not found" in results.missing[0]
    assert results_folder.Results(tmp_path, "paper-qwen2.5-7b", [0]).on_appworld() is None  # no counterpart


def test_a_missing_appworld_training_result_is_counted_not_fatal(tmp_path):
    """`make test` runs notebook 20 without notebook 14 (in `make test-paper`): its AppWorld cells read "not run" and
    the header counts the missing file, where a missing BFCL result stops the tables."""
    results = results_folder.Results(tmp_path, "tiny", [0])
    assert results.appworld() is None
    assert len(results.missing) == 1 and "AppWorld training result coevolve_tiny-appworld.json" in results.missing[0]
    assert "run notebooks/14_appworld_coevolve.ipynb" in results.missing[0]
    assert results_folder.Results(tmp_path, "paper-qwen2.5-7b", [0]).appworld() is None  # no counterpart
