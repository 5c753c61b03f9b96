"""The kit's side of a paper table (`KitTable`: measured rows, verdict, notes) and `tables.md`, the file that puts
every table beside the paper's, with an index of the figures the same results drew."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from coevolve_lib.core import paper
from coevolve_lib.core.paths import shown_path


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured markdown table (pandas' own needs the `tabulate` package)."""
    frame = frame.reset_index() if index else frame
    cell = lambda value: str(value).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |", "|" + " --- |" * len(frame.columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class KitTable:
    """The kit's rows for one or more of the paper's tables (Tables 4 and 14 share one study), with its verdict and
    notes (scale, what is not run and why)."""
    table_ids: tuple[str, ...]
    kit: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    verdict: str | None = None
    """One line of what this scale resolves against the paper (`studies.verdicts`), printed first under the table."""
    label: str = "Kit (measured)"
    """The heading of the kit's rows, e.g. "Kit on AppWorld (synthetic world) (measured)"."""
    also: list[KitTable] = field(default_factory=list)
    """More kit rows under the same paper tables, each with its own label, verdict and notes (the AppWorld studies'
    under the BFCL ones)."""

    def kit_markdown(self) -> list[str]:
        parts = [f"**{self.label}:**", "", markdown_table(self.kit), ""]
        return parts + [f"- {note}" for note in ([self.verdict] if self.verdict else []) + self.notes]

    def markdown(self) -> str:
        parts = []
        for table_id in self.table_ids:
            source = paper.tables()[table_id]
            parts += [f"## {paper.title(table_id)}. {source['caption']}", "", "**Paper:**", "",
                      markdown_table(pd.DataFrame(source["rows"], columns=source["columns"]), index=False), ""]
        parts += self.kit_markdown()
        for other in self.also:
            parts += ["", *other.kit_markdown()]
        return "\n".join(parts) + "\n"


def not_built(table_id: str, reason: str, verdict: str | None = None) -> KitTable:
    return KitTable((table_id,), pd.DataFrame([{"kit": reason}], index=pd.Index(["all rows"], name="row")),
                    verdict=verdict)


def header(profile: str, seeds: list[int], study_seeds: dict[str, list[int]], missing: int) -> str:
    """tables.md's opening: the profile, the seeds of every study (those with seeds of their own named), what is
    missing."""
    own = "".join(f"; {study}: seeds {list(study_seeds[study])}" for study in sorted(study_seeds))
    return (f"# The paper's tables beside the kit's (profile {profile}, seeds {list(seeds)}{own})\n\n"
            "Written by notebooks/20_paper_tables.ipynb from the results files in this folder; every kit row names "
            f"its scale, and under each table a verdict line says whether the kit reproduces the paper's direction, "
            f"contradicts it or cannot resolve it at this scale (`coevolve_lib/studies/verdicts.py`). Missing: "
            f"{missing}.")


FIGURES = {
    "zero_shot_bfcl": "the starting policy's BFCL success (notebook 01)",
    "d0_interaction_turns": "calls per task: BFCL's tasks and D_0's (notebook 02)",
    "signals": "weakness signals per step, by type (paper Fig. 4; notebook 03)",
    "interaction_turns": "calls per task of the pool's rounds (paper Fig. 7; notebook 05)",
    "training": "one CoEvolve run: reward, mixed groups, signals, pool size (notebook 06)",
    "training_curve": "that run's success on the held-out sets and D_0 over its steps (notebook 06)",
    "fig3_dynamics": "training dynamics (paper Fig. 3): the BFCL run's (notebook 20), the AppWorld run's (notebook 14)",
    "similarity": "synthesized tasks' similarity to the val tasks by round (paper Fig. 5; notebook 11)",
    "comparison": "learning curves of the comparison study, Tables 2-3 (notebook 07; `<profile>-appworld_*`: 15)",
    "signals/": "learning curves of the signal and validation ablations, Tables 5 and 11 (notebook 08; "
                "`<profile>-appworld_*`: the signal ablations, 15)",
    "validation": "learning curves of the validation ablation on AppWorld, Table 11 (notebook 15)",
    "sensitivity": "learning curves of the N and F study, Tables 4 and 14 (notebook 09; `<profile>-appworld_*`: 15)",
    "baselines": "learning curves of the baselines study, Table 10 (notebook 10; `<profile>-appworld_*`: 15)",
    "sweep": "learning curves of the GRPO recipe sweep (`sweep --sweep tiny-grpo`, docs/training.md)",
}
"""What each figure of `figures/<profile>/` shows, by its file's stem without the profile (`signals_tiny.png`) or by
its study folder (`comparison/...`; `signals/` for the folder, where the stem `signals` is notebook 03's)."""


def figure_caption(relative: Path) -> str | None:
    """The caption of a figure file by its path under `figures/<profile>/` (None: not in `FIGURES`)."""
    if len(relative.parts) > 1:
        folder = relative.parts[0]
        return FIGURES.get(f"{folder}/") or FIGURES.get(folder)
    return FIGURES.get(relative.stem.rsplit("_", 1)[0])


def figure_index(figures_dir: Path, tables_file: Path) -> str:
    """tables.md's last section: every PNG of `figures_dir`, linked relative to `tables_file`, with its caption."""
    found = sorted(Path(figures_dir).rglob("*.png"))
    lines = ["## Figures", "", f"Drawn from the same results, in `{shown_path(figures_dir)}` (PNG and PDF):", ""]
    for path in found:
        relative = path.relative_to(figures_dir)
        link = Path(os.path.relpath(path, tables_file.parent)).as_posix()
        lines.append(f"- [{relative.as_posix()}]({link}): {figure_caption(relative) or 'no caption'}")
    return "\n".join(lines if found else [*lines[:2], "No figure drawn yet."]) + "\n"


def write_markdown(tables: list[KitTable], path: str | Path, header: str,
                   figures_dir: str | Path | None = None) -> Path:
    """`tables.md`: every table, the paper's beside the kit's, then the index of `figures_dir`'s figures."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figures = "\n" + figure_index(Path(figures_dir), path) if figures_dir is not None else ""
    path.write_text(header + "\n\n" + "\n".join(t.markdown() for t in tables) + figures)
    return path
