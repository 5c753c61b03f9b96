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
from coevolve_lib.studies.catalog import (
    COEVOLVE,
    COMPARISON,
    PAPER_D0_SIZES,
    PAPER_FEEDBACK_EVERY,
    STUDIES,
)
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

APPWORLD = ("not run: AppWorld's official task data cannot be downloaded offline (APPWORLD_ROOT, docs/appworld.md), "
            "and no AppWorld study of this profile was run (notebook 15 runs them on the synthetic world)")
"""An AppWorld cell of a table whose AppWorld rows are not there (notebook 14's run: `appworld_cell`; notebook 15's
studies: the rows under each table, `appworld_label`)."""
OFFLINE = "not reproducible offline: no {} environment in the kit"
PAPER_COLUMN = "BFCL"
APPWORLD_COLUMN = "AppWorld"
"""The paper's column the AppWorld studies stand beside (AppWorld TestN TGC, Qwen3-4B-Instruct)."""
SPLIT_COLUMNS = {"bfcl": ("kit BFCL val %", "bfcl/"), "appworld": ("kit AppWorld TGC %", "appworld")}
"""Per benchmark, the kit's column of its own evaluation split and the eval_set prefix its rows have (AppWorld's:
`appworld/<split>` on official data, `appworld-synthetic/<split>` on the synthetic world)."""


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


def _kit_cells(doc: dict | None, variant: str, benchmark: str = "bfcl") -> dict:
    """Success of one variant on each held-out set, on D_0 and on the benchmark's own split (BFCL val, AppWorld's
    evaluation split: TGC), mean [95% CI] over seeds and tasks."""
    columns = {f"kit held-out {title} %": f"heldout/{name}/" for name, title in HELDOUT_TITLES.items()}
    columns["kit D_0 (trained on) %"] = "pool/d0"
    title, prefix = SPLIT_COLUMNS[benchmark]
    columns[title] = prefix
    if doc is None:
        return {**{column: "not run" for column in columns}, "scale": "-"}
    variants = [ZERO_SHOT, *(v["name"] for v in doc["config"]["variants"])]
    return {**{column: _mean_ci(_rows(doc, variant, prefix)) for column, prefix in columns.items()},
            "scale": _scale(doc) + same_policy_note(doc["metrics"], variant, variants)}


PAPER_BACKBONE = "Qwen3-4B"
"""The paper's backbone the kit's rows stand beside (its ablations and Tables 3-15 use Qwen3-4B-Instruct)."""


def _backbone_rows(table_id: str) -> tuple[list[str], list[str]]:
    """Table 1's Qwen3-4B row and the "-w/ CoEvolve" row under it."""
    rows = paper.tables()[table_id]["rows"]
    index = next(i for i, row in enumerate(rows) if row[0].startswith(PAPER_BACKBONE))
    return rows[index], rows[index + 1]


def measured_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame without the kit's columns no row measured ("-": a held-out set the profile has none of; empty: a row
    not run)."""
    return frame.loc[:, (frame.notna() & (frame != "-")).any()]


def appworld_label(doc: dict) -> str:
    """The heading of an AppWorld study's rows: which data its evaluation split is of (the synthetic world is never
    shown as the paper's TestN)."""
    split = benchmark_split(doc["metrics"]) or ""
    world = ("the kit's synthetic world, not the paper's TestN" if split.startswith("appworld-synthetic/")
             else "official data")
    return f"Kit on AppWorld, {world}: profile {doc['profile']}, notebook 15 (measured)"


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


def table2(comparison: dict | None, appworld: dict | None, appworld_comparison: dict | None = None) -> KitTable:
    """Table 2's BFCL columns from the comparison study; its AppWorld ones from notebook 14's run (notes) and from
    notebook 15's comparison study on AppWorld (the rows under it)."""
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
    notes = [f"AppWorld TestN, zero-shot: {appworld_cell(appworld, False)}", f"AppWorld TestN, CoEvolve: "
             f"{appworld_cell(appworld, True)}"]
    table = KitTable(("table2",), pd.DataFrame([row]).set_index("backbone"), notes, verdict)
    if appworld_comparison is None:
        notes.append("AppWorld, all three rows: " + APPWORLD)
        return table
    appworld_row = {"backbone": "profile model (kit)"}
    for variant, name in (("zero_shot", "Zero-shot"), ("static", "GRPO"), ("coevolve", "CoEvolve")):
        for column, cell in _kit_cells(appworld_comparison, variant, "appworld").items():
            if column != "scale":
                appworld_row[column.replace("kit ", f"kit {name} ", 1)] = cell
    appworld_row[f"paper ({paper_row[0]})"] = ", ".join(f"{c}: {v}" for c, v in zip(columns[1:4], paper_row[1:4]))
    appworld_row["scale"] = _scale(appworld_comparison)
    eval_set = verdicts.ranked(appworld_comparison)
    table.also.append(KitTable(("table2",), measured_columns(pd.DataFrame([appworld_row]).set_index("backbone")),
                               verdict=verdicts.line(
        [verdicts.compared(appworld_comparison["metrics"], above, below, eval_set)
         for above, below in (("static", "zero_shot"), ("coevolve", "static"))]),
        label=appworld_label(appworld_comparison)))
    return table


VALIDATION_NOTE = (
    "what validation can remove: a task whose reference calls fail, or miss its objective, when run in a fresh "
    "environment. The deterministic abstraction (synthesis.abstraction=deterministic, every profile without an "
    "explorer LLM, the tiny one included) writes each task from calls the exploration already ran with success, so its "
    "specs all validate and `w/o validation` trains on the same pool (its row says when it ended as the same policy). "
    "Validation "
    "matters under the LLM abstraction (synthesis.abstraction=llm: the paper's Qwen3-Max, or the replayed tiny "
    "explorer of Table 12), whose drafted sequences can fail")
"""Table 11's note: why the offline "w/o validation" row can be the CoEvolve run, and where it is not."""
APPWORLD_VALIDATION_NOTE = (
    "what validation can remove on AppWorld: a task whose reference raises when rerun from a fresh start state, or "
    "whose answer AppWorld's evaluator does not accept. The deterministic abstraction writes each task from calls that "
    "succeeded, so few fail; where none did (each round's rejections: notebook 15's round table), `w/o validation` "
    "trained on the same tasks")
"""Table 11's note under its AppWorld rows."""


def from_study(table_ids: tuple[str, ...], doc: dict | None, study: Study, notes: tuple[str, ...] = (),
               pairs: list[tuple[str, str]] | None = None, appworld: dict | None = None,
               appworld_notes: tuple[str, ...] = ()) -> KitTable:
    """A study's table (coevolve_lib.studies.report.study_table) beside the paper's BFCL column, with `notes`, and
    its verdict on `pairs` of variants (default: each against the study's first), in the paper's direction; under it
    the same study on AppWorld (`appworld`, notebook 15's results) beside the paper's AppWorld column, with
    `appworld_notes`."""
    table = study_rows(table_ids, doc, study, notes, pairs)
    if appworld is None:
        table.notes.insert(0, "AppWorld column: " + APPWORLD)
    else:
        table.also.append(study_rows(table_ids, appworld, study, appworld_notes, pairs, APPWORLD_COLUMN,
                                     appworld_label(appworld)))
    return table


def study_rows(table_ids: tuple[str, ...], doc: dict | None, study: Study, notes: tuple[str, ...] = (),
               pairs: list[tuple[str, str]] | None = None, column: str = PAPER_COLUMN,
               label: str = "Kit (measured)") -> KitTable:
    """One study's rows beside the paper's `column` (`from_study`)."""
    if doc is None:
        rows = [{"variant": v.name, "paper row": v.paper_row, "kit": "not run"} for v in study.variants]
        return KitTable(table_ids, pd.DataFrame(rows).set_index("variant"), [f"{study.name} results: not run",
                                                                              *notes],
                        verdicts.unresolvable(f"{study.name} results not run"), label)
    variants = [v["name"] for v in doc["config"]["variants"]]
    pairs = pairs or [(name, variants[0]) for name in variants[1:]]
    return KitTable(table_ids, study_table(doc["metrics"], table_ids, column,
                                           rank_by=doc["config"].get("rank_by", "new_tasks")),
                    list(notes), verdicts.line(verdicts.paper_claims(doc, table_ids, pairs, column)), label)


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


def table7(training: dict | None, comparison: dict | None, appworld_training: dict | None = None,
           appworld_comparison: dict | None = None) -> KitTable:
    """Feedback's share of the training time and the gain over static GRPO, per benchmark: BFCL from notebook 06's run
    and the comparison study, AppWorld from notebook 15's CoEvolve run and its comparison study."""
    if training is None:
        return KitTable(("table7",), pd.DataFrame([{"benchmark": "BFCL", "kit": "not run"}]).set_index("benchmark"),
                        verdict=verdicts.unresolvable("training results not run"))
    rows, findings = [], []
    for name, run, study, column in (("BFCL (kit)", training, comparison, "BFCL"),
                                     ("AppWorld (kit)", appworld_training, appworld_comparison, "AppWorld")):
        if run is None:
            continue
        measured = next(r for r in run["details"]["table7"] if r["source"].startswith("measured"))
        paper_ratio = paper.cell_value(paper.column("table7", "Feedback Time Ratio")[column])
        findings.append(verdicts.cost_finding(measured["feedback_time_ratio_%"], paper_ratio))
        gain = "-"
        if study is not None:
            ranked = verdicts.ranked(study)  # the set it ranks by that it measured (tiny-appworld: (b) only)
            findings.append(verdicts.compared(study["metrics"], "coevolve", "static", ranked))
            static, coevolve = (_rows(study, v, ranked) for v in ("static", "coevolve"))
            if static and coevolve:
                before, after = (sum(r["value"] for r in picked) / len(picked) for picked in (static, coevolve))
                relative = f"{100 * (after - before) / before:+.2f}%" if before else "n/a (baseline 0)"
                gain = f"{before:.2f} -> {after:.2f} % on {ranked} ({relative})"
        rows.append({"benchmark": f"{name}: {measured['benchmark']}", "feedback time ratio %":
                     measured["feedback_time_ratio_%"], "single feedback cost s": measured["single_feedback_s"],
                     "total time s": measured["total_s"], "performance gain (static -> CoEvolve)": gain,
                     "scale": measured["scale"]})
    notes = [] if appworld_training else ["AppWorld row: " + APPWORLD]
    return KitTable(("table7",), pd.DataFrame(rows).set_index("benchmark"), notes, verdicts.line(findings))


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


def table8(comparison: dict | None, appworld_comparison: dict | None = None) -> KitTable:
    """Where static GRPO and CoEvolve agree and disagree, task by task, on each evaluation set of the comparison study
    (BFCL's, then notebook 15's on AppWorld), beside the paper's BFCL and AppWorld blocks."""
    paper_rows = paper.tables()["table8"]["rows"]
    columns = {}
    for benchmark, first in (("BFCL", 0), ("AppWorld", 2)):
        correct, wrong = paper_rows[first], paper_rows[first + 1]
        columns[f"paper {benchmark}"] = {
            "baseline correct, CoEvolve correct": correct[2], "baseline correct, CoEvolve wrong": correct[3],
            "baseline wrong, CoEvolve correct": wrong[2], "baseline wrong, CoEvolve wrong": wrong[3],
            "n (task x seed)": "-"}
    if comparison is None:
        columns["kit"] = {cell: "not run" for cell in columns["paper BFCL"]}
    findings, notes = [], []
    for benchmark, doc in (("BFCL", comparison), ("AppWorld", appworld_comparison)):
        if doc is None:
            continue
        kit = "kit" if benchmark == "BFCL" else "kit AppWorld"
        heldout = ((f"{kit} held-out {title}", f"heldout/{name}/") for name, title in HELDOUT_TITLES.items())
        split = benchmark_split(doc["metrics"])
        split_label = "kit BFCL val" if benchmark == "BFCL" else f"kit AppWorld {split}"
        for label, prefix in [*heldout, *([(split_label, split)] if split else [])]:
            cells = cross_comparison(doc, prefix)
            if cells:
                columns[label] = cells
        notes.append(f"{benchmark} scale: {_scale(doc)}")
        findings.append(verdicts.compared(doc["metrics"], "coevolve", "static", verdicts.ranked(doc)))
    notes += [] if appworld_comparison else ["AppWorld columns: " + APPWORLD]
    frame = pd.DataFrame(columns).rename_axis("outcome (% of task x seed pairs)")
    verdict = verdicts.unresolvable("comparison results not run") if comparison is None else verdicts.line(
        findings, "On the pairs the two disagree on, that difference is (baseline wrong, CoEvolve correct) minus "
                  "(baseline correct, CoEvolve wrong): the paper's 10 against 5 on BFCL, 16.67 against 9.53 on "
                  "AppWorld")
    return KitTable(("table8",), frame, notes, verdict)


TABLE10_METHODS = (("Zero-shot", "zero_shot"), ("Reflexion", "reflexion"), ("Curriculum Learning", "curriculum"),
                   ("ReST", "rest"), ("GRPO", "static"), ("CoEvolve", "coevolve"))
"""Table 10's rows: the paper's method and the baselines study's variant."""
TABLE10_PAIRS = [(variant, "coevolve") for _, variant in TABLE10_METHODS if variant != "coevolve"]
"""Table 10's claims: CoEvolve against each other row (paper_claims skips a row a study did not run)."""


def table10(baselines: dict | None, appworld_baselines: dict | None = None) -> KitTable:
    """The baselines study (zero-shot and CoEvolve from the same study, so every row has one scale) beside the
    paper's BFCL column; under it notebook 15's on AppWorld beside the paper's AppWorld column; the other
    environments are not offline."""
    cells = paper.column("table10", "BFCL")
    rows = []
    for method, variant in TABLE10_METHODS:
        rows.append({"method": method, "paper BFCL": cells.get(method, "-"), **_kit_cells(baselines, variant),
                     "AppWorld": APPWORLD if appworld_baselines is None else "rows below",
                     "ALFWorld": OFFLINE.format("ALFWorld"), "WebShop": OFFLINE.format("WebShop")})
    verdict = verdicts.unresolvable("baselines results not run") if baselines is None else verdicts.line(
        verdicts.paper_claims(baselines, ("table10",), TABLE10_PAIRS))
    table = KitTable(("table10",), pd.DataFrame(rows).set_index("method"),
                     ["How each baseline is read for a task-pool GRPO loop: coevolve_lib/engine/pool_updates/, "
                      "docs/deviations.md"], verdict)
    if appworld_baselines is None:
        return table
    run = {r["variant"] for r in appworld_baselines["metrics"]}
    appworld_cells = paper.column("table10", APPWORLD_COLUMN)
    appworld_rows = [{"method": method, "paper AppWorld": appworld_cells.get(method, "-"),
                      **(_kit_cells(appworld_baselines, variant, "appworld") if variant in run else {})}
                     for method, variant in TABLE10_METHODS]
    claims = verdicts.paper_claims(appworld_baselines, ("table10",), TABLE10_PAIRS, APPWORLD_COLUMN)
    frame = measured_columns(pd.DataFrame(appworld_rows).set_index("method")).fillna("not run: not in the study")
    table.also.append(KitTable(("table10",), frame,
                               [f"scale: {_scale(appworld_baselines)}"], verdicts.line(claims),
                               appworld_label(appworld_baselines)))
    return table


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


APPWORLD_STUDIES = "notebooks/15_appworld_studies.ipynb"


def check_training_is_comparisons(training: dict | None, comparison: dict | None, notebook: str) -> None:
    """StaleResults unless the training result (Table 7's run) is the comparison's CoEvolve seed-0 run."""
    if training is None or comparison is None:
        return
    coevolve = next((r for r in comparison["metrics"] if r["variant"] == "coevolve" and r["seed"] == 0), None)
    if coevolve is not None and coevolve["config_hash"] != training["config_hash"]:
        raise StaleResults(f"the training result ({notebook}, config {training['config_hash']}) is not the "
                           f"comparison's CoEvolve seed-0 run ({coevolve['config_hash']}): run {notebook} again")


def assemble(results: Results) -> list[KitTable]:
    """Every table the kit reproduces, from `results` and, under each, the same study of the profile's AppWorld
    counterpart (`Results.on_appworld`; see the module docstring for missing and stale files)."""
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
    check_training_is_comparisons(training, comparison, "notebooks/06_coevolve_training.ipynb")
    on_appworld = results.on_appworld()
    names = ("comparison", "signals", "validation", "sensitivity", "baselines", "training")
    aw: dict[str, dict | None] = dict.fromkeys(names)  # the AppWorld counterpart's studies (notebook 15)
    if on_appworld is not None:
        aw = {study.name: on_appworld.study(study, APPWORLD_STUDIES) for study in (
            COMPARISON, STUDIES["signals"], STUDIES["validation"], sensitivity_study, baselines_study())}
        aw["training"] = on_appworld.training(APPWORLD_STUDIES)
        check_training_is_comparisons(aw["training"], aw["comparison"], APPWORLD_STUDIES)
    return [
        table1(comparison, appworld), table2(comparison, appworld, aw["comparison"]),
        from_study(("table3",), comparison, COMPARISON, coevolve_against_trained(comparison),
                   [("static", "zero_shot"), ("random", "static"), ("coevolve", "random")], aw["comparison"],
                   coevolve_against_trained(aw["comparison"])),
        from_study(("table4", "table14"), sensitivity, sensitivity_study, appworld=aw["sensitivity"]),
        from_study(("table5",), signals, STUDIES["signals"], appworld=aw["signals"]),
        table6(comparison), table7(training, comparison, aw["training"], aw["comparison"]),
        table8(comparison, aw["comparison"]),
        table10(baseline_runs, aw["baselines"]),
        from_study(("table11",), validation, STUDIES["validation"], (VALIDATION_NOTE,), appworld=aw["validation"],
                   appworld_notes=(APPWORLD_VALIDATION_NOTE,)),
        table12(explorer_runs, comparison),
        table13(similarity), table15(similarity),
    ]
