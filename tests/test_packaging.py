"""The project's install files agree with each other and with the README's commands."""

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
