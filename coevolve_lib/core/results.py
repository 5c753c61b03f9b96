"""One schema for every file under `results/` (`results/v2`): an envelope saying what produced the numbers, and one
row per measured number.

    {"schema": "results/v2", "experiment", "profile", "model", "commit", "config_hash", "created",
     "metrics": [{"benchmark", "eval_set", "metric", "value", ... optional: data_version, k, temperature, seed, n,
                  ...}, ...],
     ... optional: table, run_dir, config, provenance, details}

`write_result` stamps the commit and creation time, makes every path relative to the repository root, validates and
writes atomically; `validate_result` lists what is wrong with a document (the test runs it on every committed file).
Fields beyond the listed ones are allowed (experiment-specific columns, e.g. a comparison row's `variant`); the listed
ones must have their types. docs/records.md describes each field.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from coevolve_lib.core.paths import repo_relative
from coevolve_lib.core.records import git_commit, write_json_atomic

SCHEMA = "results/v2"
NUMBER = (int, float)
ENVELOPE_FIELDS = {  # name -> (types, required)
    "schema": (str, True), "experiment": (str, True), "profile": (str, True), "model": (str, True),
    "commit": (str, True), "config_hash": (str, True), "created": (str, True), "metrics": (list, True),
    "table": (str, False), "run_dir": (str, False), "config": (dict, False), "provenance": (str, False),
    "details": (dict, False),
}
ROW_FIELDS = {
    "benchmark": (str, True), "eval_set": (str, True), "metric": (str, True), "value": (NUMBER + (type(None),), True),
    "data_version": (str, False), "k": (int, False), "temperature": (NUMBER, False), "seed": (int, False),
    "n": (int, False), "correct": (int, False), "step": (int, False), "table": (str, False), "run_dir": (str, False),
    "config_hash": (str, False), "per_task": ((dict, list), False),
}
COMMIT = re.compile(r"[0-9a-f]{40}(\+dirty)?")
CONFIG_HASH = re.compile(r"[0-9a-f]{12}")
UNKNOWN = "unknown"  # commit / config_hash of a file that never recorded them: `provenance` must say why
ABSOLUTE_PATH = re.compile(r"(/|~/)[^/\s]+/|[A-Za-z]:\\")  # /home/x/..., ~/x/..., C:\...: a machine's folders


def _check_fields(obj: dict, fields: dict, where: str) -> list[str]:
    problems = []
    for name, (types, required) in fields.items():
        if name not in obj:
            if required:
                problems.append(f"{where}: missing field {name!r}")
            continue
        value = obj[name]
        # bool is an int in Python, but a `true` k or seed is a mistake
        if isinstance(value, bool) or not isinstance(value, types):
            problems.append(f"{where}.{name}: {type(value).__name__} {value!r:.60} is not {type_names(types)}")
    return problems


def type_names(types) -> str:
    """`(int, float)` -> "int or float": a field's types as an error message names them."""
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def _strings(value, where: str):
    """(location, string) of every string in a JSON value."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def validate_result(doc, committed: bool = False) -> list[str]:
    """What is wrong with a results document ([] when it is valid). `committed`: the file is in the repository, so
    its paths must also stay inside the checkout (no `../`)."""
    if not isinstance(doc, dict):
        return [f"a results document is a JSON object, not {type(doc).__name__}"]
    problems = _check_fields(doc, ENVELOPE_FIELDS, "$")
    if doc.get("schema") != SCHEMA:
        problems.append(f"$.schema: {doc.get('schema')!r} is not {SCHEMA!r}")
    for name, pattern in (("commit", COMMIT), ("config_hash", CONFIG_HASH)):
        value = doc.get(name)
        if value == UNKNOWN and not doc.get("provenance"):
            problems.append(f"$.{name}: {UNKNOWN!r} needs a `provenance` saying why")
        elif isinstance(value, str) and value != UNKNOWN and not pattern.fullmatch(value):
            problems.append(f"$.{name}: {value!r} is neither {UNKNOWN!r} nor a {name.replace('_', ' ')}")
    if isinstance(doc.get("created"), str):
        try:
            datetime.fromisoformat(doc["created"])
        except ValueError:
            problems.append(f"$.created: {doc['created']!r} is not an ISO 8601 time")
    metrics = doc.get("metrics")
    if isinstance(metrics, list):
        if not metrics and not (doc.get("details") or {}).get("not_trained"):  # else the document says why
            problems.append("$.metrics: no metric rows")
        for index, row in enumerate(metrics):
            where = f"$.metrics[{index}]"
            problems += _check_fields(row, ROW_FIELDS, where) if isinstance(row, dict) else [f"{where}: not an object"]
    for where, value in _strings(doc, "$"):
        if ABSOLUTE_PATH.match(value):
            problems.append(f"{where}: absolute path {value!r} (results name paths relative to the repository root)")
        elif committed and value.startswith("../"):
            problems.append(f"{where}: path {value!r} leaves the checkout")
    return problems


class InvalidResult(ValueError):
    pass


def check_result(doc, committed: bool = False) -> dict:
    """`doc` if it is valid; else an `InvalidResult` listing every problem."""
    problems = validate_result(doc, committed)
    if problems:
        raise InvalidResult(f"invalid {SCHEMA} document:\n  " + "\n  ".join(problems))
    return doc


def _relative_paths(value):
    if isinstance(value, Path):
        return repo_relative(value)
    if isinstance(value, str):
        return repo_relative(value) if ABSOLUTE_PATH.match(value) else value
    if isinstance(value, dict):
        return {key: _relative_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_relative_paths(item) for item in value]
    return value


def write_result(path: str | Path, *, experiment: str, profile: str, model: str, config_hash: str,
                 metrics: list[dict], **fields) -> dict:
    """Stamp the schema, commit and creation time, make every absolute path repository-relative, validate, and write
    `path` atomically; returns the document. `fields`: the optional envelope fields (table, run_dir, config,
    provenance, details) and any experiment-specific ones."""
    doc = _relative_paths({"schema": SCHEMA, "experiment": experiment, "profile": profile, "model": model,
                           "commit": git_commit(), "config_hash": config_hash,
                           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), **fields,
                           "metrics": metrics})
    write_json_atomic(path, check_result(doc))
    return doc


HELDOUT_TITLES = {"new_tasks": "(a) new tasks, pool envs", "new_envs": "(b) unseen envs"}
"""The held-out sets (`coevolve_lib.engine.heldout`) by name, and how tables name them."""


def heldout_eval_set(name: str, key: str) -> str:
    """The `eval_set` of numbers measured on held-out set `name` (built with key `key`): `heldout/<name>/<key>`."""
    return f"heldout/{name}/{key}"


def heldout_set_name(eval_set: str) -> str | None:
    """The held-out set an `eval_set` names (`new_tasks`, `new_envs`), or None for any other evaluation set."""
    parts = eval_set.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == "heldout" and parts[1] in HELDOUT_TITLES else None


def headline_row(doc: dict) -> dict:
    """An evaluation's own metric: its first row (BFCL's success rate; AppWorld's TGC, before its SGC)."""
    return doc["metrics"][0]


def metric_row(doc: dict, metric: str | None = None) -> dict:
    """The document's one row (of `metric` when given); an error when there is not exactly one."""
    rows = [r for r in doc["metrics"] if metric is None or r["metric"] == metric]
    if len(rows) != 1:
        raise ValueError(f"{len(rows)} rows of metric {metric!r} in a {doc.get('experiment')} result, expected one")
    return rows[0]
