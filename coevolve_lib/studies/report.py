"""Tables and figures that put the kit's measured numbers beside the paper's, with the scale on every row."""

from __future__ import annotations

from collections import Counter

import pandas as pd

from coevolve_lib.core import paper
from coevolve_lib.core.config import SignalConfig
from coevolve_lib.core.results import (
    HELDOUT_TITLES,
    heldout_eval_set,
    heldout_set_name,
    metric_row,
)
from coevolve_lib.engine.signals import group_key, is_mixed, outcome


def scale_of(result: dict) -> str:
    """The scale a measured number (a one-row results/v2 document) was obtained at, written out for a table row."""
    row = metric_row(result)
    return (f"profile={result['profile']}, {row['eval_set']}, n={row['n']}, seed={row['seed']}, "
            f"T={row['temperature']}")


def zero_shot_table(results: list[dict]) -> pd.DataFrame:
    """BFCL multi-turn zero-shot success (%): the paper's Table 1 rows, then each measured result (evaluate's
    results/v2 documents)."""
    rows = [{"source": "paper (Table 1)", "model": name, "success_%": value, "n": None,  # its set's size is not given
             "scale": "BFCL-v3 multi_turn_base, paper's validation set, T=0"}
            for name, value in paper.bfcl_zero_shot().items()]
    rows += [{"source": "measured (this kit)", "model": r["model"], "success_%": metric_row(r)["value"],
              "n": metric_row(r)["n"], "scale": scale_of(r)} for r in results]
    return pd.DataFrame(rows)


def failure_breakdown(result: dict) -> pd.Series:
    """How the evaluated episodes ended: success, or the checker's / agent's error type."""
    per_task = metric_row(result)["per_task"]
    counts = Counter("success" if t["success"] else (t["error_type"] or "failed") for t in per_task)
    return pd.Series(counts, name="episodes").sort_values(ascending=False)


def rollout_steps(rollouts: list[dict], config: SignalConfig) -> pd.DataFrame:
    """Per step of rollout/v1 records: rollouts, mean score, mean model steps per episode, and the groups with
    mixed outcomes at the run's success threshold (what the boundary signal fires on, `engine.signals.is_mixed`)."""
    frame = pd.DataFrame(rollouts)
    table = frame.groupby("step").agg(rollouts=("score", "size"), success_rate=("score", "mean"),
                                      mean_steps=("steps", lambda s: s.map(len).mean()))
    groups: dict[tuple, list[float]] = {}
    for record in rollouts:
        groups.setdefault((record["step"], group_key(record)), []).append(outcome(record))
    mixed = Counter(step for (step, _), scores in groups.items() if is_mixed(scores, config))
    table["mixed_groups"] = [mixed.get(step, 0) for step in table.index]
    return table


def round_table(reports: list[dict]) -> pd.DataFrame:
    """One row per round: how many targets, specs and accepted tasks (its wall times: the round's `timings.json`)."""
    rows = []
    for r in reports:
        rows.append({"round": r["round"], "targets": r["targets"], "signal types": r["signal_types"],
                     "valid triplets": f"{r['valid_triplets']}/{r['triplets']}", "specs": r["specs"],
                     "accepted": r["accepted"], "acceptance": r["acceptance_rate"],
                     "rejections": r["rejection_reasons"], "added": r["added_to_pool"], "pool size": r["pool_size"]})
    return pd.DataFrame(rows).set_index("round")


def feedback_cost_table(summary: dict, benchmark: str = "BFCL v3 (synthetic pool)") -> pd.DataFrame:
    """The paper's Table 7 (feedback time ratio, single feedback cost, total time) beside this run's, on `benchmark`
    (where the run trained and was evaluated)."""
    table = paper.tables()["table7"]
    rows = [{"source": "paper (Table 7)", "benchmark": r[0], "feedback_time_ratio_%": paper.cell_value(r[1]),
             "single_feedback_s": paper.cell_value(r[2].rstrip("s")),
             "total_s": paper.cell_value(r[3].rstrip("s").replace(",", "")),
             "scale": "Qwen3-4B, 8xH20, 120 steps, F=10, explorer Qwen3-Max"} for r in table["rows"]]
    t, rounds = summary["time"], summary["rounds"]
    total = (t["train_s"] or 0) + (t["feedback_s"] or 0) + (t["eval_s"] or 0)
    rows.append({"source": "measured (this kit)", "benchmark": benchmark,
                 "feedback_time_ratio_%": round(100 * t["feedback_ratio"], 2) if t["feedback_ratio"] is not None
                 else None,
                 "single_feedback_s": round(sum(r["seconds"] for r in rounds) / len(rounds), 2) if rounds else None,
                 "total_s": round(total, 1),
                 "scale": f"profile={summary['profile']}, model={summary['model']}, steps={summary['steps']}, "
                          f"F={summary['feedback_every']}, {summary['tasks_per_step']} tasks x "
                          f"K={summary['group_size']}, seed={summary['seed']}"})
    return pd.DataFrame(rows)


def training_metrics(summary: dict, cost: pd.DataFrame, val_set: str) -> list[dict]:
    """A training run's numbers as results/v2 rows: its measured Table 7 row (`cost`, from `feedback_cost_table`)
    and greedy success (%) before and after training on each evaluation set; `val_set` names the environment's own
    split it was evaluated on (e.g. `bfcl/v3/multi_turn_base/val`), and its first part the environment."""
    benchmark = val_set.split("/", 1)[0]
    measured = cost[cost["source"] == "measured (this kit)"].iloc[0]
    rows = [{"table": "table7", "benchmark": benchmark, "eval_set": "training_run", "metric": name,
             "value": float(measured[name]) if pd.notna(measured[name]) else None, "seed": summary["seed"],
             "step": summary["steps"]} for name in ("feedback_time_ratio_%", "single_feedback_s", "total_s")]
    for evaluation in filter(None, (summary["eval_before"], summary["eval_after"])):
        sets = {"val": ("eval/val_success", val_set), "d0": ("eval/d0_greedy_success", "pool/d0"),
                **{name: (f"eval/{name}_greedy_success", heldout_eval_set(name, evaluation.get(f"eval/{name}_set", "")))
                   for name in HELDOUT_TITLES}}
        rows += [{"benchmark": benchmark, "eval_set": eval_set, "metric": "greedy_success", "k": 1, "temperature": 0.0,
                  "seed": summary["seed"], "step": evaluation["step"], "n": evaluation[f"eval/{name}_n"],
                  "value": evaluation[key]} for name, (key, eval_set) in sets.items() if key in evaluation]
    return rows


# ------------------------------------------------------------------------------------------------------ studies

def bootstrap_ci(rows: list[list[float]], resamples: int = 2000, seed: int = 0, level: float = 0.95) -> tuple:
    """(mean, low, high) of the mean of a seeds x tasks matrix, with a two-level bootstrap: seeds, then tasks (the
    same task draw for every seed, so paired differences keep their pairing)."""
    import numpy as np

    matrix = np.asarray(rows, dtype=float)
    rng = np.random.default_rng(seed)
    seeds, tasks = matrix.shape
    means = np.empty(resamples)
    for b in range(resamples):
        means[b] = matrix[rng.integers(0, seeds, seeds)][:, rng.integers(0, tasks, tasks)].mean()
    tail = (1 - level) / 2
    return float(matrix.mean()), float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def _matrix(results: list[dict], variant: str, metric: str, eval_set: str) -> tuple[list[int], list[str], list]:
    picked = sorted((r for r in results if (r["variant"], r["metric"], r["eval_set"]) == (variant, metric, eval_set)),
                    key=lambda r: r["seed"])
    tasks = sorted(picked[0]["per_task"]) if picked else []
    return [r["seed"] for r in picked], tasks, [[r["per_task"][t] for t in tasks] for r in picked]


def _ci_cell(matrix: list) -> str:
    mean, low, high = bootstrap_ci(matrix)
    return f"{100 * mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _diff_cell(matrix: list, reference: list) -> str:
    """The paired difference in points with its CI, and whether the CI excludes 0 (a gain or a loss it can tell)."""
    mean, low, high = (round(100 * x, 1) for x in
                       bootstrap_ci([[a - b for a, b in zip(row, ref)] for row, ref in zip(matrix, reference)]))
    told = "excludes 0" if low > 0 or high < 0 else "includes 0"  # on the printed bounds, so that both agree
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}] {told}"


def ranked_sets(results: list[dict], rank_by: str = "new_tasks") -> list[str]:
    """The evaluation sets a study table shows, the one it ranks by first: the held-out set `rank_by`, the other
    held-out sets; or the BFCL split when the profile has no held-out set (the paper profiles)."""
    heldout = sorted(dict.fromkeys(r["eval_set"] for r in results if heldout_set_name(r["eval_set"])),
                     key=lambda s: heldout_set_name(s) != rank_by)
    split = benchmark_split(results)
    return heldout or ([split] if split else [])


def benchmark_split(results: list[dict]) -> str | None:
    """The benchmark's own evaluation set in a study's rows (BFCL's val split: `bfcl/v3/multi_turn_base/val`;
    AppWorld's `appworld/dev`, or `appworld-synthetic/dev` on the synthetic world): the set named after the row's
    benchmark; None when the study measured none."""
    return next((r["eval_set"] for r in results
                 if r["eval_set"].split("/")[0] in (r["benchmark"], f"{r['benchmark']}-synthetic")), None)


def set_title(eval_set: str) -> str:
    name = heldout_set_name(eval_set)
    return f"held-out {HELDOUT_TITLES[name]}" if name else "D_0 (trained on)" if eval_set == "pool/d0" else eval_set


def study_table(results: list[dict], paper_tables: tuple[str, ...], paper_column: str, metric: str = "greedy_success",
                baseline: str | None = None, rank_by: str = "new_tasks") -> pd.DataFrame:
    """One row per variant of a study (zero-shot first, then in the order its rows come): on each held-out set, the
    set `rank_by` first (`ranked_sets`), `metric` as the mean over seeds with its bootstrap 95% CI and the paired
    difference to `baseline` (default: the first variant); each seed on the ranked set; pass@k when measured; success
    on the benchmark's own split (BFCL val; AppWorld's evaluation split: TGC); the paper's number (`paper_column` of
    `studies.tables`, on the variant's `paper_row`) and the scale."""
    split = benchmark_split(results)
    split_title = f"AppWorld TGC on {split} %" if split and split.startswith("appworld") else "BFCL val %"
    sets = ranked_sets(results, rank_by)
    pass_metric = next((r["metric"] for r in results if r["metric"].startswith("pass@") and r["eval_set"] == sets[0]),
                       None)  # sampled on one set only (`studies.run.measure`)
    paper_cells = paper.cells(paper_tables, paper_column)
    where = " / ".join(map(paper.title, paper_tables))
    variants = sorted(dict.fromkeys(r["variant"] for r in results), key=lambda v: v != "zero_shot")  # zero-shot first
    baseline = baseline or variants[0]
    rows = []
    for variant in variants:
        first = next(r for r in results if r["variant"] == variant)
        row = {"variant": variant, f"paper row ({where})": first["paper_row"] or "-"}
        for index, eval_set in enumerate(sets):
            seeds, _, matrix = _matrix(results, variant, metric, eval_set)
            reference = _matrix(results, baseline, metric, eval_set)[2]
            if not matrix or len(matrix) != len(reference):
                raise ValueError(f"variant {variant!r} has {len(matrix)} seed(s) of {metric} on {eval_set}, "
                                 f"{baseline!r} has {len(reference)}: the runs were not measured on the same set")
            title = set_title(eval_set)
            row[f"{title} {metric} %"] = _ci_cell(matrix)
            row[f"{title}: vs {baseline} (points)"] = "-" if variant == baseline else _diff_cell(matrix, reference)
            if index == 0:
                row["per seed"] = " / ".join(f"{100 * sum(r) / len(r):.1f}" for r in matrix)
                scale_seeds, scale_n = seeds, len(matrix[0])
                if pass_metric:
                    row[f"{title} {pass_metric} %"] = _ci_cell(_matrix(results, variant, pass_metric, eval_set)[2])
        d0 = _matrix(results, variant, metric, "pool/d0")[2]
        if d0:
            row[f"D_0 (trained on) {metric} %"] = _ci_cell(d0)
        val = _matrix(results, variant, "greedy_success", split)[2] if split else []
        row[split_title] = f"{100 * sum(map(sum, val)) / sum(map(len, val)):.1f} (n={len(val[0])})" if val else "-"
        row[f"paper {paper_column}"] = paper_cells.get(first["paper_row"], "-")
        row["scale"] = (f"profile={first['profile']}, model={first['model']}, {first['steps']} steps x "
                        f"{first['tasks_per_step']} tasks x K={first['group_size']}, seeds {scale_seeds}, "
                        f"n={scale_n} ranked ({sets[0]})" + _pool_cell(results, variant)
                        + same_policy_note(results, variant, variants))
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant")


def _pool_cell(results: list[dict], variant: str) -> str:
    """The scale cell's pools (`studies.run.run_fingerprint`): D_0 and final pool sizes per seed, in seed order (one
    size when every seed's is the same), and the signals' % of rollouts per feedback round on the first seed; empty
    for rows that carry none."""
    mine = sorted((r for r in results if r["variant"] == variant), key=lambda r: r["seed"])
    cell = ""
    for label, key in (("D_0", "d0_tasks"), ("final pool", "pool_tasks")):
        per_seed = {r["seed"]: r[key] for r in mine if key in r}  # a seed's rows (one per eval set) carry the same
        if len(set(per_seed.values())) == 1:
            cell += f", {label} {next(iter(per_seed.values()))} tasks"
        elif per_seed:
            cell += f", {label} {'/'.join(map(str, per_seed.values()))} tasks (seeds {'/'.join(map(str, per_seed))})"
    first = next((r for r in mine if r.get("signal_shares")), None)
    if first:
        cell += (f"; signals, % of rollouts per round (seed {first['seed']}):"
                 + ",".join(f" {kind} {'/'.join(f'{v:g}' for v in values)}"
                            for kind, values in first["signal_shares"].items()))
    return cell


def same_policy_note(results: list[dict], variant: str, variants: list[str]) -> str:
    """What a row's scale adds when `same_run` finds its twin: one policy under two names, said in the row."""
    twin = same_run(results, variant, variants)
    return f"; THE SAME POLICY AS {twin}: equal final weights on every seed" if twin else ""


def same_run(results: list[dict], variant: str, variants: list[str]) -> str | None:
    """The first variant before `variant` in `variants` that ended with the same weights on every seed
    (`studies.run.run_fingerprint`): one policy under two names, a setting that changed nothing at this scale.
    None when there is none, or when the rows carry no weights digest."""
    def weights(name: str) -> tuple:
        by_seed = {r["seed"]: r.get("weights_sha256") for r in results if r["variant"] == name}
        return tuple(sorted(by_seed.items())) if by_seed and None not in by_seed.values() else ()

    mine = weights(variant)
    return next((other for other in variants[:variants.index(variant)] if mine and weights(other) == mine), None)


def paired_differences(results: list[dict], pairs: list[tuple[str, str]], rank_by: str = "new_tasks",
                       metric: str = "greedy_success") -> pd.DataFrame:
    """`a - b` in points for each (a, b) of `pairs` on every evaluation set of the study (held-out sets and the BFCL
    split), paired by seed and task: the mean with its bootstrap 95% CI, and what it says in words."""
    split = benchmark_split(results)
    sets = list(dict.fromkeys([*ranked_sets(results, rank_by), "pool/d0", *([split] if split else [])]))
    rows = []
    for a, b in pairs:
        for eval_set in sets:
            difference = paired_difference(results, a, b, eval_set, metric)
            if difference is None:
                continue
            mean, low, high, seeds = difference
            reading = (f"{a} above {b}" if low > 0 else f"{a} below {b}" if high < 0
                       else "no difference the CI can tell")
            rows.append({"comparison": f"{a} - {b}", "set": set_title(eval_set), "points": points(mean, low, high),
                         "reading": reading, "seeds": seeds})
    return pd.DataFrame(rows).set_index(["comparison", "set"]) if rows else pd.DataFrame()


def paired_difference(results: list[dict], a: str, b: str, eval_set: str,
                      metric: str = "greedy_success") -> tuple[float, float, float, int] | None:
    """`a - b` on `eval_set` (fractions), paired by seed and task: (mean, 95% CI low, high, seeds); None when the
    two variants were not measured on the same seeds there."""
    left, right = _matrix(results, a, metric, eval_set)[2], _matrix(results, b, metric, eval_set)[2]
    if not left or len(left) != len(right):
        return None
    return (*bootstrap_ci([[x - y for x, y in zip(r1, r2)] for r1, r2 in zip(left, right)]), len(left))


def points(mean: float, low: float, high: float) -> str:
    """A difference of fractions in points with its interval: `+0.8 [-0.3, +1.9]`."""
    return f"{100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def rounds_table(summaries: dict[str, list[dict]]) -> pd.DataFrame:
    """Signals fired, tasks added and rejected (with why) per feedback round, for every run that has rounds
    (`summaries`: variant -> the runs' summary.json contents), with a Table 10 baseline's own counts
    (`coevolve_lib/engine/pool_updates/`) as columns."""
    rows = [{"variant": variant, "seed": run["seed"], "round": r["round"], "at step": r["step"],
             **{f"signals: {k}": v for k, v in r["signals"].items()}, "targets": r["targets"],
             "tasks added": r["tasks_added"], "rejected": r.get("rejected", 0),
             "rejections": r.get("rejection_reasons", {}), "held-out leaks refused": r.get("heldout_leaks", 0),
             "pool after": r["pool_size_after"],
             **{k.replace("_", " "): v for k, v in r.get("counts", {}).items()}}
            for variant, runs in summaries.items() for run in runs for r in run["rounds"]]
    return pd.DataFrame(rows).set_index(["variant", "seed", "round"]) if rows else pd.DataFrame()


