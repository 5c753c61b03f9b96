"""`python -m coevolve_lib notebook NOTEBOOK OUTPUT [-p NAME VALUE ...]`: papermill, after checking the parameters.

papermill only warns about a parameter the notebook's `parameters` cell does not define (a misspelt `-p profil x`
runs the notebook on its defaults). Here an unknown name is an error before anything runs: one line, exit status 2.
Values are read as YAML (`-p seeds "[0, 1]"` is a list, `-p limit 5` an int; no aliases: `core.user_yaml.read_value`);
the notebook validates them. A notebook that stops on an error is one line too: exit status 2 for a bad parameter
value (`ConfigError`), 1 otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

from papermill.exceptions import PapermillExecutionError

from coevolve_lib.core.config import quoted
from coevolve_lib.core.user_yaml import read_value
from coevolve_lib.profiles import ArgumentParser
from coevolve_lib.studies.notebook_runner import run_notebook


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser("python -m coevolve_lib notebook", __doc__)
    parser.add_argument("notebook", help="the notebook to run, e.g. notebooks/06_coevolve_training.ipynb")
    parser.add_argument("output", help="where the executed notebook goes")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a parameter of the notebook's parameters cell (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    parameters = {name: read_value(value, f"parameter {quoted(name)}") for name, value in args.parameter}
    try:
        run_notebook(args.notebook, args.output, parameters, progress=not args.quiet)
    except PapermillExecutionError as exc:  # the notebook's own error, in one line (the cell is in `output`)
        message = " ".join(str(exc.evalue).split())
        print(f"python -m coevolve_lib notebook: error: {Path(args.notebook).name} stopped in cell "
              f"{exc.exec_count}: {exc.ename}: {message} (executed notebook: {args.output})", file=sys.stderr)
        return 2 if exc.ename == "ConfigError" else 1
    return 0
