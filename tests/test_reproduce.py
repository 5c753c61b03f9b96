"""The batch driver: which notebooks a selection runs, the parameters they get, skipping what is complete, resuming
after a failure (real papermill runs of small notebooks), and the plan of a paper profile's runs."""

import json

import pytest

import coevolve_lib.studies.reproduce as reproduce
from coevolve_lib.__main__ import main as cli
from coevolve_lib.profiles import ConfigError


def names(experiments):
    return [e.notebook.split("_")[0] for e in experiments]


def test_every_notebook_is_in_the_registry_in_running_order():
    on_disk = sorted(p.name for p in reproduce.NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
    assert [e.notebook for e in reproduce.EXPERIMENTS] == on_disk
    assert reproduce.ASSEMBLY == reproduce.EXPERIMENTS[-1]


def test_only_selects_the_notebooks_that_make_a_table_and_the_assembly():
    assert names(reproduce.select(["table5"])) == ["08", "20"]
    assert names(reproduce.select(["table12"])) == ["12", "20"]
    assert names(reproduce.select(["table11", "table3"])) == ["07", "08", "20"]
    assert len(reproduce.select(None)) == len(reproduce.EXPERIMENTS)
    with pytest.raises(ConfigError, match=r"unknown table\(s\)/figure\(s\) \['table99'\]"):
        reproduce.select(["table99"])


def test_parameters_come_from_the_profile_settings_and_are_checked(tmp_path, monkeypatch):
    ablations = next(e for e in reproduce.EXPERIMENTS if e.notebook.startswith("08"))
    values = reproduce.parameters(ablations, "tiny", None, allow_missing=False)
    assert values["profile"] == "tiny" and values["seeds"] == [0]
    assert "training.max_steps=12" in values["overrides"] and values["jobs"] == 2
    comparison = next(e for e in reproduce.EXPERIMENTS if e.notebook.startswith("07"))
    assert reproduce.parameters(comparison, "tiny", None, False)["seeds"] == [0, 1, 2]  # Tables 2-3: 3 seeds
    assert reproduce.parameters(ablations, "tiny", [0, 1, 2], False)["seeds"] == [0, 1, 2]
    assert reproduce.parameters(ablations, "paper-qwen3-4b", None, False) == {"profile": "paper-qwen3-4b"}
    grid = next(e for e in reproduce.EXPERIMENTS if e.notebook.startswith("09"))
    assert reproduce.parameters(grid, "paper-qwen3-4b", None, False)["d0_sizes"] == [50, 200, 25, 500]
    assert reproduce.parameters(reproduce.ASSEMBLY, "tiny", None, True)["allow_missing"] is True
    settings = tmp_path / "reproduce.yaml"
    settings.write_text("tiny:\n  notebooks:\n    '08': {overides: []}\n")
    monkeypatch.setattr(reproduce, "SETTINGS_FILE", settings)
    with pytest.raises(ConfigError, match=r"08_ablations_signals_and_validation.ipynb has no parameter\(s\) "
                                          r"\['overides'\]"):
        reproduce.parameters(ablations, "tiny", None, False)


def test_a_paper_profile_lists_every_run_with_its_launch_command(capsys):
    assert cli(["reproduce", "--profile", "paper-qwen3-4b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    runs = [line for line in out.splitlines() if line.strip().startswith("run ")]
    # comparison 3, signals 4, validation 2, sensitivity 1 + 4 N + 4 F, baselines 5, explorers 3 x 2: 29 runs; on
    # paper-qwen3-4b-appworld (notebook 15) comparison 3, signals 4, validation 2, sensitivity 1 + 2 + 2, baselines
    # 5: 19 (shared ones are listed under each study that needs them)
    assert len(runs) == 48 and all("[not run]" in line for line in runs)
    assert sum("runs/studies/paper-qwen3-4b-appworld/" in line for line in runs) == 19
    commands = [line.strip() for line in out.splitlines() if line.strip().startswith("accelerate launch")]
    assert len(commands) == 48 and all("--num_processes 8" in c and "--profile paper-qwen3-4b" in c for c in commands)
    # the vLLM recipes, once (tests/test_train_plan.py checks them)
    assert out.count("  colocate: accelerate launch") == 1 and out.count("  server, started first: ") == 1
    assert "--out <run folder> --set training.use_vllm=true --set training.vllm_mode=colocate" in out
    assert "--set 'data_engine.signals.enabled=[forgetting,boundary]'" in out
    assert "--set data_engine.d0_size=500" in out and "--set training.feedback_every=40" in out
    assert "--set training.baselines.reflexion_reflector=explorer" in out
    assert "--set data_engine.explorer_model=openai:qwen-plus --set data_engine.explore.explorer=llm" in out
    # the reference CoEvolve run is one folder for every study of a profile that needs it
    folders = {line.split("]")[-1].strip() for line in runs if "/coevolve seed 0" in line}
    assert len(folders) == 2 and len({folder.split("/")[2] for folder in folders}) == 2


def test_the_appworld_studies_plan_the_appworld_profiles_runs():
    """Notebook 15 trains `<profile>-appworld`: every study of notebooks 07-10, each shared run once."""
    appworld = next(e for e in reproduce.EXPERIMENTS if e.notebook.startswith("15"))
    runs = reproduce.planned_runs(appworld, reproduce.parameters(appworld, "tiny", None, False))
    assert {p["run"].profile for p in runs} == {"tiny-appworld"}
    assert {p["study"] for p in runs} == {"comparison", "signals", "validation", "sensitivity", "baselines"}
    assert {"rest", "reflexion", "curriculum", "n16", "f1"} <= {p["variant"] for p in runs}
    assert len({p["folder"] for p in runs}) == 12  # the CoEvolve run and the static one shared between studies
    assert {p["run"].data_engine.d0_size for p in runs if p["variant"] == "n16"} == {16}
    # a profile with no AppWorld counterpart leaves notebooks 14 and 15 out
    assert names(reproduce.Driver("paper-qwen2.5-7b", None, None, False, True).experiments)[-4:] == ["11", "12", "13",
                                                                                                      "20"]


def test_bad_options_are_one_line_errors(capsys):
    for argv in (["--profile", "nosuch"], ["--only", "table99"], ["--seeds", "a,b"], ["--seeds", "-1"]):
        assert cli(["reproduce", *argv, "--list"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m coevolve_lib reproduce: error: ") and err.count("\n") == 1


def _notebook(path, source):
    cells = [{"cell_type": "code", "id": "p", "metadata": {"tags": ["parameters"]}, "execution_count": None,
              "outputs": [], "source": "profile = 'tiny'\nallow_missing = False\nfail_once = False"},
             {"cell_type": "code", "id": "b", "metadata": {}, "execution_count": None, "outputs": [], "source": source}]
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"name": "coevolve-kit", "language":
                                "python", "display_name": "Python (coevolve-kit)"}}, "nbformat": 4,
                                "nbformat_minor": 5}))


@pytest.fixture
def small_registry(tmp_path, monkeypatch):
    """Two small notebooks in place of the kit's: each appends a line to a log; the second fails once if asked."""
    notebooks, log = tmp_path / "notebooks", tmp_path / "log.txt"
    notebooks.mkdir()
    _notebook(notebooks / "01_first.ipynb", f"open({str(log)!r}, 'a').write('first\\n')")
    _notebook(notebooks / "02_tables.ipynb", f"""
import pathlib
marker = pathlib.Path({str(tmp_path / 'failed_once')!r})
if fail_once and not marker.exists():
    marker.touch()
    raise RuntimeError('killed')
open({str(log)!r}, 'a').write('tables\\n')""")
    experiments = (reproduce.Experiment("01_first.ipynb", ("table1",)),
                   reproduce.Experiment("02_tables.ipynb", ("tables",)))
    monkeypatch.setattr(reproduce, "NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(reproduce, "EXPERIMENTS", experiments)
    monkeypatch.setattr(reproduce, "ASSEMBLY", experiments[-1])
    monkeypatch.setattr(reproduce, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(reproduce, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(reproduce, "FIGURES_DIR", tmp_path / "figures")
    settings = tmp_path / "reproduce.yaml"
    settings.write_text("tiny:\n  notebooks:\n    '02': {fail_once: true}\n")
    monkeypatch.setattr(reproduce, "SETTINGS_FILE", settings)
    monkeypatch.setenv("COEVOLVE_RESULTS_DIR", str(tmp_path / "results"))  # restored after the test
    monkeypatch.setenv("COEVOLVE_FIGURES_DIR", str(tmp_path / "figures"))
    return tmp_path, log


def test_complete_notebooks_are_skipped_and_a_failed_one_resumes(small_registry, capsys):
    folder, log = small_registry
    assert cli(["reproduce", "--quiet"]) == 1  # the second notebook "is killed"
    err = capsys.readouterr().err
    assert "02_tables.ipynb" not in err or "RuntimeError: killed" in err
    assert log.read_text() == "first\n"
    assert cli(["reproduce", "--quiet"]) == 0  # the first is complete: only the second runs
    out = capsys.readouterr().out
    assert "complete, skipped: 01_first.ipynb" in out and "[1/1] 02_tables.ipynb" in out
    assert log.read_text() == "first\ntables\n"
    assert cli(["reproduce", "--quiet"]) == 0  # everything complete: nothing runs
    assert log.read_text() == "first\ntables\n"
    first = folder / "notebooks" / "01_first.ipynb"  # an executed copy committed in its place changes nothing
    notebook = json.loads(first.read_text())
    notebook["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "done\n"}]
    first.write_text(json.dumps(notebook))
    assert cli(["reproduce", "--quiet"]) == 0
    assert log.read_text() == "first\ntables\n"
    stamp = json.loads((folder / "runs" / "reproduce" / "tiny" / "02_tables.done.json").read_text())
    assert stamp["parameters"] == {"profile": "tiny", "allow_missing": False, "fail_once": True}
    assert (folder / "runs" / "reproduce" / "tiny" / "02_tables.ipynb").exists()
    assert cli(["reproduce", "--quiet", "--force", "--only", "table1"]) == 0  # forced, and the selection's assembly
    assert log.read_text() == "first\ntables\nfirst\ntables\n"
    (folder / "runs" / "reproduce" / "tiny" / "01_first.done.json").unlink()  # new results: the tables again
    assert cli(["reproduce", "--quiet"]) == 0
    assert log.read_text() == "first\ntables\nfirst\ntables\nfirst\ntables\n"
