"""The paper's own numbers (Tables 1-16 of arXiv:2604.15840, copied as data), for tables that print them
beside what the kit measured."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources


@cache
def tables() -> dict:
    """All tables: {"table1": {"caption", "columns", "rows"}, ...}; cells are the paper's text."""
    return json.loads(resources.files("coevolve_lib").joinpath("data/paper_tables.json").read_text())["tables"]


def cell_value(cell: str) -> float | None:
    """The number at the start of a cell such as "61.50 (↑48.00)"; None for empty or label cells."""
    head = cell.split(" ")[0].rstrip("%") if cell else ""
    try:
        return float(head)
    except ValueError:
        return None


def bfcl_zero_shot() -> dict[str, float]:
    """BFCL-v3 multi-turn base, zero-shot, for every model row of Table 1 (the backbones and references)."""
    table = tables()["table1"]
    column = table["columns"].index("BFCL-V3 Multi-turn")
    values = {}
    for row in table["rows"]:
        name, value = row[0], cell_value(row[column])
        if value is not None and not name.startswith("-w/"):
            values[name] = value
    return values
