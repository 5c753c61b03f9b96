"""What a study prints and draws beside its results file: the paper's column its tables show and where its learning
curves go (`python -m coevolve_lib compare`, coevolve_lib/cli/compare.py, and notebooks 07-10)."""

from __future__ import annotations

from pathlib import Path

from coevolve_lib.studies.run import Study, results_file

PAPER_COLUMN = "BFCL"
"""The paper's column every study table prints beside the kit's numbers (BFCL-v3 multi-turn base, Qwen3-4B)."""


def figure_file(figures_dir: str | Path, study: Study, profile: str, seeds: list[int], steps: int) -> Path:
    """Where a study's learning curves go (named like its results file)."""
    return results_file(figures_dir, study.name, profile, seeds, steps).with_suffix(".png")
