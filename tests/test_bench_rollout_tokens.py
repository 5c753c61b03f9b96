"""The rollout-throughput benchmark runs end to end on the tiny model at a very small size."""

import importlib.util
import sys
from pathlib import Path

import pytest

from coevolve_lib.core.paths import MODELS_DIR

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_rollout_tokens.py"


@pytest.mark.skipif(not (MODELS_DIR / "tiny" / "config.json").exists(), reason="tiny model not built")
def test_bench_rollout_tokens_prints_a_ratio(capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_rollout_tokens", BENCH)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_rollout_tokens", bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    result = bench.main(["--tasks", "2", "--samples", "2", "--max-new-tokens", "8", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "target: engine / bound >= 0.7" in out and '"benchmark": "rollout_tokens"' in out.splitlines()[-1]
    assert result["episodes"] == 4 and result["batch"] == 4 and result["avg_turns"] >= 1
    assert set(result["tok_s_median"]) == {"kv_cache", "generate", "bound", "plain"}
    assert all(value > 0 for value in result["tok_s_median"].values())
    assert set(result["ratio_to_bound"]) == set(result["ratio_to_plain"]) == {"kv_cache", "generate"}
