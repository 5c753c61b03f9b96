"""Every table of the paper beside the kit's numbers, assembled only from one profile's results folder (results/v2
files written by the notebooks), and written out as `tables.md`.

Two rules keep a table honest (`studies.results_folder` reads the files):
- A results file the tables need but that does not exist is an error (`MissingResults`, naming the notebook that
  writes it), unless the caller allows it: then the kit's cells read "not run" with the reason (a paper profile's
  runs that have not been launched, a partial `--only` pass).
- A results file whose runs no longer match the current configuration (the profile or a study's variants changed
  since it was written) is always an error (`StaleResults`): a table never shows numbers of another configuration.

Rows the kit cannot produce say why ("not run: ..."), never 0: AppWorld columns (its official data),
ALFWorld and WebShop (not offline), and explorers no endpoint was given for (Table 12).
"""

from __future__ import annotations

import pandas as pd

from coevolve_lib.core import paper
from coevolve_lib.core.results import HELDOUT_TITLES
from coevolve_lib.studies import verdicts
from coevolve_lib.studies.catalog import COEVOLVE, COMPARISON, PAPER_D0_SIZES, PAPER_FEEDBACK_EVERY, STUDIES
from coevolve_lib.studies.catalog import baselines as baselines_study
from coevolve_lib.studies.catalog import explorers as explorers_study
from coevolve_lib.studies.catalog import sensitivity as sensitivity_grid
from coevolve_lib.studies.kit_table import KitTable, not_built
from coevolve_lib.studies.report import (
    benchmark_split,
    bootstrap_ci,
    paired_differences,
    ranked_sets,
    same_policy_note,
    set_title,
    study_table,
)
from coevolve_lib.studies.results_folder import Results, StaleResults
from coevolve_lib.studies.run import ZERO_SHOT, Study, default_runs_dir, run_folder, variant_run

APPWORLD = ("not run: AppWorld's official task data cannot be downloaded offline (APPWORLD_ROOT, docs/appworld.md); "
            "the studies' variants run on BFCL only")
"""An AppWorld cell of a study's table (the loop itself runs on AppWorld: notebook 14, `appworld_cell`)."""
OFFLINE = "not reproducible offline: no {} environment in the kit"
PAPER_COLUMN = "BFCL"


# ------------------------------------------------------------------------------------------------- the tables

def _rows(doc: dict, variant: str, eval_prefix: str, metric: str = "greedy_success") -> list[dict]:
    return [r for r in doc["metrics"] if r["variant"] == variant and r["metric"] == metric
            and r["eval_set"].startswith(eval_prefix)]


def _mean_ci(rows: list[dict]) -> str:
    if not rows:
        return "-"
    tasks = sorted(rows[0]["per_task"])
    mean, low, high = bootstrap_ci([[r["per_task"][t] for t in tasks] for r in rows])
    return f"{100 * mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _scale(doc: dict) -> str:
    row = next((r for r in doc["metrics"] if r["variant"] != "zero_shot"), None)
    trained = (f"{row['steps']} steps x {row['tasks_per_step']} tasks x K={row['group_size']}" if row
               else "no variant trained")  # e.g. every explorer of Table 12 left an empty D_0
    return f"profile={doc['profile']}, model={doc['model']}, {trained}, seeds {doc['config']['seeds']}"


def _kit_cells(doc: dict | None, variant: str) -> dict:
    """Success of one variant on each held-out set and on the BFCL val split (mean [95% CI] over seeds and tasks)."""
    columns = {f"kit held-out {title} %": f"heldout/{name}/" for name, title in HELDOUT_TITLES.items()}
    columns["kit D_0 (trained on) %"] = "pool/d0"
    columns["kit BFCL val %"] = "bfcl/"
    if doc is None:
        return {**{column: "not run" for column in columns}, "scale": "-"}
    variants = [ZERO_SHOT, *(v["name"] for v in doc["config"]["variants"])]
    return {**{column: _mean_ci(_rows(doc, variant, prefix)) for column, prefix in columns.items()},
            "scale": _scale(doc) + same_policy_note(doc["metrics"], variant, variants)}


def _ranked_prefix(doc: dict) -> str:
    """The eval_set prefix of the held-out set a study ranks by (`data_engine.heldout.rank_by`)."""
    return f"heldout/{doc['config'].get('rank_by', 'new_tasks')}/"


PAPER_BACKBONE = "Qwen3-4B"
"""The paper's backbone the kit's rows stand beside (its ablations and Tables 3-15 use Qwen3-4B-Instruct)."""


def _backbone_rows(table_id: str) -> tuple[list[str], list[str]]:
    """Table 1's Qwen3-4B row and the "-w/ CoEvolve" row under it."""
    rows = paper.tables()[table_id]["rows"]
    index = next(i for i, row in enumerate(rows) if row[0].startswith(PAPER_BACKBONE))
    return rows[index], rows[index + 1]


def appworld_cell(doc: dict | None, trained: bool) -> str:
    """TGC / SGC of the starting (or the `trained`) policy from notebook 14's result: measured on an official split,
    or "not run" with the reason; a run on the synthetic world is named as such, never shown as the paper's split."""
    missing = "not run: AppWorld's official task data cannot be downloaded offline (APPWORLD_ROOT, docs/appworld.md)"
    if doc is None:
        return missing
    step = max(r["step"] for r in doc["metrics"]) if trained else 0
    value = {r["metric"]: r for r in doc["metrics"] if r["step"] == step}
    measured = (f"TGC {value['tgc']['value']}% of {value['tgc']['n']} / SGC {value['sgc']['value']}% of "
                f"{value['sgc']['n']} on {value['tgc']['eval_set']} at step {step} ({doc['provenance']})")
    if value["tgc"]["eval_set"].startswith("appworld-synthetic/"):
        return f"{missing}; the kit's loop on the synthetic world (notebook 14), not the paper's split: {measured}"
    return measured


def table1(comparison: dict | None, appworld: dict | None) -> KitTable:
    column = paper.tables()["table1"]["columns"].index("BFCL-V3 Multi-turn")
    backbone, with_coevolve = _backbone_rows("table1")
    rows = [{"row": label, "paper row": paper_row[0], "paper BFCL": paper_row[column],
             **_kit_cells(comparison, variant), "AppWorld (TGC/SGC)": appworld_cell(appworld, variant == "coevolve")}
            for label, paper_row, variant in (("starting policy (zero-shot)", backbone, "zero_shot"),
                                              ("+ CoEvolve", with_coevolve, "coevolve"))]
    verdict = verdicts.unresolvable("comparison results not run")
    if comparison is not None:
        results = comparison["metrics"]
        verdict = verdicts.line([verdicts.compared(results, "coevolve", "zero_shot", eval_set)
                                 for eval_set in (verdicts.ranked(comparison), benchmark_split(results))])
    return KitTable(("table1",), pd.DataFrame(rows).set_index("row"), [
        f"The paper's rows are {backbone[0]}'s; the kit's are the profile's model (scale column). The other models "
        "of Table 1 are not evaluated by the kit."], verdict)


def table2(comparison: dict | None, appworld: dict | None) -> KitTable:
    columns = paper.tables()["table2"]["columns"]
    paper_row = next(r for r in paper.tables()["table2"]["rows"] if r[0].startswith(PAPER_BACKBONE))
    row = {"backbone": "profile model (kit)"}
    for variant, name in (("zero_shot", "Zero-shot"), ("static", "GRPO"), ("coevolve", "CoEvolve")):
        for column, cell in _kit_cells(comparison, variant).items():
            if column != "scale":
                row[column.replace("kit ", f"kit {name} ", 1)] = cell
    row[f"paper ({paper_row[0]})"] = ", ".join(f"{c}: {v}" for c, v in zip(columns[1:], paper_row[1:]))
    row["scale"] = _scale(comparison) if comparison else "-"
    verdict = verdicts.unresolvable("comparison results not run")
    if comparison is not None:
        eval_set = verdicts.ranked(comparison)
        verdict = verdicts.line([verdicts.compared(comparison["metrics"], above, below, eval_set)
                                 for above, below in (("static", "zero_shot"), ("coevolve", "static"))])
    return KitTable(("table2",), pd.DataFrame([row]).set_index("backbone"), [
        f"AppWorld TestN, zero-shot: {appworld_cell(appworld, False)}", f"AppWorld TestN, CoEvolve: "
        f"{appworld_cell(appworld, True)}", "AppWorld TestN, GRPO: not run (the comparison study runs on BFCL)"],
        verdict)


VALIDATION_NOTE = (
    "what validation can remove: a task whose reference calls fail, or miss its objective, when run in a fresh "
    "environment. The deterministic abstraction (synthesis.abstraction=deterministic, every profile without an "
    "explorer LLM, the tiny one included) writes each task from calls the exploration already ran with success, so its "
    "specs all validate and `w/o validation` trains on the same pool (its row says when it ended as the same policy). "
    "Validation "
    "matters under the LLM abstraction (synthesis.abstraction=llm: the paper's Qwen3-Max, or the replayed tiny "
    "explorer of Table 12), whose drafted sequences can fail")
"""Table 11's note: why the offline "w/o validation" row can be the CoEvolve run, and where it is not."""


def from_study(table_ids: tuple[str, ...], doc: dict | None, study: Study, notes: tuple[str, ...] = (),
               pairs: list[tuple[str, str]] | None = None) -> KitTable:
    """A study's table (coevolve_lib.studies.report.study_table) beside the paper's BFCL column, with `notes`, and
    its verdict on `pairs` of variants (default: each against the study's first), in the paper's direction."""
    if doc is None:
        rows = [{"variant": v.name, "paper row": v.paper_row, "kit": "not run"} for v in study.variants]
        return KitTable(table_ids, pd.DataFrame(rows).set_index("variant"), [f"{study.name} results: not run",
                                                                              *notes],
                        verdicts.unresolvable(f"{study.name} results not run"))
    reference = study.variants[0].name
    pairs = pairs or [(v.name, reference) for v in study.variants[1:]]
    return KitTable(table_ids, study_table(doc["metrics"], table_ids, PAPER_COLUMN,
                                           rank_by=doc["config"].get("rank_by", "new_tasks")),
                    ["AppWorld column: " + APPWORLD, *notes],
                    verdicts.line(verdicts.paper_claims(doc, table_ids, pairs, PAPER_COLUMN)))


def coevolve_against_trained(comparison: dict | None) -> tuple[str, ...]:
    """The paper's claim in Table 3 is CoEvolve above the other trained rows: that difference, paired by seed and task
    on the ranked held-out set, as a note (the table's own difference columns are against zero-shot)."""
    if comparison is None:
        return ()
    rank_by = comparison["config"].get("rank_by", "new_tasks")
    ranked = set_title(ranked_sets(comparison["metrics"], rank_by)[0])
    differences = paired_differences(comparison["metrics"], [("coevolve", "static"), ("coevolve", "random")], rank_by)
    cells = [f"{pair} {row['points']} ({row['reading']})" for (pair, where), row in differences.iterrows()
             if where == ranked]
    return (f"CoEvolve against the other trained rows on {ranked} (points, paired 95% CI): {'; '.join(cells)}",)


def table6(comparison: dict | None) -> KitTable:
    cells = paper.column("table6", "BFCL")
    rows = [{"training domain": "Zero-shot baseline", "paper BFCL": cells["Zero-shot Baseline (Qwen3-4B)"],
             **_kit_cells(comparison, "zero_shot"), "AppWorld": APPWORLD},
            {"training domain": "AppWorld (Ours)", "paper BFCL": cells["AppWorld (Ours)"],
             **{column: APPWORLD for column in _kit_cells(None, "") if column != "scale"}, "scale": "-",
             "AppWorld": APPWORLD},
            {"training domain": "BFCL (Ours)", "paper BFCL": cells["BFCL (Ours)"],
             **_kit_cells(comparison, "coevolve"), "AppWorld": APPWORLD}]
    return KitTable(("table6",), pd.DataFrame(rows).set_index("training domain"), verdict=verdicts.unresolvable(
        "the paper's claim is the AppWorld-trained policy's transfer to BFCL, and that row is not run (AppWorld's "
        "official data); the in-domain BFCL row is Table 1's"))


def table7(training: dict | None, comparison: dict | None) -> KitTable:
    if training is None:
        return KitTable(("table7",), pd.DataFrame([{"benchmark": "BFCL", "kit": "not run"}]).set_index("benchmark"),
                        verdict=verdicts.unresolvable("training results not run"))
    measured = next(r for r in training["details"]["table7"] if r["source"].startswith("measured"))
    paper_ratio = paper.cell_value(paper.column("table7", "Feedback Time Ratio")["BFCL"])
    findings = [verdicts.cost_finding(measured["feedback_time_ratio_%"], paper_ratio)]
    gain = "-"
    if comparison is not None:
        findings.append(verdicts.compared(comparison["metrics"], "coevolve", "static", verdicts.ranked(comparison)))
        static, coevolve = (_rows(comparison, v, _ranked_prefix(comparison)) for v in ("static", "coevolve"))
        if static and coevolve:
            before, after = (sum(r["value"] for r in rows) / len(rows) for rows in (static, coevolve))
            relative = f"{100 * (after - before) / before:+.2f}%" if before else "n/a (baseline 0)"
            gain = f"{before:.2f} -> {after:.2f} % on {_ranked_prefix(comparison).rstrip('/')} ({relative})"
    row = {"benchmark": "BFCL (kit)", "feedback time ratio %": measured["feedback_time_ratio_%"],
           "single feedback cost s": measured["single_feedback_s"], "total time s": measured["total_s"],
           "performance gain (static -> CoEvolve)": gain, "scale": measured["scale"]}
    return KitTable(("table7",), pd.DataFrame([row]).set_index("benchmark"), ["AppWorld row: " + APPWORLD],
                    verdicts.line(findings))


def cross_comparison(doc: dict, eval_prefix: str) -> dict[str, float] | None:
    """Table 8's four cells (% of tasks): baseline (static GRPO) correct/wrong x CoEvolve correct/wrong, per task
    and seed."""
    static, coevolve = _rows(doc, "static", eval_prefix), _rows(doc, "coevolve", eval_prefix)
    pairs = [(a["per_task"][t] >= 0.5, b["per_task"][t] >= 0.5) for a, b in zip(
        sorted(static, key=lambda r: r["seed"]), sorted(coevolve, key=lambda r: r["seed"])) for t in a["per_task"]]
    if not pairs:
        return None
    cells = {f"baseline {'correct' if base else 'wrong'}, CoEvolve {'correct' if ours else 'wrong'}":
             round(100 * sum(p == (base, ours) for p in pairs) / len(pairs), 2)
             for base in (True, False) for ours in (True, False)}
    return {**cells, "n (task x seed)": len(pairs)}


def table8(comparison: dict | None) -> KitTable:
    paper_rows = paper.tables()["table8"]["rows"][:2]
    paper_cells = {"baseline correct, CoEvolve correct": paper_rows[0][2], "baseline correct, CoEvolve wrong":
                   paper_rows[0][3], "baseline wrong, CoEvolve correct": paper_rows[1][2],
                   "baseline wrong, CoEvolve wrong": paper_rows[1][3], "n (task x seed)": "-"}
    columns = {"paper BFCL": paper_cells}
    if comparison is None:
        columns["kit"] = {cell: "not run" for cell in paper_cells}
    else:
        heldout = ((f"kit held-out {title}", f"heldout/{name}/") for name, title in HELDOUT_TITLES.items())
        for label, prefix in [*heldout, ("kit BFCL val", "bfcl/")]:
            cells = cross_comparison(comparison, prefix)
            if cells:
                columns[label] = cells
    notes = [f"scale: {_scale(comparison)}" if comparison else "comparison results: not run",
             "AppWorld rows: " + APPWORLD]
    frame = pd.DataFrame(columns).rename_axis("outcome (% of task x seed pairs)")
    verdict = verdicts.unresolvable("comparison results not run") if comparison is None else verdicts.line(
        [verdicts.compared(comparison["metrics"], "coevolve", "static", verdicts.ranked(comparison))],
        "On the pairs the two disagree on, that difference is (baseline wrong, CoEvolve correct) minus (baseline "
        "correct, CoEvolve wrong), the paper's 10 against 5")
    return KitTable(("table8",), frame, notes, verdict)


def table10(baselines: dict | None) -> KitTable:
    """The baselines study (zero-shot and CoEvolve from the same study, so every row has one scale) beside the
    paper's BFCL column; the other environments are not offline."""
    cells = paper.column("table10", "BFCL")
    rows = []
    for method, variant in (("Zero-shot", "zero_shot"), ("Reflexion", "reflexion"),
                            ("Curriculum Learning", "curriculum"), ("ReST", "rest"), ("GRPO", "static"),
                            ("CoEvolve", "coevolve")):
        rows.append({"method": method, "paper BFCL": cells.get(method, "-"), **_kit_cells(baselines, variant),
                     "AppWorld": APPWORLD, "ALFWorld": OFFLINE.format("ALFWorld"),
                     "WebShop": OFFLINE.format("WebShop")})
    verdict = verdicts.unresolvable("baselines results not run") if baselines is None else verdicts.line(
        verdicts.paper_claims(baselines, ("table10",), [(v, "coevolve") for v in
                                                         ("zero_shot", "reflexion", "curriculum", "rest", "static")]))
    return KitTable(("table10",), pd.DataFrame(rows).set_index("method"),
                    ["How each baseline is read for a task-pool GRPO loop: coevolve_lib/engine/pool_updates/, "
                     "docs/deviations.md"], verdict)


def table12(explorers: dict | None, comparison: dict | None = None) -> KitTable:
    """Each explorer's synthesis-only (GRPO on its D_0) and CoEvolve runs beside the paper's row it stands for; a run
    that is also one of `comparison`'s (the same run hash) is named as such."""
    paper_rows = {r[0]: r for r in paper.tables()["table12"]["rows"]}
    if explorers is None:
        rows = [{"exploration model": name, "paper synthesis only": r[1], "paper CoEvolve": r[2], "kit": "not run"}
                for name, r in paper_rows.items()]
        return KitTable(("table12",), pd.DataFrame(rows).set_index("exploration model"),
                        verdict=verdicts.unresolvable("explorers results not run"))
    rows, notes = [], []
    untrained: dict[str, list[dict]] = {}
    for entry in (explorers.get("details") or {}).get("not_trained", []):
        untrained.setdefault(entry["variant"], []).append(entry)
    for variant in explorers["config"]["variants"]:
        group, kind = variant["name"].rsplit("_", 1)
        if kind != "static":
            continue
        settings = dict(o.split("=", 1) for o in variant["overrides"])
        model = settings.get("data_engine.explorer_model", f"the profile's ({explorers['profile']})")
        if settings.get("data_engine.llm_calls") == "replay":
            model += f" (replayed: {settings.get('data_engine.llm_record', 'its run folder')})"
        paper_row = paper_rows.get(variant["paper_row"], ["-", "-", "-"])
        only, coevolve = (_explorer_cells(explorers, f"{group}_{kind}", untrained, notes)
                          for kind in ("static", "coevolve"))
        rows.append({"exploration model": model, "paper row": variant["paper_row"] or "-",
                     "paper synthesis only": paper_row[1], "paper CoEvolve": paper_row[2],
                     **{column.replace("kit ", "kit synthesis only ", 1): cell for column, cell in only.items()
                        if column != "scale"},
                     **{column.replace("kit ", "kit CoEvolve ", 1): cell for column, cell in coevolve.items()
                        if column != "scale"}, "scale": only["scale"]})
    missing = [name for name in paper_rows if name not in {r["paper row"] for r in rows}]
    notes += [f"not run: the paper's {', '.join(missing)} explorer(s); give them to notebook 12 as `explorer_models` "
              "(an OpenAI-compatible endpoint each)"] if missing else []
    notes += shared_runs(explorers, comparison, "the comparison (Tables 2-3)")
    groups = dict.fromkeys(v["name"].rsplit("_", 1)[0] for v in explorers["config"]["variants"])
    verdict = verdicts.line([verdicts.compared(explorers["metrics"], f"{group}_coevolve", f"{group}_static",
                                               verdicts.ranked(explorers)) for group in groups])
    return KitTable(("table12",), pd.DataFrame(rows).set_index("exploration model"), notes, verdict)


def shared_runs(doc: dict, other: dict | None, other_name: str) -> list[str]:
    """A note for each variant of `doc` whose runs are `other`'s runs of some variant (equal run hashes)."""
    if other is None:
        return []
    theirs = {(r["config_hash"], r["seed"]): r["variant"] for r in other["metrics"] if r["variant"] != ZERO_SHOT}
    shared: dict[tuple[str, str], list[int]] = {}
    for r in doc["metrics"]:
        match = theirs.get((r["config_hash"], r["seed"]))
        if match and r["seed"] not in shared.setdefault((r["variant"], match), []):
            shared[(r["variant"], match)].append(r["seed"])
    return [f"{variant} is {other_name}'s {match} run (the same run: equal config hashes), seed(s) "
            f"{sorted(seeds)}" for (variant, match), seeds in shared.items()]


def _explorer_cells(doc: dict, variant: str, untrained: dict[str, list[dict]], notes: list[str]) -> dict:
    """A Table 12 variant's cells: its measured success over the seeds that trained, or "not trained" in every cell
    when no seed could (its D_0 held no task); a note for each seed that could not, with what its D_0 round did."""
    cells = _kit_cells(doc, variant)
    for entry in untrained.get(variant, []):
        d0 = entry["d0"]
        skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(d0["explore_skipped"].items())) or "none"
        rejected = ", ".join(f"{reason} {count}" for reason, count in sorted(d0["rejection_reasons"].items())) or "none"
        notes.append(f"{variant} seed {entry['seed']} not trained: its D_0 held no task ({d0['targets']} environments, "
                     f"{d0['explorer_calls']} explorer calls, {d0['triplets']} steps of which {d0['valid_triplets']} "
                     f"valid, {d0['specs']} abstracted tasks, {d0['accepted']} accepted; explorer skips: {skipped}; "
                     f"rejections: {rejected})")
    if variant in untrained and not any(r["variant"] == variant for r in doc["metrics"]):
        return {column: "not trained (D_0 empty)" if column != "scale" else value for column, value in cells.items()}
    return cells


def _similarity_rows(doc: dict, metric: str, eval_set: str | None = None) -> list[dict]:
    return [r for r in doc["metrics"] if r["metric"] == metric and (eval_set is None or r["eval_set"] == eval_set)]


def table13(similarity: dict | None) -> KitTable:
    """The similarity bins of the whole pool beside the paper's bin means; the per-bin training runs are not run."""
    paper_means = paper.similarity_bin_means()
    bins = {r["bin"]: r for r in _similarity_rows(similarity, "max_sim_bin_mean", "pool/all")} if similarity else {}
    rows = [{"bin": name, "paper mean similarity %": paper_means[name],
             "kit mean similarity %": round(100 * bins[name]["value"], 2) if name in bins else "not run",
             "kit tasks": bins[name]["n"] if name in bins else "-",
             "kit BFCL after training on the bin": "not run: the per-bin training runs are not built"}
            for name in ("low", "medium", "high")]
    notes = [f"pool of {similarity['run_dir']}; embeddings {similarity['config']['embedding_model']}; bins are "
             f"{similarity['config']['bins']}" if similarity else "similarity results: not run"]
    return KitTable(("table13",), pd.DataFrame(rows).set_index("bin"), notes, verdicts.unresolvable(
        "the paper's claim is how training on each bin moves BFCL, and the per-bin training runs are not built; the "
        "kit's bins are only described"))


def table15(similarity: dict | None) -> KitTable:
    """SR@k and ED_rel (vs the val tasks) of each feedback round's new tasks."""
    if similarity is None:
        return not_built("table15", "not run", verdicts.unresolvable("similarity results not run"))
    k = similarity["config"]["k"]
    rows = {}
    for metric, column in ((f"sr@{k}", f"kit SR@{k} %"), ("ed_rel", "kit ED_rel %")):
        for r in _similarity_rows(similarity, metric):
            if r["round"] > 0 and r["value"] is not None:
                row = rows.setdefault(r["round"], {"step": r.get("step"), "tasks": r["n"]})
                row[column] = round(100 * r["value"], 2)
    frame = pd.DataFrame.from_dict(rows, orient="index").rename_axis("round")
    steps = [row for row in paper.tables()["table15"]["rows"] if row[0].isdigit()]  # not the Mean / Variance rows
    findings = [verdicts.level_finding(name, list(frame[column].dropna()), [float(row[index]) for row in steps])
                for name, column, index in (("SR", f"kit SR@{k} %", 1), ("ED_rel", "kit ED_rel %", 2))
                if column in frame]
    return KitTable(("table15",), frame, [f"pool of {similarity['run_dir']}; k = {k}; ED_rel against the BFCL val "
                                          "tasks (see notebook 11 for the definitions and deviations)"],
                    verdicts.line(findings, "Levels, not differences: the paper's values are one run of its own "
                                            "scale, the kit's one tiny run"))


def assemble(results: Results) -> list[KitTable]:
    """Every table the kit reproduces, from `results` (see the module docstring for missing and stale files)."""
    comparison = results.study(COMPARISON, "notebooks/07_learning_and_comparison.ipynb")
    signals = results.study(STUDIES["signals"], "notebooks/08_ablations_signals_and_validation.ipynb")
    validation = results.study(STUDIES["validation"], "notebooks/08_ablations_signals_and_validation.ipynb")
    sensitivity_study = sensitivity_grid(PAPER_D0_SIZES, PAPER_FEEDBACK_EVERY)  # names the rows of a study not run
    sensitivity = results.study(sensitivity_study, "notebooks/09_sensitivity_pool_size_and_frequency.ipynb")
    baseline_runs = results.study(baselines_study(), "notebooks/10_adaptive_baselines.ipynb")
    explorer_runs = results.study(explorers_study({}), "notebooks/12_explorer_models.ipynb")
    training = results.training()
    appworld = results.appworld()
    similarity = results.similarity(run_folder(default_runs_dir(results.profile),
                                               variant_run(results.profile, [], COEVOLVE, 0)))
    if training is not None and comparison is not None:
        coevolve = next((r for r in comparison["metrics"] if r["variant"] == "coevolve" and r["seed"] == 0), None)
        if coevolve is not None and coevolve["config_hash"] != training["config_hash"]:
            raise StaleResults(f"the training result (notebook 06, config {training['config_hash']}) is not the "
                               f"comparison's CoEvolve seed-0 run ({coevolve['config_hash']}): run notebook 06 again")
    return [
        table1(comparison, appworld), table2(comparison, appworld),
        from_study(("table3",), comparison, COMPARISON, coevolve_against_trained(comparison),
                   [("static", "zero_shot"), ("random", "static"), ("coevolve", "random")]),
        from_study(("table4", "table14"), sensitivity, sensitivity_study),
        from_study(("table5",), signals, STUDIES["signals"]),
        table6(comparison), table7(training, comparison), table8(comparison),
        table10(baseline_runs),
        from_study(("table11",), validation, STUDIES["validation"], (VALIDATION_NOTE,)),
        table12(explorer_runs, comparison),
        table13(similarity), table15(similarity),
    ]
