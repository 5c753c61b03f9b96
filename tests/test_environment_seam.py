"""The proof that the environment seam is real in the library's Python API: a third environment, the key-value store
of the outside package `tests/outside_env/kv_store` (its command-line path: `test_outside_environment.py`), registered
in-process under a name of this file's, runs D_0, a signal-guided round, two GRPO steps and an evaluation through
`core.environment.Environment` alone. No file of the library names it."""

import inspect
import json
import sys
from pathlib import Path

import pytest
from helpers import EveryFailure  # noqa: F401 (registers the every_failure signal: a random policy fails everything)

from coevolve_lib.core.environment import ENVIRONMENTS, Environment, RoundStages, RoundSteps, register
from coevolve_lib.core.results import validate_result
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.profiles import run_config
from coevolve_lib.training.loop import train

sys.path.insert(0, str(Path(__file__).parent / "outside_env"))
from kv_store.environment import KeyValueStore  # noqa: E402 (a user's package, on the path as PYTHONPATH puts it)

SMALL = {"evaluation": {"benchmark": "kv-in-process", "split": "val"},
         "environment": {},  # the store's settings, in place of tiny's BFCL section (never dropped silently)
         "rollout": {"max_steps_per_episode": 2, "max_new_tokens": 8},
         "data_engine": {"d0_size": 6, "max_targets": 2, "explore": {"runs": 2, "calls_per_run": 4},
                         "signals": {"enabled": ["every_failure"]},
                         "heldout": {"new_tasks": {"size": 0}, "new_envs": {"size": 0}}},
         "training": {"max_steps": 2, "tasks_per_step": 2, "group_size": 2, "feedback_every": 1, "eval_every": 2,
                      "eval_pool_tasks": 3, "eval_limit": 3, "max_completion_tokens": 64, "save_every": 2}}


def test_a_third_environment_runs_the_whole_loop_through_the_seam(tmp_path):
    register("kv-in-process", KeyValueStore)
    try:
        run = run_config("tiny", SMALL)  # the profile check knows the name from the registry alone
        engine = DataEngine(run.data_engine, tmp_path, run.evaluation.environment_name)
        summary = train(run, tmp_path, progress=False, engine=engine)
    finally:
        del ENVIRONMENTS["kv-in-process"]
    d0 = json.loads((tmp_path / "round_000" / "report.json").read_text())
    d0_tasks = [t for t in engine.pool.tasks if t["pool_version"] == 0]
    assert d0["accepted"] == len(d0_tasks) == 6
    assert {t["provenance"]["origin_task"] for t in d0_tasks} <= {"kv-0", "kv-1", "kv-2", "kv-3"}
    signal_round = json.loads((tmp_path / "round_001" / "report.json").read_text())
    assert signal_round["signal_types"] == {"every_failure": 2} and signal_round["added_to_pool"] > 0
    assert {t["provenance"]["signal_type"] for t in engine.pool.tasks if t["pool_version"] == 1} == {"every_failure"}
    assert engine.pool.version == 1 and all(len(t["reference_actions"]) == 3 for t in engine.pool.tasks)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and metrics[0]["feedback/tasks_added"] > 0  # none after step 2
    assert all(m["train/environment_errors"] == 0 for m in metrics)  # no fault asked for in this process
    final = json.loads((tmp_path / "eval" / "step_00002.json").read_text())
    assert final["eval/val_n"] == 3 and 0 <= final["eval/val_success"] <= 100
    assert validate_result(json.loads((tmp_path / "eval" / "val_step_00002.json").read_text())) == []
    assert summary["eval_before"]["step"] == 0 and summary["eval_after"]["step"] == 2


def test_the_recipe_states_every_method_of_the_seam():
    """Issue 47: the recipe gave each method's outputs but not its inputs, and a user read four modules to find them.
    Its contract table (docs/architecture.md, "Add an environment") names every public method of `Environment`,
    each row saying what the method gets."""
    import re

    from coevolve_lib.core.environment import Environment
    from coevolve_lib.core.paths import REPO_ROOT

    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index("| method: what it gets |"):text.index("Traps an outside user met")]
    rows = [line.split(" | ")[0] for line in table.splitlines()[2:] if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)(?:\(|`)", row)}
    public = {name for name in vars(Environment) if not name.startswith("_")}
    assert public <= named, sorted(public - named)
    assert all(":" in row for row in rows), [row for row in rows if ":" not in row]  # each says what it gets


def test_an_environment_written_before_round_stages_keeps_working():
    """`round_steps` and `RoundSteps` (the names before `round_stages` and `RoundStages`) still work for one release,
    with a DeprecationWarning."""
    methods = {name: getattr(KeyValueStore, name) for name in Environment.__abstractmethods__ - {"round_stages"}}
    stages = RoundSteps(explore=print, abstract=print, validate=print)
    with pytest.warns(DeprecationWarning, match="round_stages"):
        old = type("OldStore", (Environment,), {**methods, "name": "old-kv", "round_steps": lambda self: stages})
    assert RoundSteps is RoundStages and not inspect.isabstract(old)
    assert old.round_stages(None) is stages
