"""Similarity and diversity metrics of synthesized tasks (coevolve_lib/studies/similarity.py): the formulas on vectors
whose answers are known, the per-round pool summary, and the real embedding model on sentences."""

import json

import numpy as np
import pytest

from coevolve_lib.core.results import check_result
from coevolve_lib.studies import similarity


def test_identical_items_have_self_redundancy_one_and_orthogonal_ones_zero():
    same = np.tile([[0.3, -1.0, 2.0]], (6, 1))
    assert similarity.self_redundancy(same, k=5) == pytest.approx(1.0)
    assert similarity.self_redundancy(np.eye(4) * 3.0, k=2) == pytest.approx(0.0)


def test_self_redundancy_averages_the_k_nearest_other_items():
    # unit vectors at 0, 60, 90 degrees: each item's nearest neighbour has cosine 0.5 or cos 30 = 0.866
    items = np.array([[1.0, 0.0], [0.5, np.sqrt(3) / 2], [0.0, 1.0]])
    nearest = [0.5, np.sqrt(3) / 2, np.sqrt(3) / 2]
    assert similarity.self_redundancy(items, k=1) == pytest.approx(np.mean(nearest))
    assert similarity.self_redundancy(items, k=2) == pytest.approx(np.mean([0.25, (0.5 + np.sqrt(3) / 2) / 2,
                                                                            np.sqrt(3) / 4]))
    with pytest.raises(ValueError, match="at least 2"):
        similarity.self_redundancy(items[:1])


def test_max_similarity_is_the_closest_reference_cosine():
    tasks = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, -2.0]])
    reference = np.array([[2.0, 0.0], [0.0, 1.0]])
    assert similarity.max_similarity(tasks, reference) == pytest.approx([1.0, np.sqrt(0.5), 0.0])


def test_energy_distance_is_zero_for_the_same_set_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 8))
    assert similarity.relative_energy_distance(x, x) == pytest.approx(0.0, abs=1e-12)
    small, large = (similarity.relative_energy_distance(x, x + shift) for shift in (0.5, 3.0))
    assert 0 < small < large
    # the paper's normaliser: the mean distance between distinct target items
    pair = np.array([[0.0, 0.0], [2.0, 0.0]])
    # ED = 2 * mean(2, 0) - mean(0, 2, 2, 0) - 0 = 1, normalised by 2
    assert similarity.relative_energy_distance(pair, np.array([[2.0, 0.0]])) == pytest.approx(0.5)


def test_bins_partition_the_items_into_ordered_thirds():
    values = np.random.default_rng(1).uniform(0.2, 0.9, size=31)
    bins = similarity.similarity_bins(values)
    assert [b["bin"] for b in bins] == ["low", "medium", "high"]
    items = np.concatenate([b["items"] for b in bins])
    assert sorted(items.tolist()) == list(range(31)) and [b["n"] for b in bins] == [11, 10, 10]
    assert bins[0]["max"] <= bins[1]["min"] and bins[1]["max"] <= bins[2]["min"]
    assert bins[0]["mean"] < bins[1]["mean"] < bins[2]["mean"]
    for b in bins:
        assert b["mean"] == pytest.approx(values[b["items"]].mean())


def test_pool_summary_per_round_and_its_results_rows(tmp_path, monkeypatch):
    # a fake encoder: each text's vector is given by its first word, so every number below is known
    vectors = {"a": [1.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0], "c": [0.0, 0.0, 1.0]}
    monkeypatch.setattr(similarity, "embed",
                        lambda texts: np.array([vectors[t.split()[0]] for t in texts]).reshape(-1, 3))
    tasks = [("a 1", 0), ("a 2", 0), ("b 1", 0), ("c 1", 1), ("c 2", 1)]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps({"task_id": f"t{i}", "query": q, "pool_version": v}) + "\n"
                                                 for i, (q, v) in enumerate(tasks)))
    (tmp_path / "pool.jsonl.rounds.json").write_text(json.dumps({"rounds": [0, 1, 2]}))
    (tmp_path / "run_config.json").write_text(json.dumps({"training": {"feedback_every": 5}}))
    rounds = similarity.pool_similarity_by_round(tmp_path, ["a x", "b x"], k=1)
    assert [(r["round"], r["step"], r["n"]) for r in rounds] == [(0, 0, 3), (1, 5, 2), (2, 10, 0)]
    d0, first, empty = rounds
    assert d0["sr"] == pytest.approx(2 / 3) and first["sr"] == pytest.approx(1.0) and empty["sr"] is None
    assert d0["max_sims"] == pytest.approx([1, 1, 1]) and first["max_sims"] == pytest.approx([0, 0])
    assert d0["ed_rel_d0"] is None and first["ed_rel_d0"] > 0 and first["ed_rel_val"] > d0["ed_rel_val"]
    rows = similarity.result_rows(rounds, "bfcl", "v3")
    check_result({"schema": "results/v2", "experiment": "similarity", "profile": "tiny", "model": "m",
                  "commit": "0" * 40, "config_hash": "0" * 12, "created": "2026-01-01T00:00:00+00:00",
                  "metrics": rows})
    sr = [r for r in rows if r["metric"] == "sr@1"]
    assert [(r["eval_set"], r["step"], r["value"]) for r in sr] == [
        ("pool/round_0", 0, d0["sr"]), ("pool/round_1", 5, 1.0), ("pool/round_2", 10, None)]
    whole = [r for r in rows if r["eval_set"] == "pool/all"]
    assert [(r["bin"], r["n"]) for r in whole] == [("low", 2), ("medium", 2), ("high", 1)]
    table = similarity.round_table(rounds)
    # mean and sample variance over the feedback rounds; the empty round has no SR, one value has no variance
    assert table.loc["mean", "SR@1 (%)"] == 100.0 and np.isnan(table.loc["variance", "SR@1 (%)"])


def test_pool_summary_says_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no pool.jsonl"):
        similarity.pool_similarity_by_round(tmp_path, ["x"])
    (tmp_path / "pool.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no task"):
        similarity.pool_similarity_by_round(tmp_path, ["x"])


def test_the_embedding_model_puts_paraphrases_closer_than_unrelated_sentences():
    rows = similarity.embed(["Create a new folder called reports.", "Make a directory named reports.",
                             "What is the stock price of Apple today?"], batch_size=2)
    assert rows.shape == (3, similarity.DIMENSION) and rows.dtype == np.float32
    assert np.linalg.norm(rows, axis=1) == pytest.approx(1.0, abs=1e-5)
    cosine = rows @ rows.T
    assert cosine[0, 1] > 0.6 > 0.2 > max(cosine[0, 2], cosine[1, 2])
    # an embedding does not depend on its batch
    assert similarity.embed(["What is the stock price of Apple today?"])[0] == pytest.approx(rows[2], abs=1e-5)
