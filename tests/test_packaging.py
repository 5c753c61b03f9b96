"""The project's install files agree with each other and with the README's commands."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_environment_yml_mirrors_requirements_pins():
    requirements = _pins((ROOT / "requirements.txt").read_text().splitlines())
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert _pins(pip_section) == requirements
    assert "python=3.11" in environment["dependencies"]


def test_every_requirement_is_pinned_exactly():
    for name in ("requirements.txt", "requirements-nodeps.txt"):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or "==" in line, f"{name}: {line!r} is not pinned with =="


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make reproduce" in readme


def test_pyproject_declares_the_runtime_stack_and_the_pins_satisfy_it():
    import tomllib

    from packaging.requirements import Requirement

    pins = _pins((ROOT / "requirements.txt").read_text().splitlines())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["notebooks"]]
    for requirement in declared:
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is declared in pyproject.toml but not pinned in requirements.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} does not satisfy {requirement}"
    assert {"torch", "transformers", "trl", "pydantic", "pyyaml"} <= {r.name.lower() for r in declared}


def test_importing_the_library_changes_no_process_setting():
    import subprocess
    import sys

    code = "import os; before = dict(os.environ); import coevolve_lib.profiles, coevolve_lib.training.loop; " \
           "print(sorted(k for k in os.environ if os.environ.get(k) != before.get(k)))"
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OMP_NUM_THREADS", "HF_HUB_OFFLINE")}
    changed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                             check=True).stdout.strip()
    assert changed == "[]"


def test_committed_notebooks_hold_no_widget_state_temporary_or_machine_paths():
    import json

    from coevolve_lib.studies.notebook_runner import clean_notebook

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        text = path.read_text()
        notebook = json.loads(text)
        assert clean_notebook(notebook) == notebook, f"{path.name}: run clean_notebook on it before committing"
        machine_paths = re.findall(r"/(?:work|home|root|Users|mnt)/[\w.-]+", text) + re.findall(r"/tmp/out_\w+", text)
        assert str(ROOT) not in text and not machine_paths, f"{path.name} names machine paths: {machine_paths[:3]}"


def test_ci_runs_the_lint_gate_first_and_the_tree_passes_it():
    """Issue 48: no linter ran anywhere (unused imports sat in the library). `make lint` runs ruff with the rules of
    pyproject.toml over the whole tree, and .ci/run runs it before the tests."""
    import subprocess
    import sys

    ci = (ROOT / ".ci" / "run").read_text()
    assert "make lint\nmake test\n" in ci
    checked = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stdout[-3000:]


LIBRARY_PATH = re.compile(r"(?<![\w/.-])(?:coevolve_lib/)?((?:core|rollout|engine|envs|training|studies|cli|prompts)/"
                          r"[\w/]*\w(?:\.py|/))")
"""A library file or folder as the docs name it: `coevolve_lib/engine/feedback.py`, `training/loop.py`, `envs/bfcl/`."""


def _texts():
    import json

    paths = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "notebooks").glob("*.md"),
             *(ROOT / "coevolve_lib").rglob("*.py"), *(ROOT / "tests").glob("*.py"),
             *(ROOT / "benchmarks").glob("*.py"), *(ROOT / "configs").rglob("*.yaml")]
    for path in paths:
        if path.name != "log.md":  # the log is history: it names files as they were
            yield path, path.read_text()
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        yield path, "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])


def test_every_library_file_the_docs_and_docstrings_name_exists():
    """Issue 48: eleven docstrings and several docs named files that had moved or gone (the old training, vLLM and
    AppWorld modules). Every library path named in the README, docs, notebooks, docstrings, tests and configs
    exists."""
    missing = [f"{path.relative_to(ROOT)}: {name}" for path, text in _texts() for name in LIBRARY_PATH.findall(text)
               if not (ROOT / "coevolve_lib" / name).exists() and not (ROOT / name).exists()]
    assert not missing, "\n".join(missing)


def test_every_library_module_imports():
    """A module that imports a name another module no longer has fails only when something imports it: the CLI's
    `compare` did, after its plotting functions moved, until a test ran the command. Every module imports here."""
    import importlib
    import pkgutil

    import coevolve_lib

    failed = []
    for module in pkgutil.walk_packages(coevolve_lib.__path__, "coevolve_lib."):
        try:
            importlib.import_module(module.name)
        except Exception as error:  # noqa: BLE001 - every module's failure is listed, not the first one only
            failed.append(f"{module.name}: {type(error).__name__}: {error}")
    assert not failed, "\n".join(failed)
