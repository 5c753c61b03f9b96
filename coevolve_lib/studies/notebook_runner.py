"""Notebooks run with papermill after checking their parameters, and cleaned before they are committed
(`python -m coevolve_lib notebook`, coevolve_lib/cli/notebook.py; `python -m coevolve_lib reproduce`).

papermill only warns about a parameter the notebook's `parameters` cell does not define; `run_notebook` refuses an
unknown name before anything runs (a ConfigError). Each notebook checks its parameters' values in the cell after
them, before anything runs: the profile's own values through `profiles` (`run_config`, `eval_config`, ...), the
others with `parameter` (a ConfigError in one line, which `python -m coevolve_lib notebook` shows with status 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from coevolve_lib import profiles
from coevolve_lib.core.config import ConfigError, NonNegativeInt, PositiveInt, Seeds
from coevolve_lib.studies.catalog import TRAINED_STUDIES

PARAMETER_TYPES = {
    # in several notebooks, with the same meaning in each
    "seeds": Seeds, "jobs": PositiveInt, "overrides": profiles.Overrides, "resume": bool,
    "run_dir": str | None, "out_dir": str | None,
    # one notebook's
    "task_index": NonNegativeInt, "replay_limit": PositiveInt,  # 00
    "show_targets": NonNegativeInt,  # 04
    "round_index": PositiveInt,  # 05: the pool version the round creates (D_0 is 0)
    "pass_k": NonNegativeInt,  # 07
    "d0_sizes": list[PositiveInt], "feedback_every": list[PositiveInt],  # 09
    "k": PositiveInt,  # 11
    "explorer_models": dict[str, str], "default_row": str, "explorer_recordings": dict[str, str],  # 12
    "split": str, "task_id": str, "max_steps": PositiveInt, "max_new_tokens": PositiveInt,  # 13 (AppWorld)
    "appworld_profile": str | None,  # 14, 15
    "studies": list[Literal[TRAINED_STUDIES]],  # 15
    "study_seeds": dict[str, Seeds], "allow_missing": bool,  # 20
}
"""The type of each notebook parameter that no profile function checks, by name."""


def parameter(name: str, value, choices=None, **bounds):
    """The notebook parameter `name`'s `value`, checked and converted as `PARAMETER_TYPES[name]`: one of `choices`
    when given, within pydantic's `bounds` (e.g. `lt=len(tasks)`) when given. A ConfigError in one line otherwise."""
    annotation = PARAMETER_TYPES[name]
    if choices is not None:
        annotation = Literal[tuple(choices)]
    elif bounds:
        annotation = Annotated[annotation, Field(**bounds)]
    return profiles.checked(name, value, annotation)


def notebook_parameters(notebook: str | Path) -> list[str]:
    """The names the notebook's `parameters` cell defines."""
    import papermill
    from nbformat.reader import NotJSONError

    try:
        return sorted(papermill.inspect_notebook(str(notebook)))
    except NotJSONError:
        raise ConfigError(f"{notebook} is not a notebook (not nbformat JSON)") from None


def check_parameters(notebook: str | Path, parameters: dict) -> None:
    """A ConfigError naming every parameter the notebook does not define, and the ones it does."""
    known = notebook_parameters(notebook)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {unknown} for {Path(notebook).name}; valid: {', '.join(known)}")


def run_notebook(notebook: str | Path, output: str | Path, parameters: dict, progress: bool = True) -> None:
    """Execute `notebook` into `output` with `parameters` (checked first), in the notebook's folder. The kernel
    process's own stderr goes to `<output>.kernel.log` (`kernel_logged_to`), not to the command's."""
    import papermill

    notebook = Path(notebook)
    if not notebook.is_file() or notebook.suffix != ".ipynb":
        raise ConfigError(f"no notebook {notebook} (a .ipynb file, e.g. notebooks/06_coevolve_training.ipynb)")
    check_parameters(notebook, parameters)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(notebook.parent),
                               progress_bar=progress,
                               kernel_manager_class=kernel_logged_to(Path(output).with_suffix(".kernel.log")))


def kernel_logged_to(log: Path) -> type:
    """A kernel manager class whose kernels write their stderr to `log`. ipykernel logs there itself (its TCP
    warning, and at times a traceback of its own when papermill shuts it down mid-publish: "ZMQError: Socket
    operation on non-socket"); on the command's stderr that broke the one-line error of a notebook that stops. The
    notebook's own output and errors are in the executed notebook, as before."""
    from jupyter_client.manager import AsyncKernelManager

    class KernelLoggedToFile(AsyncKernelManager):
        async def start_kernel(self, **kw):
            self.kernel_log = open(log, "ab")  # kept open with the manager: a restart launches with the same file
            return await super().start_kernel(stderr=self.kernel_log, **kw)

    return KernelLoggedToFile


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
