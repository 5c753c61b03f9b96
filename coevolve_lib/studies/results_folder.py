"""The results/v2 files of one profile's results folder that the paper's tables read (`studies.tables`), each checked
against the current configuration: a missing one is `MissingResults` (naming the notebook that writes it) unless
allowed, one whose runs another configuration made is always `StaleResults`."""

from __future__ import annotations

import json
from pathlib import Path

from coevolve_lib.core.paths import repo_relative
from coevolve_lib.profiles import appworld_counterpart, run_config
from coevolve_lib.studies.catalog import STUDIES
from coevolve_lib.studies.run import Study, Variant, results_file, run_hash, settings_hash, variant_run


class MissingResults(RuntimeError):
    pass


class StaleResults(RuntimeError):
    pass


class Results:
    """The results/v2 files of one profile's results folder, checked against the current configuration."""

    def __init__(self, results_dir: str | Path, profile: str, seeds: list[int], allow_missing: bool = False,
                 study_seeds: dict[str, list[int]] | None = None):
        """`seeds`: the training seeds of every study's results; `study_seeds`: other seeds for some studies by name
        (the tiny profile: Tables 2-3 over 3 seeds, the ablations over one)."""
        self.dir, self.profile, self.seeds, self.allow_missing = Path(results_dir), profile, list(seeds), allow_missing
        self.study_seeds = {name: list(s) for name, s in (study_seeds or {}).items()}
        self.missing: list[str] = []

    def _absent(self, what: str, notebook: str) -> None:
        message = f"{what} not found in {self.dir}: run {notebook} (or python -m coevolve_lib reproduce)"
        if not self.allow_missing:
            raise MissingResults(message)
        self.missing.append(message)

    def study(self, study: Study, notebook: str) -> dict | None:
        """The study's results document for its seeds (any training length) that the current configuration made.
        Files of an older configuration beside it (another training length) are passed over; with none current,
        the first one's StaleResults says why."""
        seeds = self.study_seeds.get(study.name, self.seeds)
        pattern = results_file(self.dir, study.name, self.profile, seeds, 0).name.replace("_steps0", "_steps*")
        files = sorted((self.dir / study.name).glob(pattern))
        if not files:
            self._absent(f"{study.name} results for seeds {seeds}", notebook)
            return None
        current, stale = [], []
        for path in files:
            doc = json.loads(path.read_text())
            try:
                check_current(doc, study if study.name in STUDIES else None)
                current.append((path, doc))
            except StaleResults as error:
                stale.append(error)
        if len(current) > 1:
            raise StaleResults(f"several current {study.name} results for seeds {seeds} "
                               f"({[path.name for path, _ in current]}): keep one")
        if not current:
            raise stale[0]
        return current[0][1]

    def _read(self, path: Path, what: str, notebook: str) -> dict | None:
        """The results document at `path`, or None (after `_absent`) when there is none."""
        if not path.exists():
            self._absent(f"{what} {path.name}", notebook)
            return None
        return json.loads(path.read_text())

    def similarity(self, expected_run: Path) -> dict | None:
        """Notebook 11's measurement, checked to be of `expected_run` (the current CoEvolve seed-0 run)."""
        doc = self._read(self.dir / "similarity" / f"{self.profile}.json", "similarity result",
                         "notebooks/11_task_similarity.ipynb")
        if doc is not None and doc["run_dir"] != repo_relative(expected_run):
            raise StaleResults(f"the similarity result measured {doc['run_dir']}, not the current CoEvolve run "
                               f"{repo_relative(expected_run)}: run notebook 11 again")
        return doc

    def appworld(self) -> dict | None:
        """Notebook 14's CoEvolve run on the profile's AppWorld counterpart: TGC / SGC before and after training,
        checked to be of its current configuration; None when the profile has no counterpart. A missing one is
        allowed and counted, as the AppWorld studies' are (`on_appworld`): its cells stand beside the BFCL tables
        (`make test` runs notebook 20 without notebooks 14-15, which `make test-paper` runs)."""
        appworld = self.on_appworld()
        if appworld is None:
            return None
        doc = appworld._read(self.dir / "appworld" / f"coevolve_{appworld.profile}.json", "AppWorld training result",
                             "notebooks/14_appworld_coevolve.ipynb")
        if doc is not None and doc["config_hash"] != run_hash(run_config(doc["profile"])):
            raise StaleResults(f"the AppWorld training result ran another configuration of {doc['profile']} (config "
                               f"hash {doc['config_hash']}): run notebook 14 again")
        return doc

    def on_appworld(self) -> Results | None:
        """The results of the profile's AppWorld counterpart (`<profile>-appworld`: notebook 15's studies) in the same
        folder, for the same seeds; None when the profile has no counterpart. Its missing files are allowed, and
        counted with this one's: they are rows beside the BFCL tables, and notebook 15 runs the studies it is asked
        for (by default one; `make reproduce`: all, and a failed notebook stops it). A stale one is still an error."""
        counterpart = appworld_counterpart(self.profile)
        if counterpart is None:
            return None
        appworld = Results(self.dir, counterpart, self.seeds, allow_missing=True)
        appworld.missing = self.missing
        return appworld

    def training(self, notebook: str = "notebooks/06_coevolve_training.ipynb") -> dict | None:
        """The training result of Table 7 (notebook 06's run; an AppWorld profile's: notebook 15's CoEvolve run)."""
        return self._read(self.dir / "training" / f"train_{self.profile}.json", "training result", notebook)


def check_current(doc: dict, study: Study | None = None) -> None:
    """StaleResults unless every row's run has the config hash the current profile gives it (and, for a fixed study,
    the variants are the current ones)."""
    config, profile = doc["config"], doc["profile"]
    variants = {v["name"]: Variant(v["name"], tuple(v["overrides"]), v["paper_row"]) for v in config["variants"]}
    if study is not None and tuple(variants.values()) != study.variants:
        raise StaleResults(f"{doc['experiment']} results ran variants {list(variants)} with other settings than the "
                           "current study: run the notebook again")
    hashes = {}
    for row in doc["metrics"]:
        variant = variants.get(row["variant"]) or next(iter(variants.values()))  # zero-shot: the first run's start
        key = (variant.name, row["seed"])
        if key not in hashes:
            hashes[key] = run_hash(variant_run(profile, config["overrides"], variant, row["seed"]))
        if row["config_hash"] != hashes[key]:
            raise StaleResults(f"{doc['experiment']} results: run {row['run_dir']} was made with another configuration "
                               f"of profile {profile} (config hash {row['config_hash']}, now {hashes[key]}): run the "
                               "notebook again")
    expected = settings_hash(profile, config["seeds"], config["overrides"],
                             Study(doc["experiment"], (), tuple(variants.values()), pass_k=config["pass_k"]))
    if doc["config_hash"] != expected:
        raise StaleResults(f"{doc['experiment']} results: settings hash {doc['config_hash']} != {expected}")
