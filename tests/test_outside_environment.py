"""The user's path for an environment of their own: a package outside the kit (`tests/outside_env/kv_store`, found by
its entry points, as `pip install -e .` would leave it) with its own profile file, driven through the command line
only: `extensions`, `train --dry-run` and the command it prints, `evaluate`, `heldout`. With faults injected (a tool
that raises, an exploration that raises, a 300,000-character observation, an empty task), every fault ends as a
counted, logged outcome and no command dies."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.core.records import read_jsonl

OUTSIDE = Path(__file__).parent / "outside_env"
PROFILE = "tests/outside_env/kv.yaml"
FAULTS = "tool,explore,observation,empty_task,signal"


def kit(*args: str, runs: Path, faults: str = "", **env: str) -> subprocess.CompletedProcess:
    """`python -m coevolve_lib <args>` as a user's shell runs it, with the package's folder on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(OUTSIDE), os.environ.get("PYTHONPATH")])),
           "COEVOLVE_RUNS_DIR": str(runs), "KV_STORE_FAULTS": faults, **env}
    return subprocess.run([sys.executable, "-m", "coevolve_lib", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The run the printed launch command makes (2 GRPO steps and a signal round, every fault injected)."""
    runs = tmp_path_factory.mktemp("outside")
    dry = kit("train", "--dry-run", "--profile", PROFILE, "--out", str(runs / "train"), runs=runs)
    assert dry.returncode == 0, dry.stderr
    command = shlex.split(json.loads(dry.stdout)["commands"]["train"])
    assert command[:3] == ["python", "-m", "coevolve_lib"] and PROFILE in command
    run = kit(*command[3:], runs=runs, faults=FAULTS)
    assert run.returncode == 0, run.stderr[-3000:]
    return runs, runs / "train", run


def test_the_kit_lists_the_outside_environment_and_where_it_comes_from(tmp_path):
    listed = kit("extensions", "--profile", PROFILE, runs=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "kv        entry point coevolve_lib.environments of kv-store 0.1 (kv_store.environment:KeyValueStore)" \
        in listed.stdout
    assert "any_failure    entry point coevolve_lib.signals of kv-store 0.1 (kv_store.signals:AnyFailure)" \
        in listed.stdout


def test_train_runs_an_outside_environment_through_the_printed_command_and_contains_its_faults(trained):
    _, out, run = trained
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["profile"] == PROFILE
    metrics = read_jsonl(out / "metrics.jsonl")
    # the tool that raises in every group's first sample: those episodes fail, the batches and the run go on
    assert [m["step"] for m in metrics] == [1, 2] and all(m["train/environment_errors"] > 0 for m in metrics)
    episodes = [r for m in metrics for r in read_jsonl(out / "rollouts" / f"step_{m['step']:05d}.jsonl")]
    failed = [r for r in episodes if r["terminated"] == "environment_error"]
    assert len(failed) == sum(m["train/environment_errors"] for m in metrics)
    assert all(r["sample_index"] == 0 and not r["success"] and "injected fault" in r["error_message"] for r in failed)
    assert "environment kv: a tool or feed() raised RuntimeError" in run.stderr
    d0 = json.loads((out / "round_000" / "report.json").read_text())
    # exploring kv-1 raised: that target is skipped and counted; the 300,000-character observation is cut
    assert d0["cost"]["explore"]["skipped"] == {"environment_error": 1, "observation_cap": 2}
    explorations = read_jsonl(out / "round_000" / "explorations.jsonl")
    assert [e["key"] for e in explorations if e.get("error")] == ["unguided/kv-1"]
    assert max(len(t["observation"]) for e in explorations for t in e["triplets"]) == 65_536
    # issue 47: and so is an observation of a validating execution (verdicts.jsonl held them whole: 3.6 MB)
    verdicts = [v for path in sorted(out.glob("round_*/verdicts*.jsonl")) for v in read_jsonl(path)]
    assert max(len(o) for v in verdicts for o in v["observations"]) <= 65_536
    assert any(v.get("observations_cut") for v in verdicts), [len(o) for v in verdicts for o in v["observations"]]
    assert "environment kv: explore of unguided/kv-1 raised RuntimeError" in run.stderr
    # the empty drafts (no call, no query) never reach the pool, each one counted
    assert d0["rejection_reasons"]["too_short"] >= 1
    pool = read_jsonl(out / "pool.jsonl")
    assert len(pool) == summary["pool_size_end"] > summary["pool_size_start"]
    assert all(len(t["reference_actions"]) >= 3 and t["query"].strip() for t in pool)
    assert json.loads((out / "round_001" / "report.json").read_text())["signal_types"] == {"any_failure": 2}
    # issue 47: every drafted spec is accepted or rejected once (164 specs against 144 + 10 counted: a spec drafted
    # twice lost its acceptance to its repeat's "duplicate")
    for path in sorted(out.glob("round_*/report.json")):
        report = json.loads(path.read_text())
        assert report["accepted"] + sum(report["rejection_reasons"].values()) == report["specs"], path.parent.name
    # issue 47: the signal type that raised at step 2 (a traceback that stopped the run, and its rerun, there) gives
    # no signal that step, counted and logged; step 1's signals fed the round
    assert [m["train/signal_errors"] for m in metrics] == [0, 1] and metrics[1]["signals/any_failure"] == 0
    assert "step 2: signal type any_failure RuntimeError: injected fault" in run.stderr


def test_evaluate_and_heldout_run_the_outside_environment_from_its_profile(trained):
    runs, out, _ = trained
    evaluated = kit("evaluate", "--profile", PROFILE, "--model", str(out / "final"), "--out", str(runs / "eval.json"),
                    "--quiet", runs=runs, faults="tool")
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads((runs / "eval.json").read_text())
    row = result["metrics"][0]
    assert row["benchmark"] == "kv" and result["profile"] == PROFILE and row["n"] >= 2  # (make test's scale: 2 tasks)
    # every first sample's tool raises, so each task fails as environment_error: counted, not a crash
    assert f"{out / 'final'} on kv/val (n={row['n']}, T=0.0): success 0.00% (0/{row['n']})" in evaluated.stdout
    assert evaluated.stderr.count("environment kv: a tool or feed() raised RuntimeError") == row["n"]
    # issue 47: it resumes as BFCL's does, from the episodes it wrote (none were written before)
    episodes = runs / "eval.rollouts.jsonl"
    assert len(read_jsonl(episodes)) == row["n"]
    again = kit("evaluate", "--profile", PROFILE, "--model", str(out / "final"), "--out", str(runs / "eval.json"),
                "--quiet", runs=runs, faults="tool")
    assert again.returncode == 0 and "a tool or feed() raised" not in again.stderr  # no episode ran again
    assert len(read_jsonl(episodes)) == row["n"] and json.loads((runs / "eval.json").read_text())["metrics"] == \
        result["metrics"]
    heldout = kit("heldout", "--profile", PROFILE, "--quiet", runs=runs)
    assert heldout.returncode == 0, heldout.stderr
    assert '"new_tasks"' in heldout.stdout and '"3": 3' in heldout.stdout


def test_a_held_out_set_built_under_faults_is_not_cached_as_the_set(tmp_path):
    """Issue 47: a build whose exploration raised was cached, and later commands reused the short set silently. Now
    it is used by the command that built it, logged with the environment's name, and built again next time."""
    cache = tmp_path / "cache"
    faulty = kit("heldout", "--profile", PROFILE, "--quiet", runs=tmp_path, faults="explore", COEVOLVE_CACHE=str(cache))
    assert faulty.returncode == 0, faulty.stderr
    assert "environment kv: held-out set new_tasks: 1 environment fault(s) while building it" in faulty.stderr
    assert "environment kv: explore of unguided/kv-1 raised RuntimeError" in faulty.stderr  # was "the environment:"
    assert not list((cache / "heldout").glob("*/round_000/report.json"))
    clean = kit("heldout", "--profile", PROFILE, "--quiet", runs=tmp_path, COEVOLVE_CACHE=str(cache))
    assert clean.returncode == 0 and len(list((cache / "heldout").glob("*/round_000/report.json"))) == 1


def test_a_contract_broken_by_the_outside_environment_is_one_line(tmp_path):
    """A profile that reads its benchmark as a `module:Class` reference (no entry point needed) whose class breaks
    the evaluation contract: one line naming the environment, the method and the field; status 1."""
    broken = kit("evaluate", "--profile", PROFILE, "--set", "evaluation.environment_name=kv_store.broken:NoCounts",
                 "--model", "tiny", "--out", str(tmp_path / "eval.json"), "--quiet", runs=tmp_path)
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert broken.stderr.strip().splitlines()[-1] == (
        "python -m coevolve_lib evaluate: error: environment kv-broken: evaluate() returned a results document that "
        "breaks the contract (core.environment.checked_evaluation): $.metrics[0].n: missing or not an integer "
        "(and 1 more)")
