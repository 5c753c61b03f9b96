"""The kit's grading agrees with the official checker on ground truth, perturbed ground truth and a seeded sample of
randomly mutated ground truth (benchmarks/bfcl_differential.py runs thousands)."""

import json
import subprocess
import sys

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.replay import differential, replay


def assert_perfect(counts):
    assert counts["gt_passed"] == counts["tasks"]
    assert counts["perturbed"] > 0 and counts["perturbed_rejected"] > 0
    assert counts["agreement"] == counts["agreement_total"] == counts["tasks"] + counts["perturbed"]


def test_replay_v3_base_agrees_with_official():
    summary = replay("v3", ["multi_turn_base"], limit=40)
    assert summary["data_version"] == "v3"
    counts = summary["categories"]["multi_turn_base"]
    assert counts["tasks"] == 40
    assert_perfect(counts)


def test_replay_v4_cli_in_a_fresh_process():
    # A process holds one BFCL release, so v4 runs in its own interpreter.
    proc = subprocess.run(
        [sys.executable, "-m", "coevolve_lib", "bfcl-replay", "--data-version", "v4", "--category", "base",
         "--limit", "20"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["data_version"] == "v4"
    counts = summary["categories"]["multi_turn_base"]
    assert counts["tasks"] == 20
    assert_perfect(counts)


def test_randomized_differential_v3_agrees_with_official():
    for category in bfcl_backend.CATEGORIES:
        result = differential("v3", category, 200, seed=7)
        assert result["disagreements"] == [], result["disagreements"][:3]
        assert 0 < result["official_passed"] < result["trajectories"] == 200


def test_randomized_differential_v4_script_in_a_fresh_process():
    proc = subprocess.run(
        [sys.executable, "benchmarks/bfcl_differential.py", "--data-version", "v4", "--trajectories", "200",
         "--seed", "7"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4 and all("trajectories    200" in line and "disagreements   0" in line for line in lines)
