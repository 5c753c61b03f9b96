"""Each table's verdict: one line saying whether the kit's runs reproduce the direction of the paper's claim,
contradict it, or cannot resolve it at this scale, computed from the measured rows, never from rendered cells.

- A claim compares two rows: "coevolve above static". For a study table its direction is the paper's own: the sign of
  the difference of the two rows' paper numbers (`paper_claims`), so the verdict tests what the paper reports.
- The measured side is the paired difference by seed and task with its bootstrap 95% CI (`report.paired_difference`)
  on the set the study ranks by. Reproduced: the CI excludes 0 on the paper's side; contradicted: it excludes 0 on the
  other side; unresolved: it includes 0. Bounds are read as printed (0.1 point), as the tables' own cells are.
- A table's line: "reproduces" when every claim is reproduced, "contradicts" when any is contradicted, "reproduces
  part" when some are and the rest are unresolved, else "cannot resolve"; then each claim with its number. Tables
  whose claim is not a difference of two rows (Table 7's cost, Table 15's level) state their own measured comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from coevolve_lib.core import paper
from coevolve_lib.studies.report import paired_difference, points, ranked_sets, set_title

PREFIX = "verdict at this scale: "


@dataclass(frozen=True)
class Finding:
    """One claim of the paper against what the kit measured."""
    claim: str
    """What the paper reports, e.g. "coevolve above static"."""
    outcome: str
    """"reproduced", "contradicted", "unresolved" or "not measured"."""
    evidence: str
    """The measured number behind the outcome, e.g. "+0.8 [-0.3, +1.9] on held-out (a) ..."."""

    def text(self) -> str:
        return f"{self.claim}: {self.evidence} ({self.outcome})"


def compared(results: list[dict], above: str, below: str, eval_set: str | None) -> Finding:
    """The claim "`above` above `below`" on `eval_set`, from the paired difference of their rows."""
    claim = f"{above} above {below}"
    difference = paired_difference(results, above, below, eval_set) if eval_set else None
    if difference is None:
        return Finding(claim, "not measured", "no paired rows")
    mean, low, high, seeds = difference
    low, high = round(100 * low, 1), round(100 * high, 1)  # as printed, so the line and the table agree
    outcome = "reproduced" if low > 0 else "contradicted" if high < 0 else "unresolved"
    return Finding(claim, outcome, f"{points(mean, low / 100, high / 100)} on {set_title(eval_set)}, "
                                   f"{seeds} seed(s)")


def ranked(doc: dict) -> str | None:
    """The evaluation set a study ranks by (its first held-out set, or the BFCL split)."""
    sets = ranked_sets(doc["metrics"], doc["config"].get("rank_by", "new_tasks"))
    return sets[0] if sets else None


def paper_claims(doc: dict, table_ids: tuple[str, ...], pairs: list[tuple[str, str]],
                 column: str = "BFCL") -> list[Finding]:
    """For each (variant, reference) of `pairs` whose rows both have a paper number in `column` of `table_ids`: the
    claim in the paper's direction (the row with the higher number above the other), tested on the ranked set."""
    cells = {label: paper.cell_value(cell) for label, cell in paper.cells(table_ids, column).items()}
    paper_row = {r["variant"]: r["paper_row"] for r in doc["metrics"]}
    eval_set, findings = ranked(doc), []
    for variant, reference in pairs:
        mine, theirs = cells.get(paper_row.get(variant)), cells.get(paper_row.get(reference))
        if mine is None or theirs is None or mine == theirs:
            continue
        above, below = (variant, reference) if mine > theirs else (reference, variant)
        findings.append(compared(doc["metrics"], above, below, eval_set))
    return findings


def line(findings: list[Finding], cause: str = "") -> str:
    """The table's verdict from its findings, with `cause` (what the kit knows of why) after them."""
    outcomes = {f.outcome for f in findings} - {"not measured"}
    if not outcomes:
        head = "cannot resolve (not measured)"
    elif "contradicted" in outcomes:
        head = "contradicts the paper"
    elif outcomes == {"reproduced"}:
        head = "reproduces the paper's direction"
    elif "reproduced" in outcomes:
        head = "reproduces part of the paper's direction, the rest within noise"
    else:
        head = "cannot resolve the paper's direction (every paired 95% CI includes 0)"
    claims = "; ".join(f.text() for f in findings)
    return PREFIX + head + (f": {claims}" if claims else "") + (f". {cause}" if cause else "")


def unresolvable(reason: str) -> str:
    """The verdict of a table the kit has no runs for."""
    return f"{PREFIX}cannot resolve: {reason}"


def cost_finding(measured_ratio: float, paper_ratio: float) -> Finding:
    """Table 7's claim "minimal extra compute": the feedback rounds' share of the run's time at most the paper's."""
    outcome = "reproduced" if measured_ratio <= paper_ratio else "contradicted"
    return Finding(f"feedback time at most the paper's {paper_ratio:g}% of the run", outcome,
                   f"{measured_ratio:g}% measured")


def level_finding(name: str, measured: list[float], paper_values: list[float]) -> Finding:
    """A value the paper reports per step (Table 15) against the range of the paper's own values."""
    low, high = min(paper_values), max(paper_values)
    inside = all(low <= value <= high for value in measured)
    span = f"{min(measured):g}-{max(measured):g}%" if len(measured) > 1 else f"{measured[0]:g}%"
    return Finding(f"{name} within the paper's range {low:g}-{high:g}%", "reproduced" if inside else "contradicted",
                   f"{span} over {len(measured)} round(s)")
