"""Bad command lines and notebook parameters as a new user would try them (issue 22): every one ends in one line on
stderr that names the problem, and a non-zero status; never a traceback, an accepted value or a run that starts.

Most fail while the profile or the options load, so they run in-process through `python -m coevolve_lib`'s own
`main` (a subprocess would only add its start-up). The notebook cases run papermill in a subprocess, as `make
reproduce` does. `{tmp}` in a command is the folder `scratch` prepares, `{port}` a port another socket holds.
"""

import json
import os
import shlex
import socket
import subprocess
import sys

import nbformat
import pytest

from coevolve_lib import profiles
from coevolve_lib.__main__ import main as cli
from coevolve_lib.cli import openai_server
from coevolve_lib.core.paths import REPO_ROOT

NB00 = "notebooks/00_quickstart_bfcl_environment.ipynb"

CASES = [  # (command, exit status, what the one line says)
    # train: overrides (--set) and the values they set
    ("train --dry-run --set a", 2, "override 'a' is not of the form section.field=value"),
    ("train --dry-run --set =1", 2, "override '=1' is not of the form section.field=value"),
    ("train --dry-run --set training=1", 2, "training must be a mapping of fields, not 1"),
    ("train --dry-run --set training.nosuch=1", 2, "training.nosuch: unknown field; valid: baselines, beta"),
    ("train --dry-run --set training.learning_rate=abc", 2, "training.learning_rate: Input should be a valid number"),
    ("train --dry-run --set training.learning_rate=1e999", 2, "training.learning_rate: Input should be a finite"),
    ("train --dry-run --set training.beta=inf", 2, "training.beta: Input should be a finite number (got 'inf')"),
    ("train --dry-run --set training.baselines.curriculum_prior=inf", 2,
     "training.baselines.curriculum_prior: Input should be a finite number"),
    ("train --dry-run --set training.max_steps=1.5", 2, "training.max_steps: Input should be a valid integer, got a "
                                                        "number with a fractional part (got 1.5)"),
    ("train --dry-run --set training.max_steps=[unclosed", 2, "'[unclosed' is not a valid value"),
    ("train --dry-run --set training.reward=*", 2, "YAML reads a leading '*' as syntax: quote the value"),
    # issue 29: values that explode (aliases expand exponentially) or are huge are refused, quoted by a short prefix
    ("train --dry-run --set 'training.max_steps=[&a [x, x], *a, *a]'", 2,
     "override 'training.max_steps': YAML alias *a (write the value out"),
    (f"train --dry-run --set training.max_steps={'9' * 5000}", 2,
     "is not a valid value (an integer of more than 4300 digits)"),
    (f"train --dry-run --set training.max_steps={'x' * 100_000}", 2,
     "training.max_steps: Input should be a valid integer, unable to parse string as an integer "
     "(got 'xxxxxxxxxxxxxxxxx..."),
    ("train --dry-run --set training.group_size=1", 2, "training.group_size: Input should be greater than or equal "
                                                       "to 2 (got 1)"),
    ("train --dry-run --set training.launch.num_processes=3", 2, "must split into whole groups over 3 process(es)"),
    ("train --dry-run --set training.vllm_server_port=99999", 2,
     "training.vllm_server_port: Input should be less than or equal to 65535 (got 99999)"),
    ("train --dry-run --set training.dtype=float16", 2, "training.dtype: Input should be 'auto', 'bfloat16' or "
                                                        "'float32' (got 'float16')"),
    ("train --dry-run --set training.lora.target_modules=[1]", 2,
     "training.lora.target_modules[0]: Input should be a valid string (got 1)"),
    ("train --dry-run --set rollout.engine=vllm", 2, "rollout.engine=vllm is not chosen by name"),
    ("train --dry-run --set rollout.top_p=0", 2, "rollout.top_p: Input should be greater than 0 (got 0)"),
    ("train --dry-run --set model.name=x", 2, "model must be a model name (tiny, a hub id, a local path or "
                                              "openai:<model>), not {'name': 'x'}"),
    ("train --dry-run --set data_engine.synthesis.max_calls=2", 2, "max_calls (2) must be >= min_calls (3)"),
    ("train --dry-run --set data_engine.d0_source_split=val", 2, "data_engine.d0_source_split: Input should be "
                                                                 "'train' or 'all' (got 'val')"),
    ("train --dry-run --set data_engine.explore.explorer=llm", 2,
     "data_engine.explorer_model is needed by data_engine.explore.explorer=llm"),
    ("train --dry-run --set data_engine.synthesis.judge=true", 2,
     "data_engine.explorer_model is needed by data_engine.synthesis.judge=true"),
    ("train --dry-run --set data_engine.explore.base_url=http://127.0.0.1:9/v1", 2,
     "data_engine.explore.base_url: unknown field; valid: calls_per_run"),
    ("train --dry-run --set evaluation.base_url=127.0.0.1:8000", 2,
     "evaluation.base_url: an http:// or https:// URL is required"),
    # train: profiles
    ("train --dry-run --profile ''", 2, "profile must be a profile name or a .yaml path, not ''"),
    ("train --dry-run --profile tiny.yaml", 2, "profile 'tiny.yaml' is no .yaml file (a profile is a name of configs/"),
    ("train --dry-run --profile ../configs/tiny", 2, "profile '../configs/tiny' is no .yaml file"),
    ("train --dry-run --profile {tmp}/list", 2, "/list' is no .yaml file"),
    ("train --dry-run --profile {tmp}/not_yaml.yaml", 2, "/not_yaml.yaml is not valid YAML"),
    ("train --dry-run --profile {tmp}/loop.yaml", 2, "loop.yaml inherits from itself through"),
    ("train --dry-run --set evaluation.environment_name=no_such_module:Env", 2,
     "evaluation.environment_name: environment 'no_such_module:Env': cannot import no_such_module "
     "(ModuleNotFoundError"),
    ("train --dry-run --set evaluation.environment_name=json:dumps", 2,
     "evaluation.environment_name: environment 'json:dumps' is function dumps, not a subclass of "
     "coevolve_lib.core.environment.Environment"),
    ("train --dry-run --set training.reward=shaped", 2,
     "training.reward: 'shaped' is not a reward of bfcl; its rewards: ['binary', 'format', 'prefix']"),
    ("train --dry-run --profile _paper", 2, "unknown profile '_paper'; choose from ['paper-qwen2.5-7b'"),
    # train: the run folder
    ("train --dry-run --out {tmp}/a_file", 2, "/a_file is a file; give a run folder"),
    ("train --no-resume --out {tmp}/finished", 2, "/finished already holds a run (last checkpoint checkpoint-1)"),
    ("train --out {tmp}/bad_run_config", 2, "/bad_run_config/run_config.json does not say which configuration "
                                            "the run in"),
    ("train --out {tmp}/damaged --set training.max_steps=1", 2,
     "checkpoint-1: trainer_state.json is not JSON, and no earlier checkpoint is whole: delete"),
    # evaluate
    ("evaluate --limit 1", 2, "the following arguments are required: --out"),
    ("evaluate --out {tmp}/e.json --model tiny --base-url http://127.0.0.1:9/v1", 2,
     "base_url http://127.0.0.1:9/v1 is for openai:<model> models; model 'tiny' runs locally"),
    ("evaluate --out {tmp}/e.json --model openai:x --base-url ftp://127.0.0.1", 2,
     "evaluation.base_url: an http:// or https:// URL is required"),
    ("evaluate --out {tmp}/e.json --seed -1", 2, "evaluation.seed: Input should be greater than or equal to 0"),
    ("evaluate --out {tmp}/e.json --temperature 11", 2, "evaluation.temperature: Input should be less than or equal "
                                                         "to 10"),
    ("evaluate --out {tmp}/e.json --environment nosuch", 2,
     "evaluation.environment_name: unknown environment 'nosuch'"),
    ("evaluate --out {tmp}/e.json --split nosuch", 2, "evaluation.split: BFCL split 'nosuch': choose from"),
    ("evaluate --out {tmp}/e.json --max-new-tokens 0", 2, "rollout.max_new_tokens: Input should be greater than 0"),
    ("evaluate --out {tmp}/e.json --tool-format xml", 2, "rollout.tool_format: Input should be 'auto', 'native' or "
                                                         "'prompt'"),
    ("evaluate --out {tmp}/e.json --batch-size abc", 2, "rollout.batch_size: Input should be a valid integer"),
    ("evaluate --out {tmp}/e.json --limit 1.5", 2, "evaluation.limit: Input should be a valid integer"),
    ("evaluate --out {tmp}/e.json --set environment.category=''", 2,
     "environment.category: Input should be a valid string (got None)"),
    ("evaluate --out {tmp}/e.json --set rollout.max_steps_per_episode=0", 2,
     "rollout.max_steps_per_episode: Input should be greater than 0"),
    ("evaluate --out {tmp}/e.json --set nodot", 2, "override 'nodot' is not of the form section.field=value"),
    # rehearse (issue 28)
    ("rehearse --profile tiny", 2,
     "rehearse runs the paper profiles (a paper backbone as model, on bfcl or appworld); 'tiny' trains 'tiny'"),
    ("rehearse --profile tiny-appworld", 2, "'tiny-appworld' trains 'tiny' on appworld"),
    ("rehearse --profile paper-qwen3-4b --set training.group_size=3", 2, "must split into whole groups"),
    ("rehearse --profile paper-qwen3-4b --out {tmp}/a_file", 2, "/a_file is a file; give a folder"),
    # issue 47: no command writes into the kit's own files, and a rehearsal deletes only what a rehearsal made
    ("rehearse --profile paper-qwen3-4b --out {tmp}/bad_run_config", 2,
     "bad_run_config holds files a rehearsal did not make (no .coevolve-rehearsal)"),
    ("evaluate --out {repo}/coevolve_lib/core/models.py", 2, "core/models.py is inside the kit's own coevolve_lib/"),
    ("evaluate --out {repo}/.git/config", 2, "/.git/config is inside the kit's own .git/"),
    ("evaluate --out {repo}/README.md", 2, "/README.md is one of the kit's own files"),
    ("train --dry-run --out {repo}/coevolve_lib", 2, "/coevolve_lib is inside the kit's own coevolve_lib/"),
    ("train --dry-run --out {repo}", 2, "is the repository itself"),
    # issue 47: nesting past Python's recursion limit was a RecursionError traceback wherever YAML is read
    (f"train --dry-run --set training.max_steps={'[' * 2000}{']' * 2000}", 2,
     "override 'training.max_steps': YAML nested more than 64 levels deep"),
    (f"evaluate --out {{tmp}}/e.json --set evaluation.limit={'[' * 2000}{']' * 2000}", 2,
     "override 'evaluation.limit': YAML nested more than 64 levels deep"),
    (f"heldout --set data_engine.d0_size={'[' * 2000}{']' * 2000}", 2,
     "override 'data_engine.d0_size': YAML nested more than 64 levels deep"),
    ("train --dry-run --profile {tmp}/deep.yaml", 2, "deep.yaml: YAML nested more than 64 levels deep"),
    # compare, sweep, reproduce
    ("compare --seeds -1", 2, "--seeds[0]: Input should be greater than or equal to 0 (got -1)"),
    ("compare --seeds 0 0", 2, "--seeds: List should name each seed once (got [0, 0])"),
    ("compare --seeds abc", 2, "argument --seeds: invalid int value: 'abc'"),
    ("compare --study nosuch", 2, "argument --study: invalid choice: 'nosuch'"),
    ("compare --results {tmp}", 2, "is a directory; give the results file's path"),
    ("sweep", 2, "the following arguments are required: --sweep"),
    ("sweep --sweep {tmp}", 2, "no sweep '"),
    ("sweep --sweep {tmp}/seeds.yaml", 2, "/seeds.yaml: seeds: Input should be a valid list (got 'abc')"),
    ("sweep --sweep {tmp}/cell.yaml", 2, "/cell.yaml: cells.a: Input should be a valid list (got 5)"),
    ("sweep --sweep {tmp}/base.yaml", 2, "/base.yaml: base: Input should be a valid list (got 'training.max_steps=2')"),
    ("sweep --sweep {tmp}/list.yaml", 2, "/list.yaml: a sweep holds profile, seeds, base and a non-empty `cells`"),
    ("sweep --sweep tiny-grpo --set training.max_steps=abc", 2, "training.max_steps: Input should be a valid integer"),
    ("reproduce --profile nosuch", 2, "--profile: no profile 'nosuch'"),
    ("reproduce --seeds a,b --list", 2, "--seeds: 'a,b' is not a comma-separated list of integers"),
    ("reproduce --seeds 0,0 --list", 2, "--seeds: List should name each seed once"),
    ("reproduce --only nosuch --list", 2, "--only: unknown table(s)/figure(s) ['nosuch']"),
    # heldout, warm-start, bfcl-replay, setup, the dispatcher
    ("heldout --profile paper-qwen3-4b-appworld", 2, "profile paper-qwen3-4b-appworld has no held-out set"),
    ("heldout --set data_engine.heldout.new_tasks.size=abc", 2,
     "data_engine.heldout.new_tasks.size: Input should be a valid integer"),
    ("warm-start --profile smol", 2, "profile smol has no warm start"),
    ("warm-start --set environment.warm_start.learning_rate=0", 2,
     "environment.warm_start.learning_rate: Input should be greater than 0 (got 0)"),
    ("bfcl-replay --data-version v9", 2, "argument --data-version: invalid choice: 'v9'"),
    ("bfcl-replay --limit abc", 2, "argument --limit: invalid int value: 'abc'"),
    ("bfcl-replay --category nosuch", 2, "argument --category: invalid choice: 'nosuch'"),
    ("setup --nosuch", 2, "unrecognized arguments: --nosuch"),
    ("--version", 2, "unknown command '--version'"),
    # notebook (the parameter names and values checked before papermill starts)
    ("notebook {tmp}/nosuch.ipynb {tmp}/out.ipynb", 2, "no notebook "),
    ("notebook README.md {tmp}/out.ipynb", 2, "no notebook README.md (a .ipynb file"),
    ("notebook {tmp}/garbage.ipynb {tmp}/out.ipynb", 2, "/garbage.ipynb is not a notebook (not nbformat JSON)"),
    (f"notebook {NB00} {{tmp}}/out.ipynb -p profile", 2, "argument -p/--parameter: expected 2 arguments"),
    (f"notebook {NB00} {{tmp}}/out.ipynb -p task_index [1", 2, "parameter 'task_index': '[1' is not a valid value"),
    (f"notebook {NB00} {{tmp}}/out.ipynb -p task_index '[&a [1], *a]'", 2, "parameter 'task_index': YAML alias *a"),
    # the test OpenAI server (python -m coevolve_lib.cli.openai_server)
    ("openai-server --port 99999", 2, "--port must be 0..65535 (got 99999)"),
    ("openai-server --port {port}", 2, "Address already in use; give another port, or 0 for a free one"),
    ("openai-server --faults 500,nosuch", 2, "--faults: unknown fault(s) ['nosuch']; choose from 500, timeout"),
    ("openai-server --delay-s -1", 2, "--delay-s must be a finite number >= 0 (got -1.0)"),
    ("openai-server --delay-s nan", 2, "--delay-s must be a finite number >= 0 (got nan)"),
]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """The files the commands name: sweep files and a notebook that are no such thing, run folders (a finished
    one, one with a damaged `run_config.json`, one whose only checkpoint is damaged), a file where a folder goes."""
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "list").write_text("- a\n")
    (tmp / "a_file").write_text("")
    (tmp / "seeds.yaml").write_text("seeds: abc\ncells: {a: []}\n")
    (tmp / "cell.yaml").write_text("cells: {a: 5}\n")
    (tmp / "base.yaml").write_text("base: training.max_steps=2\ncells: {a: []}\n")
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "garbage.ipynb").write_text("not json")
    (tmp / "deep.yaml").write_text("model: " + "[" * 2000 + "]" * 2000 + "\n")
    (tmp / "not_yaml.yaml").write_text("training: [unclosed\n")
    (tmp / "loop.yaml").write_text("inherits: loop.yaml\n")  # a profile file that inherits from itself
    (tmp / "finished" / "trainer" / "checkpoint-1").mkdir(parents=True)
    (tmp / "finished" / "trainer" / "checkpoint-1" / "coevolve_state.json").write_text("{}")
    (tmp / "bad_run_config").mkdir()
    (tmp / "bad_run_config" / "run_config.json").write_text("")
    (tmp / "damaged" / "trainer" / "checkpoint-1").mkdir(parents=True)
    (tmp / "damaged" / "trainer" / "checkpoint-1" / "coevolve_state.json").write_text("{}")
    (tmp / "damaged" / "trainer" / "checkpoint-1" / "trainer_state.json").write_text("")
    return tmp


@pytest.fixture(scope="module")
def busy_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def run_in_process(argv: list[str]) -> int:
    """The exit status of `python -m coevolve_lib <argv>` (or of the test server's command, `openai-server`)."""
    if argv[0] != "openai-server":
        return cli(argv)
    try:
        openai_server.main(argv[1:])
    except SystemExit as exit:
        return exit.code
    return 0


def assert_one_line(status: int, out: str, err: str, expected_status: int, expected: str) -> None:
    assert "Traceback" not in out + err, err[-3000:]
    assert status == expected_status != 0, err
    assert out == "" and err.count("\n") == 1, err
    assert expected in err, err


@pytest.mark.parametrize("command, status, expected", CASES, ids=[c[0][:100] for c in CASES])
def test_a_bad_command_line_is_one_line_and_a_non_zero_status(capsys, scratch, busy_port, command, status, expected):
    argv = [word.format(tmp=scratch, port=busy_port, repo=REPO_ROOT) for word in shlex.split(command)]
    returned = run_in_process(argv)
    captured = capsys.readouterr()
    assert_one_line(returned, captured.out, captured.err, status, expected)
    assert len(captured.err) < 1_000 + len(str(scratch)), "a one-line error quotes a short prefix of a value"


@pytest.mark.parametrize("text, expected", [
    ("training: {max_steps: [2\n", "broken.yaml is not valid YAML"),
    ("- training\n- rollout\n", "broken.yaml must be a mapping of sections (model, rollout, environment, evaluation, "
                                "data_engine, training), not a list"),
    ("model: tiny\ntrainer: {max_steps: 2}\n", "broken.yaml: unknown section(s) ['trainer']; valid: ['model'"),
    ("inherits: nosuch\nmodel: tiny\n", "unknown profile 'nosuch'"),
])
def test_a_broken_profile_file_is_one_line_naming_it(capsys, monkeypatch, tmp_path, text, expected):
    monkeypatch.setattr(profiles, "CONFIGS_DIR", tmp_path)
    (tmp_path / "broken.yaml").write_text(text)
    returned = cli(["train", "--dry-run", "--profile", "broken"])
    captured = capsys.readouterr()
    assert_one_line(returned, captured.out, captured.err, 2, expected)


def test_a_dead_explorer_endpoint_stops_at_d0_in_one_line(capsys, monkeypatch, tmp_path):
    """An LLM explorer whose endpoint never answers used to build an empty D_0 (after every call's retries) and then
    fail in TRL's trainer with a traceback ("No completions were generated")."""
    import coevolve_lib.cli.warm_start as warm_start_cli
    from coevolve_lib.core.openai_model import OpenAIChatModel
    from coevolve_lib.engine import data_engine

    # The real client against a closed port, without the default retries and their backoff.
    monkeypatch.setattr(data_engine, "load_chat_model", lambda spec, **options: OpenAIChatModel(
        spec.removeprefix("openai:"), "http://127.0.0.1:9/v1", max_retries=0))
    monkeypatch.setattr(warm_start_cli, "RUNS_DIR", tmp_path)
    returned = cli(["warm-start", "--quiet", "--set", "data_engine.explorer_model=openai:x",
                    "--set", "data_engine.explore.explorer=llm", "--set", "data_engine.explore.runs=1",
                    "--set", "data_engine.explore.calls_per_run=1"])
    captured = capsys.readouterr()
    assert_one_line(returned, captured.out, captured.err, 1, "explorer calls failed after their retries: does "
                    "openai:x's endpoint answer (OPENAI_BASE_URL), and without errors (its log says why)?); once that "
                    "is fixed, delete ")
    assert "D_0 has no task (" in captured.err and f"{tmp_path}/warm_start_tiny_" in captured.err
    assert "/round_000" in captured.err


NOTEBOOK_CASES = [  # (notebook, parameters, what the one line says); the check runs in the cell after the parameters
    (NB00, ["task_index", "abc"], "ConfigError: task_index: Input should be a valid integer"),
    (NB00, ["task_index", "99999"], "ConfigError: task_index: Input should be less than 200 (got 99999)"),
    (NB00, ["data_version", "v9"], "ConfigError: environment.data_version: Input should be 'v3' or 'v4' (got 'v9')"),
    ("notebooks/07_learning_and_comparison.ipynb", ["seeds", "[0, 0]"],
     "ConfigError: seeds: List should name each seed once (got [0, 0])"),
    ("notebooks/20_paper_tables.ipynb", ["allow_missing", "maybe"],
     "ConfigError: allow_missing: Input should be a valid boolean"),
]


@pytest.mark.slow
@pytest.mark.parametrize("notebook, parameter, expected", NOTEBOOK_CASES,
                         ids=[f"{n.split('/')[1][:2]}-{'='.join(p)}" for n, p, _ in NOTEBOOK_CASES])
def test_a_bad_notebook_parameter_stops_the_notebook_in_one_line(tmp_path, notebook, parameter, expected):
    out = tmp_path / "out.ipynb"
    run = subprocess.run([sys.executable, "-m", "coevolve_lib", "notebook", notebook, str(out), "-p", *parameter,
                          "--quiet"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr, run.stderr[-3000:]
    # The kernel's own log lines (ipykernel's TCP warning, at times a traceback of its shutdown) go to its log file.
    assert len(lines) == 1, run.stderr
    assert "[IPKernelApp]" in out.with_suffix(".kernel.log").read_text()
    assert expected in lines[-1] and "stopped in cell" in lines[-1], lines[-1]
    code = [c for c in nbformat.read(out, 4).cells if c.cell_type == "code"]
    stopped = next(i for i, c in enumerate(code) if any(o.output_type == "error" for o in c.outputs))
    assert "parameter(" in code[stopped].source or "_config(" in code[stopped].source  # the cell after the parameters
    assert not any(c.outputs for c in code[stopped + 1:])  # nothing after the check ran


def test_the_dry_run_plan_is_strict_json(capsys):
    """`--set training.beta=inf` used to print `"beta": Infinity`, which is no JSON; every float a profile takes is
    finite now (the cases above), so the plan parses without Python's extensions."""
    def refuse(constant):
        raise ValueError(f"{constant} in the plan")

    assert cli(["train", "--dry-run", "--set", "training.learning_rate=1e308", "--set", "training.beta=1e308"]) == 0
    plan = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert plan["grpo_config"]["learning_rate"] == 1e308


@pytest.mark.parametrize("module, command, expected", [
    ("coevolve_lib", "train --dry-run --set training=1", "training must be a mapping of fields, not 1"),
    ("coevolve_lib", "train --dry-run --profile {tmp}/list", "/list' is no .yaml file"),
    ("coevolve_lib.cli.openai_server", "--port 99999", "--port must be 0..65535 (got 99999)"),
])
def test_the_same_in_a_process_of_its_own(scratch, module, command, expected):
    """A few of the cases as the shell runs them: the interpreter prints no traceback and exits with the status."""
    run = subprocess.run([sys.executable, "-m", module, *shlex.split(command.format(tmp=scratch))], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert_one_line(run.returncode, run.stdout, run.stderr, 2, expected)


def test_an_empty_cache_is_one_line_in_every_command(tmp_path):
    """Issue 29: `train` with an empty model cache was a 57-line traceback (`evaluate` gave one line); a cache without
    BFCL's release was one in `heldout` and `warm-start`. Each command names what is missing and what builds it."""
    from coevolve_lib.core.paths import CACHE_DIR

    no_models, nothing = tmp_path / "no_models", tmp_path / "nothing"
    no_models.mkdir(), nothing.mkdir()
    (no_models / "bfcl").symlink_to(CACHE_DIR / "bfcl")
    cases = [(no_models, "train --profile smol --quiet", "model 'smollm2-135m' is not built"),
             (no_models, f"evaluate --profile smol --limit 1 --quiet --out {tmp_path}/e.json",
              "model 'smollm2-135m' is not built"),
             (nothing, "heldout", "BFCL v3 (bfcl-eval==2025.6.8) is not installed in"),
             (nothing, "warm-start --quiet", "BFCL v3 (bfcl-eval==2025.6.8) is not installed in")]
    runs = [subprocess.Popen([sys.executable, "-m", "coevolve_lib", *shlex.split(command)], cwd=REPO_ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "COEVOLVE_CACHE": str(cache), "COEVOLVE_RUNS_DIR": str(tmp_path)})
            for cache, command, _ in cases]
    for run, (_, command, expected) in zip(runs, cases):
        out, err = run.communicate(timeout=180)
        assert "make setup" in err, (command, err[-2000:])
        assert_one_line(run.returncode, out, err, 2 if command.startswith("evaluate") else 1, expected)
