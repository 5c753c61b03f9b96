"""Evaluation: results JSON schema, resume after a kill without losing or repeating episodes, profile errors."""

import json
import subprocess
import sys

import pytest

from coevolve_lib import profiles
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.core.results import metric_row, validate_result
from coevolve_lib.envs.bfcl.evaluate import evaluate, evaluation_tasks

ROW_KEYS = {"benchmark", "data_version", "eval_set", "metric", "k", "temperature", "seed", "n", "correct", "value",
            "per_task"}


class Killed(BaseException):
    """Stands for the process dying: a BaseException, as KeyboardInterrupt is (the kit contains what an environment
    raises, never a kill)."""


def test_results_json_and_resume_after_a_kill(tmp_path, monkeypatch):
    cfg = profiles.eval_config("tiny", {"rollout": {"max_new_tokens": 8, "batch_size": 2}}, limit=4)
    out = tmp_path / "tiny.json"
    model = load_chat_model("tiny")
    written = []

    import coevolve_lib.envs.bfcl.evaluate as evaluate_module
    real_append = evaluate_module.append_jsonl

    def append_then_die(path, record):  # the process "dies" right after the 2nd episode reached the disk
        real_append(path, record)
        written.append(record["task_id"])
        if len(written) == 2:
            raise Killed

    monkeypatch.setattr(evaluate_module, "append_jsonl", append_then_die)
    with pytest.raises(Killed):
        evaluate(cfg, out, model=model, progress=False)
    assert not out.exists() and len(read_jsonl(out.with_suffix(".rollouts.jsonl"))) == 2

    monkeypatch.setattr(evaluate_module, "append_jsonl", real_append)
    result = evaluate(cfg, out, model=model, progress=False)
    episodes = read_jsonl(out.with_suffix(".rollouts.jsonl"))
    assert len(episodes) == 4 and len({e["task_id"] for e in episodes}) == 4  # nothing lost, nothing repeated
    row = metric_row(result)
    assert result["details"]["resumed_episodes"] == 2 and row["n"] == 4
    assert ROW_KEYS <= set(row) and json.loads(out.read_text()) == result and validate_result(result) == []
    assert row["value"] == 100.0 * sum(t["success"] for t in row["per_task"]) / 4
    assert [t["task_id"] for t in row["per_task"]] == [t.id for t in evaluation_tasks(cfg)]
    assert result["details"]["rollouts_path"].endswith("/tiny.rollouts.jsonl")


def test_a_truncated_last_line_is_skipped_and_redone(tmp_path):
    cfg = profiles.eval_config("tiny", ["rollout.max_new_tokens=8"], limit=2)
    out = tmp_path / "r.json"
    evaluate(cfg, out, progress=False)
    rollouts = out.with_suffix(".rollouts.jsonl")
    lines = rollouts.read_text().splitlines()
    rollouts.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    result = evaluate(cfg, out, progress=False)
    assert result["details"]["resumed_episodes"] == 1 and metric_row(result)["n"] == 2
    # the redone episode's line starts after the cut one, not on it: a third run finds both episodes done
    assert evaluate(cfg, out, progress=False)["details"]["resumed_episodes"] == 2


def test_unknown_profile_or_field_is_a_clear_error():
    with pytest.raises(profiles.ConfigError, match="unknown profile 'tinyy'.*tiny"):
        profiles.eval_config("tinyy")
    with pytest.raises(profiles.ConfigError, match="evaluation.temprature: unknown field"):
        profiles.eval_config("tiny", temprature=0.5)


def test_cli_writes_a_valid_results_json(tmp_path):
    out = tmp_path / "cli.json"
    run = subprocess.run([sys.executable, "-m", "coevolve_lib", "evaluate", "--model", "tiny",
                          "--set", "environment.data_version=v3", "--set", "environment.category=base",
                          "--split", "val", "--limit", "2", "--max-new-tokens", "8",
                          "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    result = json.loads(out.read_text())
    row = metric_row(result)
    assert summary == {"model": "tiny", "eval_set": "bfcl/v3/multi_turn_base/val", "n": 2, "value": row["value"]}
    assert validate_result(result) == [] and result["profile"] == "tiny" and row["data_version"] == "v3"


def test_pass_at_k_is_the_unbiased_estimate():
    from coevolve_lib.rollout.evaluation import pass_at_k

    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 1, 1) == pytest.approx(1 / 8)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)  # both draws fail in 1 of C(4, 2) = 6 pairs
    with pytest.raises(ValueError, match="at least 8 samples"):
        pass_at_k(4, 1, 8)
