"""The notebook runner: parameters checked before papermill runs, notebooks cleaned before they are committed."""

import pytest

from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.profiles import ConfigError
from coevolve_lib.studies.notebook_runner import WIDGET_VIEW, check_parameters, clean_notebook, notebook_parameters


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
