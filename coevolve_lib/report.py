"""Tables and figures that put the kit's measured numbers beside the paper's, with the scale on every row."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from coevolve_lib import paper


def _save(fig, path):
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def scale_of(result: dict) -> str:
    """The scale a measured number was obtained at, written out for a table row."""
    return (f"profile={result['profile']}, BFCL {result['data_version']} {result['category']}, "
            f"split={result['split']}, n={result['n']}, seed={result['seed']}, T={result['temperature']}")


def zero_shot_table(results: list[dict]) -> pd.DataFrame:
    """BFCL multi-turn zero-shot success (%): the paper's Table 1 rows, then each measured result."""
    rows = [{"source": "paper (Table 1)", "model": name, "success_%": value,
             "scale": "BFCL-v3 multi_turn_base, paper's validation set, T=0"}
            for name, value in paper.bfcl_zero_shot().items()]
    rows += [{"source": "measured (this kit)", "model": r["model"], "success_%": r["value"], "scale": scale_of(r)}
             for r in results]
    return pd.DataFrame(rows)


def plot_zero_shot(table: pd.DataFrame, path: str | Path | None = None):
    """Horizontal bars, paper rows and measured rows in two colours; saved to `path` when given."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(7, 0.35 * len(table) + 1.2))
    sns.barplot(data=table, y="model", x="success_%", hue="source", dodge=False, ax=ax)
    for bars in ax.containers:  # print the numbers too: a 0.0 bar is otherwise invisible
        ax.bar_label(bars, fmt="%.1f", padding=3, fontsize=8)
    ax.set_xlabel("BFCL multi-turn success (%)")
    ax.set_ylabel("")
    ax.set_xlim(0, 100)
    ax.set_title("Zero-shot BFCL multi-turn: paper vs. measured")
    fig.tight_layout()
    return _save(fig, path)


def failure_breakdown(result: dict) -> pd.Series:
    """How the evaluated episodes ended: success, or the checker's / agent's error type."""
    counts = Counter("success" if t["success"] else (t["error_type"] or "failed") for t in result["per_task"])
    return pd.Series(counts, name="episodes").sort_values(ascending=False)



def plot_interaction_turns(groups: dict[str, list[int]], path: str | Path | None = None):
    """The paper's Fig. 7: how many tool calls a task takes, one histogram per task set (e.g. original BFCL vs
    synthesized)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    top = max(max(counts) for counts in groups.values() if counts)
    bins = [b - 0.5 for b in range(1, top + 2)]
    for label, counts in groups.items():
        ax.hist(counts, bins=bins, alpha=0.55, density=True, label=f"{label} (n={len(counts)})")
    ax.set_xlabel("tool calls per task (reference solution)")
    ax.set_ylabel("share of tasks")
    ax.set_title("Interaction turns per task: original vs. synthesized (paper Fig. 7)")
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_signal_counts(signals: list[dict], path: str | Path | None = None):
    """Signals by type and probe/training step (the paper's Figs. 3b and 4)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    if not signals:
        for ax in (left, right):
            ax.text(0.5, 0.5, "no signal fired", ha="center", va="center")
            ax.set_axis_off()
        return _save(fig, path)
    counts = pd.crosstab(pd.Series([s["step"] for s in signals], name="step"),
                         pd.Series([s["type"] for s in signals], name="signal"))
    counts.plot.bar(ax=left, rot=0)
    left.set_title("signals per step")
    left.set_ylabel("trajectories marked")
    totals = counts.sum()
    right.pie(totals, labels=[f"{k}\n{v} ({v / totals.sum():.0%})" for k, v in totals.items()])
    right.set_title("share by type (paper: boundary 45.5% on BFCL)")
    fig.tight_layout()
    return _save(fig, path)


def round_table(reports: list[dict]) -> pd.DataFrame:
    """One row per round: how many targets, specs, accepted tasks, and where the time went."""
    rows = []
    for r in reports:
        rows.append({"round": r["round"], "targets": r["targets"], "signal types": r["signal_types"],
                     "valid triplets": f"{r['valid_triplets']}/{r['triplets']}", "specs": r["specs"],
                     "accepted": r["accepted"], "acceptance": r["acceptance_rate"],
                     "rejections": r["rejection_reasons"], "added": r["added_to_pool"], "pool size": r["pool_size"],
                     "seconds": r["seconds"]})
    return pd.DataFrame(rows).set_index("round")


def plot_training(rows: list[dict], path: str | Path | None = None):
    """A training run at a glance: train reward and mixed groups per step, signals per step by type, pool size."""
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(rows).set_index("step")
    fig, (reward_ax, signal_ax, pool_ax) = plt.subplots(1, 3, figsize=(13, 3.4))
    frame["train/reward"].plot(ax=reward_ax, marker="o", label="mean reward")
    if "train/success" in frame:
        frame["train/success"].plot(ax=reward_ax, marker="x", linestyle=":", label="success rate")
    if "train/groups" in frame:
        (frame["train/groups_mixed"] / frame["train/groups"]).plot(ax=reward_ax, marker=".", linestyle="--",
                                                                   label="groups with mixed outcomes")
    reward_ax.set_ylim(-0.02, 1.02)
    reward_ax.set_title("GRPO rollouts")
    reward_ax.legend(fontsize=8)
    signal_cols = [c for c in frame.columns if c.startswith("signals/")]
    frame[signal_cols].rename(columns=lambda c: c.split("/", 1)[1]).plot.bar(ax=signal_ax, stacked=True, rot=0)
    signal_ax.set_title("signals per step")
    signal_ax.xaxis.set_major_locator(plt.MaxNLocator(8))
    frame["pool/size"].plot(ax=pool_ax, drawstyle="steps-post", marker=".")
    rounds = frame.index[frame.get("feedback/round", pd.Series(dtype=float)).notna()] if "feedback/round" in frame \
        else []
    for step in rounds:
        pool_ax.axvline(step, color="grey", alpha=0.3)
    pool_ax.set_title("tasks the trainer samples (D_t); lines: rounds")
    fig.tight_layout()
    return _save(fig, path)


def feedback_cost_table(summary: dict) -> pd.DataFrame:
    """The paper's Table 7 (feedback time ratio, single feedback cost, total time) beside this run's."""
    table = paper.tables()["table7"]
    rows = [{"source": "paper (Table 7)", "benchmark": r[0], "feedback_time_ratio_%": paper.cell_value(r[1]),
             "single_feedback_s": paper.cell_value(r[2].rstrip("s")),
             "total_s": paper.cell_value(r[3].rstrip("s").replace(",", "")),
             "scale": "Qwen3-4B, 8xH20, 120 steps, F=10, explorer Qwen3-Max"} for r in table["rows"]]
    t, rounds = summary["time"], summary["rounds"]
    total = (t["train_s"] or 0) + (t["feedback_s"] or 0) + (t["eval_s"] or 0)
    rows.append({"source": "measured (this kit)", "benchmark": "BFCL v3 (synthetic pool)",
                 "feedback_time_ratio_%": round(100 * t["feedback_ratio"], 2) if t["feedback_ratio"] is not None
                 else None,
                 "single_feedback_s": round(sum(r["seconds"] for r in rounds) / len(rounds), 2) if rounds else None,
                 "total_s": round(total, 1),
                 "scale": f"profile={summary['profile']}, model={summary['model']}, steps={summary['steps']}, "
                          f"F={summary['feedback_every']}, {summary['tasks_per_step']} tasks x K={summary['group_size']},"
                          f" seed={summary['seed']}"})
    return pd.DataFrame(rows)
