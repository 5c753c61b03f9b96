"""Tables and figures that put the kit's measured numbers beside the paper's, with the scale on every row."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from coevolve_lib import paper


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
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def failure_breakdown(result: dict) -> pd.Series:
    """How the evaluated episodes ended: success, or the checker's / agent's error type."""
    counts = Counter("success" if t["success"] else (t["error_type"] or "failed") for t in result["per_task"])
    return pd.Series(counts, name="episodes").sort_values(ascending=False)
