"""The paper's own numbers (Tables 1-16 of arXiv:2604.15840, copied as data), for tables that print them
beside what the kit measured."""

from __future__ import annotations

import json
import re
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


def title(table_id: str) -> str:
    """"table5" -> "Table 5"."""
    return table_id.replace("table", "Table ").replace("fig", "Fig. ")


def column(table_id: str, name: str) -> dict[str, str]:
    """Row label -> the paper's cell in column `name` of a table. A row's label is its first cell; in Table 4, whose
    first column names a group of rows ("Initial Data Size (N)", then blank cells), it is the group's symbol and the
    value, "N = 50", as Table 14 writes its rows."""
    table = tables()[table_id]
    index = table["columns"].index(name)
    grouped = table["columns"][:2] == ["Dimension", "Value"]
    cells, group = {}, ""
    for row in table["rows"]:
        group = row[0].split("(")[-1].rstrip(")") if grouped and row[0] else group
        cells[f"{group} = {row[1]}" if grouped else row[0]] = row[index]
    return cells


def cells(table_ids: tuple[str, ...], name: str) -> dict[str, str]:
    """Row label -> the paper's cell in column `name` of each of `table_ids` that has that column (Tables 4 and 14
    share a study, and only Table 4 has an AppWorld column); a ValueError when none has it."""
    having = [table_id for table_id in table_ids if name in tables()[table_id]["columns"]]
    if not having:
        raise ValueError(f"no column {name!r} in {', '.join(map(title, table_ids))}")
    return {label: cell for table_id in having for label, cell in column(table_id, name).items()}


def similarity_bin_means() -> dict[str, float]:
    """Table 13's caption: the mean similarity (%) of the low, medium and high bins."""
    caption = tables()["table13"]["caption"]
    return {name: float(re.search(rf"{name} ([0-9.]+)%", caption).group(1)) for name in ("low", "medium", "high")}
