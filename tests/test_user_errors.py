"""Every bad input a user can give is one line on stderr and exit status 2 (or a documented non-zero status), with
no traceback and nothing written: CLI options, overrides, profiles, papermill parameters."""

import subprocess
import sys

import pytest

from coevolve_lib import profiles
from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.envs.bfcl import evaluate as evaluate_lib
from coevolve_lib.rollout import evaluation as evaluation_lib


def one_line_error(capsys, argv, status=2) -> str:
    assert cli(argv) == status
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    return captured.err


@pytest.mark.parametrize("override, expected", [
    ("training.max_steps=abc", "training.max_steps: Input should be a valid integer"),
    ("training.tasks_per_step=abc", "training.tasks_per_step: Input should be a valid integer"),
    ("training.learning_rate=fast", "training.learning_rate: Input should be a valid number"),
    ("training.max_steps=-5", "training.max_steps: Input should be greater than 0 (got -5)"),
    ("training.lr_scheduler_type=sometimes", "training.lr_scheduler_type: Input should be 'linear', 'cosine'"),
    ("data_engine.signals.enabled=[nosuch]",
     "data_engine.signals.enabled: unknown signal type 'nosuch'; registered: ["),
    ("data_engine.explore.explorer=magic", "data_engine.explore.explorer: Input should be 'schema' or 'llm'"),
    ("environment.classes=[NoSuchAPI]", "environment.classes: unknown BFCL class(es) ['NoSuchAPI']"),
    ("training.reward=maybe",
     "training.reward: 'maybe' is not a reward of bfcl; its rewards: ['binary', 'format', 'prefix']"),
    ("rollout.tool_docs=some", "rollout.tool_docs: Input should be 'full', 'compact' or 'none'"),
    ("training.max_steps", "is not of the form section.field=value"),
    ("trainin.max_steps=3", "unknown profile section(s) ['trainin']"),
])
def test_bad_overrides_are_one_line_and_status_2(capsys, tmp_path, override, expected):
    for command in (["train", "--dry-run", "--out", str(tmp_path / "run")], ["compare", "--out", str(tmp_path / "c")],
                    ["warm-start"], ["heldout"]):
        err = one_line_error(capsys, [*command, "--set", override])
        assert expected in err, err
    assert not any(tmp_path.iterdir())


def test_unknown_profile_and_command(capsys):
    assert "unknown profile 'nosuch'; choose from [" in one_line_error(capsys, ["train", "--profile", "nosuch"])
    assert "unknown command 'trian'" in one_line_error(capsys, ["trian"])
    assert "unrecognized arguments: --sett" in one_line_error(capsys, ["train", "--sett", "x=1"])


@pytest.mark.parametrize("argv, expected", [
    (["--profile", "nosuch"], "unknown profile 'nosuch'"),
    (["--set", "environment.category=nosuch"], "environment.category: unknown BFCL category 'nosuch'"),
    (["--limit", "0"], "evaluation.limit: Input should be greater than 0 (got '0')"),
    (["--limit", "many"], "evaluation.limit: Input should be a valid integer"),
    (["--model", "no/such-model"], "cannot load model 'no/such-model'"),
    (["--model", ""], "evaluation.model: a model name"),
    (["--set", "environment.data_version=v9"], "environment.data_version: Input should be 'v3' or 'v4'"),
    (["--temperature", "hot"], "evaluation.temperature: Input should be a valid number"),
])
def test_evaluate_bad_input_writes_nothing(capsys, tmp_path, argv, expected):
    out = tmp_path / "result.json"
    err = one_line_error(capsys, ["evaluate", *argv, "--out", str(out)])
    assert expected in err, err
    assert not any(tmp_path.iterdir())


def test_evaluate_against_a_dead_endpoint_fails_and_writes_no_result(capsys, monkeypatch, tmp_path):
    from coevolve_lib.core.openai_model import OpenAIChatModel

    # The real client against a closed port, without the default retries and their backoff (~12 s).
    monkeypatch.setattr(evaluation_lib, "load_chat_model",
                        lambda spec, **options: OpenAIChatModel(spec.removeprefix("openai:"), **options, max_retries=0))
    out = tmp_path / "result.json"
    err = one_line_error(capsys, ["evaluate", "--model", "openai:nothing", "--base-url", "http://127.0.0.1:9/v1",
                                  "--limit", "1", "--quiet", "--out", str(out)], status=1)
    assert "every episode ended in a model error" in err and not out.exists()
    assert not out.with_suffix(".rollouts.jsonl").exists()  # failed episodes are not kept for a resume


def test_an_evaluation_without_tasks_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr(evaluate_lib, "evaluation_tasks", lambda cfg: [])
    with pytest.raises(evaluate_lib.EvaluationError, match="no task to evaluate"):
        evaluate_lib.evaluate(profiles.eval_config("tiny"), tmp_path / "r.json", progress=False)
    assert not (tmp_path / "r.json").exists()


def test_notebook_parameters_are_checked_before_running(capsys, tmp_path):
    notebook = "notebooks/00_quickstart_bfcl_environment.ipynb"
    err = one_line_error(capsys, ["notebook", notebook, str(tmp_path / "out.ipynb"), "-p", "profil", "tiny"])
    assert "unknown parameter(s) ['profil'] for 00_quickstart_bfcl_environment.ipynb; valid: " in err
    assert "profile" in err and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_notebook_with_an_unknown_profile_stops_with_one_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "coevolve_lib", "notebook",
                          "notebooks/00_quickstart_bfcl_environment.ipynb", str(tmp_path / "out.ipynb"),
                          "-p", "profile", "nosuch", "--quiet"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert "ConfigError: unknown profile 'nosuch'" in last and "Traceback" not in run.stderr


def test_the_scheduler_names_are_transformers_own():
    from transformers.trainer_utils import SchedulerType

    from coevolve_lib.core.config import LR_SCHEDULERS

    assert LR_SCHEDULERS == tuple(s.value for s in SchedulerType)


@pytest.mark.parametrize("argv, expected", [
    (["sweep", "--sweep", "nosuch"], "no sweep 'nosuch': give a file or one of ['tiny-grpo']"),
    (["sweep", "--sweep", "tiny-grpo", "--jobs", "0"], "--jobs must be >= 1 (got 0)"),
    (["sweep", "--sweep", "tiny-grpo", "--set", "training.draw_factor=0"],
     "training.draw_factor: Input should be greater than or equal to 1"),
    (["compare", "--jobs", "0"], "--jobs must be >= 1 (got 0)"),
    (["train", "--dry-run", "--set", "training.num_iterations=0"],
     "training.num_iterations: Input should be greater than or equal to 1"),
    (["train", "--dry-run", "--set", "data_engine.heldout.rank_by=nosuch"],
     "data_engine.heldout.rank_by: Input should be 'new_tasks' or 'new_envs'"),
])
def test_bad_sweep_and_study_options_are_one_line(capsys, argv, expected):
    assert expected in one_line_error(capsys, argv)


def test_a_broken_sweep_file_is_one_line(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("profile: tiny\ncells: [not, a, mapping]\n")
    assert "a non-empty `cells` mapping" in one_line_error(capsys, ["sweep", "--sweep", str(path)])
    path.write_text("cells: {a: [x\n")
    assert "not valid YAML" in one_line_error(capsys, ["sweep", "--sweep", str(path)])


@pytest.mark.parametrize("limit", ["-5", "0"])
def test_bfcl_replay_refuses_a_limit_below_one(capsys, limit):
    """`--limit -5` used to replay 195 tasks and `--limit 0` to report 0/0 agreement, both with exit status 0."""
    assert f"--limit must be >= 1 (got {limit})" in one_line_error(capsys, ["bfcl-replay", "--limit", limit])


@pytest.mark.parametrize("override, expected", [
    ("training.seed=-1", "training.seed: Input should be greater than or equal to 0"),
    ("data_engine.explore.seed=-3", "data_engine.explore.seed: Input should be greater than or equal to 0"),
    ("training.learning_rate=inf", "training.learning_rate: Input should be a finite number"),
    ("training.learning_rate=nan", "training.learning_rate: Input should be greater than 0"),
    ("training.report_to=nosuch", "training.report_to: Input should be 'none', 'tensorboard' or 'wandb'"),
    ("training.max_steps=true", "training.max_steps: Input should be a number, not a boolean"),
    ("training.max_steps=100000000000000000000000000000", "training.max_steps: Input should be less than or equal"),
])
def test_values_that_used_to_pass_validation_are_refused_at_load(capsys, tmp_path, override, expected):
    """Each of these passed the profile check before (issue 22) and failed later, or trained nothing."""
    err = one_line_error(capsys, ["train", "--dry-run", "--out", str(tmp_path / "run"), "--set", override])
    assert expected in err, err
    assert not any(tmp_path.iterdir())


def test_a_file_of_configs_that_is_no_profile_is_not_one(capsys):
    assert "unknown profile 'reproduce'" in one_line_error(capsys, ["train", "--profile", "reproduce", "--dry-run"])


def test_evaluate_refuses_a_directory_as_its_output_before_evaluating(capsys, tmp_path):
    err = one_line_error(capsys, ["evaluate", "--limit", "1", "--out", str(tmp_path)])
    assert f"--out {tmp_path} is a directory" in err and not any(tmp_path.iterdir())


def test_an_output_path_that_cannot_be_made_is_one_line_naming_it(capsys, tmp_path):
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "run"
    err = one_line_error(capsys, ["train", "--out", str(out), "--set", "training.max_steps=1"], status=1)
    assert "Not a directory" in err and str(tmp_path / "a_file") in err


def test_ctrl_c_is_one_line_saying_how_to_resume_and_exit_status_130(tmp_path):
    """SIGINT during a training run (its D_0 is being built): no traceback, the shell's 130, and the rerun resumes."""
    import signal
    import time

    # A terminal's Ctrl-C: a test run started in the background of a script (`make test &`) hands its children
    # SIGINT ignored, and Python keeps it ignored; the child gets the default back before it starts.
    process = subprocess.Popen([sys.executable, "-m", "coevolve_lib", "train", "--out", str(tmp_path / "run"),
                                "--set", "training.max_steps=1"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while not (tmp_path / "run").exists() and time.time() < deadline:  # the run has started
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1] == (
        "python -m coevolve_lib train: interrupted; the same command again resumes where it stopped")
