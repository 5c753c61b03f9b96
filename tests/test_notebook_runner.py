"""The notebook runner: parameters checked before papermill runs, notebooks cleaned before they are committed."""

import pytest

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.profiles import ConfigError
from coevolve_lib.studies.notebook_runner import (
    WIDGET_VIEW,
    check_parameters,
    clean_notebook,
    notebook_parameters,
    parameter,
)


def test_clean_notebook_drops_machine_state_and_keeps_readable_outputs():
    bar = {"output_type": "display_data", "data": {WIDGET_VIEW: {"model_id": "x"}, "text/plain": "100%|##| 2/2"}}
    only_widget = {"output_type": "display_data", "data": {WIDGET_VIEW: {"model_id": "y"}}}
    text = {"output_type": "stream", "name": "stdout", "text": "D_0: 91 tasks\n"}
    notebook = {"metadata": {"kernelspec": {"name": "coevolve-kit"}, "widgets": {"state": {}},
                             "papermill": {"output_path": "/tmp/out.ipynb"}},
                "cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "p = 1", "outputs": []},
                          {"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "source": "p = 2",
                           "outputs": []},
                          {"cell_type": "code", "metadata": {"papermill": {"duration": 1.0}, "execution": {}},
                           "source": "run()", "outputs": [bar, only_widget, text]}]}
    clean = clean_notebook(notebook)
    assert clean["metadata"] == {"kernelspec": {"name": "coevolve-kit"}}
    assert [c["source"] for c in clean["cells"]] == ["p = 1", "run()"]
    assert clean["cells"][1]["metadata"] == {}
    assert clean["cells"][1]["outputs"] == [{"output_type": "display_data", "data": {"text/plain": "100%|##| 2/2"}},
                                            text]
    assert clean_notebook(clean) == clean


def test_parameters_are_checked_against_the_parameters_cell():
    notebook = REPO_ROOT / "notebooks" / "06_coevolve_training.ipynb"
    check_parameters(notebook, {"profile": "tiny", "overrides": {}})
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['overides'\] for 06_coevolve_training.ipynb"):
        check_parameters(notebook, {"overides": {}})


def test_papermill_reads_every_parameter_of_every_notebook():
    # papermill skips a line it cannot parse (e.g. a comment with "="), and the parameter then cannot be set
    import ast

    import nbformat

    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cell = next(c for c in nbformat.read(path, 4).cells if "parameters" in c.metadata.get("tags", []))
        assigned = {t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign) for t in node.targets}
        assert set(notebook_parameters(path)) == assigned, path.name


@pytest.mark.parametrize("name, value, extra, expected", [
    ("seeds", "0", {}, "seeds: Input should be a valid list (got '0')"),
    ("seeds", [0, -1], {}, "seeds[1]: Input should be greater than or equal to 0 (got -1)"),
    ("seeds", [0, 0], {}, "seeds: List should name each seed once (got [0, 0])"),
    ("jobs", True, {}, "jobs: Input should be a number, not a boolean (got True)"),
    ("resume", "maybe", {}, "resume: Input should be a valid boolean"),
    ("overrides", 5, {}, "overrides: Input should be a mapping ({section: {field: value}}) or a list of"),
    ("run_dir", 5, {}, "run_dir: Input should be a valid string (got 5)"),
    ("task_index", 200, {"lt": 200}, "task_index: Input should be less than 200 (got 200)"),
    ("split", "test", {"choices": ["train", "dev"]}, "split: Input should be 'train' or 'dev' (got 'test')"),
    ("study_seeds", {"comparison": "x"}, {}, "study_seeds.comparison: Input should be a valid list (got 'x')"),
])
def test_a_bad_parameter_value_is_one_line_naming_the_parameter(name, value, extra, expected):
    with pytest.raises(ConfigError) as error:
        parameter(name, value, **extra)
    assert expected in str(error.value) and "\n" not in str(error.value)


def test_parameter_values_come_back_converted():
    assert parameter("resume", "false") is False and parameter("seeds", (0, 1)) == [0, 1]
    assert parameter("run_dir", None) is None and parameter("task_index", 3, lt=4) == 3


PROFILE_CHECKED = {"profile", "model", "data_version", "category", "split", "limit", "seed", "explorer_model",
                   "d0_size", "overrides", "reflector"}
"""Notebook parameters that the profile functions check where a notebook passes them on (`run_config`,
`eval_config`, `data_engine_config`, the studies' runs)."""


def test_every_notebook_checks_each_parameter_in_the_cell_after_them():
    import nbformat

    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = [c for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
        index = next(i for i, c in enumerate(cells) if "parameters" in c.metadata.get("tags", []))
        check = cells[index + 1].source
        for name in notebook_parameters(path):
            assert f'parameter("{name}"' in check or (name in PROFILE_CHECKED and name in check), (path.name, name)
