"""Notebooks run with papermill after checking their parameters, and cleaned before they are committed
(`python -m coevolve_lib notebook`, coevolve_lib/cli/notebook.py; `python -m coevolve_lib reproduce`).

papermill only warns about a parameter the notebook's `parameters` cell does not define; `run_notebook` refuses an
unknown name before anything runs (a ConfigError).
"""

from __future__ import annotations

from pathlib import Path

from coevolve_lib.core.config import ConfigError


def notebook_parameters(notebook: str | Path) -> list[str]:
    """The names the notebook's `parameters` cell defines."""
    import papermill

    return sorted(papermill.inspect_notebook(str(notebook)))


def check_parameters(notebook: str | Path, parameters: dict) -> None:
    """A ConfigError naming every parameter the notebook does not define, and the ones it does."""
    known = notebook_parameters(notebook)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown} for {Path(notebook).name}; valid: {', '.join(known)}")


def run_notebook(notebook: str | Path, output: str | Path, parameters: dict, progress: bool = True) -> None:
    """Execute `notebook` into `output` with `parameters` (checked first), in the notebook's folder."""
    import papermill

    notebook = Path(notebook)
    if not notebook.exists():
        raise ConfigError(f"no notebook {notebook}")
    check_parameters(notebook, parameters)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(notebook.parent),
                               progress_bar=progress)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def clean_notebook(notebook: dict) -> dict:
    """`notebook` (nbformat JSON) as it is committed: no widget state or views, no papermill or timing metadata (they
    hold temporary paths and dates), no `injected-parameters` cell; other outputs stay, for readers on GitHub."""
    notebook = {**notebook, "metadata": {k: v for k, v in notebook["metadata"].items()
                                         if k not in ("widgets", "papermill")}}
    cells = []
    for cell in notebook["cells"]:
        metadata = {k: v for k, v in cell.get("metadata", {}).items() if k not in ("papermill", "execution")}
        if "injected-parameters" in metadata.get("tags", []):
            continue
        cell = {**cell, "metadata": metadata}
        if "outputs" in cell:
            cell["outputs"] = [o for o in map(_without_widget_view, cell["outputs"]) if o is not None]
        cells.append(cell)
    return {**notebook, "cells": cells}


def _without_widget_view(output: dict) -> dict | None:
    """A display output without its widget view (a progress bar's; its text fallback stays), None when nothing is
    left."""
    data = output.get("data")
    if not data or WIDGET_VIEW not in data:
        return output
    rest = {k: v for k, v in data.items() if k != WIDGET_VIEW}
    return {**output, "data": rest} if rest else None
