"""The kit's figures: each beside what the paper shows, drawn from results files, run summaries and round reports,
saved as PNG and PDF (`save_figure`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from coevolve_lib.core.results import HELDOUT_TITLES


def save_figure(fig, path):
    """Save `fig` to `path` (PNG) and beside it as PDF, when a path is given."""
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        fig.savefig(Path(path).with_suffix(".pdf"))
    return fig


def plot_zero_shot(table: pd.DataFrame, path: str | Path | None = None):
    """Horizontal bars, paper rows and measured rows in two colours; saved to `path` when given."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(7, 0.35 * len(table) + 1.2))
    table = table.assign(model=[f"{row.model} (n={int(row.n)})" if row.source != "paper (Table 1)" else row.model
                                for row in table.itertuples()])  # a measured row says how many tasks it holds
    sns.barplot(data=table, y="model", x="success_%", hue="source", dodge=False, ax=ax)
    for bars in ax.containers:  # print the numbers too: a 0.0 bar is otherwise invisible
        ax.bar_label(bars, fmt="%.1f", padding=3, fontsize=8)
    ax.set_xlabel("BFCL multi-turn success (%)")
    ax.set_ylabel("")
    ax.set_xlim(0, 100)
    ax.set_title("Zero-shot BFCL multi-turn: paper vs. measured")
    fig.tight_layout()
    return save_figure(fig, path)


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
    return save_figure(fig, path)


def plot_signal_counts(signals: list[dict], path: str | Path | None = None):
    """Signals by type and probe/training step (the paper's Figs. 3b and 4)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    if not signals:
        for ax in (left, right):
            ax.text(0.5, 0.5, "no signal fired", ha="center", va="center")
            ax.set_axis_off()
        return save_figure(fig, path)
    counts = pd.crosstab(pd.Series([s["step"] for s in signals], name="step"),
                         pd.Series([s["type"] for s in signals], name="signal"))
    counts.plot.bar(ax=left, rot=0)
    left.set_title("signals per step")
    left.set_ylabel("trajectories marked")
    totals = counts.sum()
    right.pie(totals, labels=[f"{k}\n{v} ({v / totals.sum():.0%})" for k, v in totals.items()])
    right.set_title("share by type (paper: boundary 45.5% on BFCL)")
    fig.tight_layout()
    return save_figure(fig, path)


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
    return save_figure(fig, path)


def plot_dynamics(summary: dict, path: str | Path | None = None):
    """The paper's Fig. 3 for one training run: (a) training reward per step, (b) signals per feedback round by type,
    (c) new tasks per round and the pool size, (d) the share of abstracted tasks validation accepted per round."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.2))
    steps = range(1, len(summary["reward_curve"]) + 1)
    axes[0].plot(steps, summary["reward_curve"], marker="o")
    axes[0].set(title="(a) training reward", xlabel="GRPO step", ylim=(-0.02, 1.02))
    rounds = pd.DataFrame([{"round": r["round"], **r["signals"], "added": r["tasks_added"], "rejected": r["rejected"],
                            "pool": r["pool_size_after"]} for r in summary["rounds"]]).set_index("round") \
        if summary["rounds"] else pd.DataFrame()
    if rounds.empty:
        for ax in axes[1:]:
            ax.text(0.5, 0.5, "no feedback round", ha="center", va="center")
            ax.set_axis_off()
        fig.tight_layout()
        return save_figure(fig, path)
    signal_columns = [c for c in rounds.columns if c not in ("added", "rejected", "pool")]
    rounds[signal_columns].plot.bar(ax=axes[1], stacked=True, rot=0)
    axes[1].set(title="(b) signals per round", ylabel="trajectories marked")
    rounds["added"].plot.bar(ax=axes[2], rot=0, color="tab:green", label="new tasks")
    axes[2].set(title="(c) new tasks per round", ylabel="tasks")
    pool_ax = axes[2].twinx()
    pool_ax.plot(range(len(rounds)), rounds["pool"], color="black", marker=".", label="pool after")
    pool_ax.set_ylabel("pool size")
    accepted = rounds["added"] / (rounds["added"] + rounds["rejected"]).where(lambda n: n > 0)
    (100 * accepted).plot.bar(ax=axes[3], rot=0, color="tab:purple")
    axes[3].set(title="(d) validation pass rate", ylabel="% of abstracted tasks kept", ylim=(0, 105))
    fig.suptitle(f"Training dynamics (paper Fig. 3): profile={summary['profile']}, {summary['steps']} steps, "
                 f"F={summary['feedback_every']}, seed {summary['seed']}", fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path)


def pool_curve(run: dict) -> pd.Series:
    """The pool the trainer samples, step by step, from a run's summary: D_0 from step 0, each round's pool from the
    step it ran at (a round at step s grows the pool step s + 1 samples; drawn as steps-post)."""
    points = {0: run["pool_size_start"], **{r["step"]: r["pool_size_after"] for r in run["rounds"]}}
    points.setdefault(run["steps"], points[max(points)])
    return pd.Series(points).sort_index()


VARIANT_STYLES = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", (0, (5, 1))), ("P", (0, (1, 1)))]
"""Marker and line style per variant, so that variants with equal curves stay visible on top of each other."""


def plot_learning_curves(summaries: dict[str, list[dict]], path: str | Path | None = None):
    """Greedy success over training steps on each held-out set (and the fixed D_0 sample), one panel per set (its
    task count in the title) and one line per variant (mean over its seeds, each seed faint; variants apart by
    marker, line style and a small horizontal offset, so equal curves stay visible), with the pool size the trainer
    samples beside them, step by step. `summaries`: variant -> the runs' summary.json contents."""
    import matplotlib.pyplot as plt

    first = next(iter(summaries.values()))[0]["eval_curve"][0]
    panels = [(f"eval/{name}_greedy_success", f"held-out {title}", first.get(f"eval/{name}_n"))
              for name, title in HELDOUT_TITLES.items() if f"eval/{name}_greedy_success" in first]
    panels.append(("eval/d0_greedy_success", "D_0 sample (trained on)", first.get("eval/d0_n")))
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 3.6))
    pool_ax = axes[-1]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (variant, runs) in enumerate(summaries.items()):
        color, (marker, linestyle) = colors[index % len(colors)], VARIANT_STYLES[index % len(VARIANT_STYLES)]
        offset = 0.12 * (index - (len(summaries) - 1) / 2)  # steps apart, so equal curves do not hide each other
        curves = [pd.DataFrame(run["eval_curve"]).set_index("step") for run in runs]
        for ax, (column, _, _) in zip(axes, panels):
            for curve in curves:
                ax.plot(curve.index + offset, curve[column], color=color, alpha=0.25, lw=1, linestyle=linestyle)
            mean = pd.concat([c[column] for c in curves], axis=1).mean(axis=1)
            ax.plot(mean.index + offset, mean.values, color=color, marker=marker, linestyle=linestyle,
                    label=f"{variant} ({len(runs)} seeds)")
        pools = [pool_curve(run) for run in runs]
        for pool in pools:
            pool_ax.plot(pool.index, pool.values, color=color, alpha=0.25, lw=1, drawstyle="steps-post")
        pool = pd.concat(pools, axis=1).ffill().mean(axis=1)
        pool_ax.plot(pool.index + offset, pool.values, color=color, marker=marker, linestyle=linestyle,
                     drawstyle="steps-post", label=variant)
    for ax, (_, title, n) in zip(axes, panels):
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("greedy success (%)")
        ax.set_title(f"{title}, n={n}" if n else title, fontsize=10)
    axes[0].legend(fontsize=8)
    pool_ax.set_xlabel("GRPO step")
    pool_ax.set_ylabel("tasks in the pool")
    pool_ax.set_title("Pool size D_t (steps at each round)")
    fig.tight_layout()
    return save_figure(fig, path)
