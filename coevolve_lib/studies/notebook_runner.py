"""`python -m coevolve_lib notebook NOTEBOOK OUTPUT [-p NAME VALUE ...]`: papermill, after checking the parameters.

papermill only warns about a parameter the notebook's `parameters` cell does not define (a misspelt `-p profil x`
runs the notebook on its defaults). Here an unknown name is an error before anything runs: one line, exit status 2.
Values are read as YAML (`-p seeds "[0, 1]"` is a list, `-p limit 5` an int); the notebook validates them. A notebook
that stops on an error is one line too: exit status 2 for a bad parameter value (`ConfigError`), 1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from coevolve_lib.core.profiles import ArgumentParser, ConfigError


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


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser("python -m coevolve_lib notebook", __doc__)
    parser.add_argument("notebook", help="the notebook to run, e.g. notebooks/06_coevolve_training.ipynb")
    parser.add_argument("output", help="where the executed notebook goes")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a parameter of the notebook's parameters cell (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        parameters = {name: yaml.safe_load(value) for name, value in args.parameter}
    except yaml.YAMLError as exc:
        raise ConfigError(f"a parameter value is not valid YAML: {' '.join(str(exc).split())}") from None
    from papermill.exceptions import PapermillExecutionError

    try:
        run_notebook(args.notebook, args.output, parameters, progress=not args.quiet)
    except PapermillExecutionError as exc:  # the notebook's own error, in one line (the cell is in `output`)
        message = " ".join(str(exc.evalue).split())
        print(f"python -m coevolve_lib notebook: error: {Path(args.notebook).name} stopped in cell "
              f"{exc.exec_count}: {exc.ename}: {message} (executed notebook: {args.output})", file=sys.stderr)
        return 2 if exc.ename == "ConfigError" else 1
    return 0
