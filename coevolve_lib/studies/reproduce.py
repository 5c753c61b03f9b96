"""The batch driver behind `python -m coevolve_lib reproduce` (coevolve_lib/cli/reproduce.py, whose help describes
the parameters, outputs, skips and resumes): the numbered notebooks in running order with the tables and figures each
makes (`EXPERIMENTS`), the parameters each gets for a profile (configs/reproduce.yaml), the training runs they need,
and the `Driver` that runs them with papermill, keeping a stamp per finished notebook."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import yaml

from coevolve_lib import profiles
from coevolve_lib.core.model_specs import BUILT_MODELS
from coevolve_lib.core.paths import FIGURES_DIR, REPO_ROOT, RESULTS_DIR, RUNS_DIR, shown_path
from coevolve_lib.core.records import write_json_atomic
from coevolve_lib.studies.catalog import explorers, study_named
from coevolve_lib.studies.notebook_runner import run_notebook
from coevolve_lib.studies.run import planned_runs as study_runs
from coevolve_lib.training.plan import plan
from coevolve_lib.training.processes import gpu_visible

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
SETTINGS_FILE = REPO_ROOT / "configs" / "reproduce.yaml"


@dataclass(frozen=True)
class Experiment:
    notebook: str
    """File name in notebooks/."""
    produces: tuple[str, ...]
    """The paper's tables and figures it makes (`--only` selects by these), e.g. ("table5", "table11")."""
    studies: tuple[str, ...] = ()
    """Studies (coevolve_lib/studies/catalog.py) whose runs it trains: `--list` shows them and their launch commands."""
    minutes: float = 1.0
    """Rough minutes on the tiny profile on 2 CPU cores: the time estimate before a first run has measured it."""
    on_appworld: bool = False
    """It runs on the profile's AppWorld counterpart (`profiles.appworld_counterpart`; its `appworld_profile`
    parameter), with the studies of its `studies` parameter; left out for a profile that has none."""


EXPERIMENTS = (
    Experiment("00_quickstart_bfcl_environment.ipynb", ("bfcl-checker",), minutes=1.0),
    Experiment("01_zero_shot_evaluation.ipynb", ("table1-zero-shot",), minutes=1.0),
    Experiment("02_initial_synthesis_d0.ipynb", ("d0",), minutes=0.5),
    Experiment("03_weakness_signals.ipynb", ("fig4",), minutes=1.6),
    Experiment("04_signal_guided_reexploration.ipynb", (), minutes=0.5),
    Experiment("05_abstraction_and_validation.ipynb", ("fig7",), minutes=1.0),
    Experiment("06_coevolve_training.ipynb", ("table7", "fig3"), minutes=3.5),
    Experiment("07_learning_and_comparison.ipynb", ("table2", "table3", "table8"), ("comparison",), minutes=17.5),
    Experiment("08_ablations_signals_and_validation.ipynb", ("table5", "table11"), ("signals", "validation"),
               minutes=6.0),
    Experiment("09_sensitivity_pool_size_and_frequency.ipynb", ("table4", "table14"), ("sensitivity",), minutes=4.5),
    Experiment("10_adaptive_baselines.ipynb", ("table10",), ("baselines",), minutes=4.5),
    Experiment("11_task_similarity.ipynb", ("table13", "table15", "fig5"), minutes=0.5),
    Experiment("12_explorer_models.ipynb", ("table12",), ("explorers",), minutes=0.5),
    Experiment("13_appworld.ipynb", ("appworld",), minutes=0.5),
    Experiment("14_appworld_coevolve.ipynb", ("appworld-coevolve",), minutes=0.6, on_appworld=True),
    Experiment("15_appworld_studies.ipynb", ("appworld-studies",), minutes=25.0, on_appworld=True),
    Experiment("20_paper_tables.ipynb", ("table1", "table6", "tables"), minutes=0.5),
)
"""In running order. The last one assembles `tables.md` from the results the others wrote."""
ASSEMBLY = EXPERIMENTS[-1]
EXPLORER_EXPERIMENT = next(e for e in EXPERIMENTS if "explorers" in e.studies)


def settings(profile: str) -> dict:
    """configs/reproduce.yaml's entry for `profile` ({} when it has none)."""
    data = yaml.safe_load(SETTINGS_FILE.read_text()) or {}
    return {} if profile.startswith("_") else data.get(profile) or {}


def notebook_defaults(notebook: str) -> dict:
    """The values of a notebook's `parameters` cell (literals: the kit's own notebooks, never model output)."""
    import papermill

    return {name: ast.literal_eval(p["default"]) for name, p in papermill.inspect_notebook(
        str(NOTEBOOKS_DIR / notebook)).items()}


def parameters(experiment: Experiment, profile: str, seeds: list[int] | None, allow_missing: bool) -> dict:
    """What the notebook runs with: `profile`, `seeds` (when it has them), configs/reproduce.yaml's values for it."""
    defaults = notebook_defaults(experiment.notebook)
    chosen = {"profile": profile}
    profile_settings = settings(profile)
    seeds = seeds if seeds is not None else profile_settings.get("seeds")
    if "seeds" in defaults and seeds is not None:
        chosen["seeds"] = list(seeds)
    chosen.update((profile_settings.get("notebooks") or {}).get(experiment.notebook.split("_")[0]) or {})
    if "allow_missing" in defaults:
        chosen["allow_missing"] = allow_missing
    unknown = sorted(set(chosen) - set(defaults) - {"profile"})
    if unknown:
        raise profiles.ConfigError(f"{SETTINGS_FILE.name}: {experiment.notebook} has no parameter(s) {unknown}; "
                                   f"valid: {', '.join(sorted(defaults))}")
    return chosen


def recorded_explorers(profile: str, values: dict | None = None) -> dict[str, tuple[str, str]]:
    """The Table 12 rows notebook 12 replays for `profile` (configs/reproduce.yaml's `explorer_recordings`): the
    paper's row -> (its explorer model, its recording). `values`: notebook 12's parameters when already read."""
    values = values if values is not None else parameters(EXPLORER_EXPERIMENT, profile, None, False)
    models, recordings = values.get("explorer_models") or {}, values.get("explorer_recordings") or {}
    return {row: (models.get(row, ""), recording) for row, recording in recordings.items()}


def planned_runs(experiment: Experiment, values: dict) -> list[dict]:
    """The training runs an experiment needs, with their folders, status and launch commands."""
    defaults = {**notebook_defaults(experiment.notebook), **values}
    profile, names = values["profile"], experiment.studies
    if experiment.on_appworld:  # the profile's AppWorld counterpart, the studies the notebook is given
        profile = profiles.appworld_profile(profile, defaults.get("appworld_profile"))
        names = defaults.get("studies", ())
    overrides = defaults.get("overrides", [])
    runs = []
    for name in names:
        if name == "explorers":
            study = explorers(defaults["explorer_models"], defaults["default_row"], defaults["explorer_recordings"])
        else:
            study = study_named(name, defaults.get("d0_sizes", ()), defaults.get("feedback_every", ()),
                                defaults.get("reflector", "policy"))
        runs += study_runs(study, profile, defaults.get("seeds", [0]), overrides)
    return runs


def select(only: list[str] | None) -> list[Experiment]:
    """The experiments that make any of `only` (all when None), and the assembly of the tables last."""
    if not only:
        return list(EXPERIMENTS)
    known = {item for e in EXPERIMENTS for item in e.produces}
    unknown = sorted(set(only) - known)
    if unknown:
        raise profiles.ConfigError(f"--only: unknown table(s)/figure(s) {unknown}; known: {', '.join(sorted(known))}")
    chosen = [e for e in EXPERIMENTS if set(e.produces) & set(only)]
    return chosen if ASSEMBLY in chosen else [*chosen, ASSEMBLY]


def trains_here(profile: str) -> bool:
    """Whether this machine can train the profile's policy: a GPU, or one of the small models built for CPU."""
    return profiles.run_config(profile).model in BUILT_MODELS or gpu_visible()


def _stamp_key(experiment: Experiment, values: dict) -> str:
    """What a finished notebook ran: its cells' source (not their outputs: committing an executed copy changes
    nothing) and its parameters."""
    cells = json.loads((NOTEBOOKS_DIR / experiment.notebook).read_text())["cells"]
    source = json.dumps([cell["source"] for cell in cells])
    return hashlib.sha256((source + json.dumps(values, sort_keys=True)).encode()).hexdigest()[:16]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


class Driver:
    """Runs the selected notebooks for one profile, keeping a stamp per finished notebook."""

    def __init__(self, profile: str, seeds: list[int] | None, only: list[str] | None, force: bool, quiet: bool):
        self.profile, self.force, self.quiet = profile, force, quiet
        self.experiments = [e for e in select(only) if not e.on_appworld or profiles.appworld_counterpart(profile)]
        self.train = trains_here(profile)
        allow_missing = bool(only) or not self.train  # a partial or plan-only pass assembles what exists
        self.values = {e.notebook: parameters(e, profile, seeds, allow_missing) for e in self.experiments}
        self.results_dir = RESULTS_DIR / profile
        self.figures_dir = FIGURES_DIR / profile
        self.out_dir = RUNS_DIR / "reproduce" / profile

    def stamp_path(self, experiment: Experiment) -> Path:
        return self.out_dir / f"{Path(experiment.notebook).stem}.done.json"

    def done(self, experiment: Experiment) -> bool:
        path = self.stamp_path(experiment)
        return (not self.force and path.exists() and (self.out_dir / experiment.notebook).exists()
                and json.loads(path.read_text())["key"] == _stamp_key(experiment, self.values[experiment.notebook]))

    def estimate(self, experiment: Experiment) -> float:
        """Seconds: the last measured run of this notebook for this profile, else the registry's tiny estimate."""
        path = self.stamp_path(experiment)
        return json.loads(path.read_text())["seconds"] if path.exists() else 60 * experiment.minutes

    def runnable(self) -> list[Experiment]:
        """Without a GPU for a paper profile, only the assembly runs (the others need the training runs)."""
        return self.experiments if self.train else [ASSEMBLY]

    def describe(self, with_commands: bool) -> str:
        lines = [f"profile {self.profile}: results -> {shown_path(self.results_dir)}, figures -> "
                 f"{shown_path(self.figures_dir)}, executed notebooks -> {shown_path(self.out_dir)}"]
        if not self.train:
            lines.append("no CUDA device here: the training runs below are launched on GPU nodes; this machine only "
                         "assembles the tables from the runs that exist")
        if with_commands:
            lines += self.vllm_recipes()
        for experiment in self.experiments:
            state = "done" if self.done(experiment) else "to run"
            lines.append(f"- {experiment.notebook} [{state}, ~{_minutes(self.estimate(experiment))}] makes "
                         f"{', '.join(experiment.produces) or '-'}; parameters {self.values[experiment.notebook]}")
            for run in planned_runs(experiment, self.values[experiment.notebook]):
                status = "finished" if run["finished"] else "not run"
                lines.append(f"    run {run['study']}/{run['variant']} seed {run['seed']} [{status}] "
                             f"{shown_path(run['folder'])}")
                if with_commands:
                    lines.append(f"      {run['command']}")
        return "\n".join(lines)

    def vllm_recipes(self) -> list[str]:
        """The profile's vLLM launch recipes (multi-GPU profiles), once: each run below takes them with its own
        --out and --set options."""
        commands = plan(profiles.run_config(self.profile), "<run folder>")["commands"]
        if "train_vllm_colocate" not in commands:
            return []
        lines = ["vLLM rollouts instead of transformers generate (docs/training.md, vLLM rollouts): a run below "
                 "takes these commands with its own --out and its --set options appended",
                 f"  colocate: {commands['train_vllm_colocate']}"]
        if "vllm_server" in commands:
            lines += [f"  server, started first: {commands['vllm_server']}",
                      f"  then: {commands['train_vllm_server']}"]
        return lines

    def run(self) -> int:
        os.environ["COEVOLVE_RESULTS_DIR"] = str(self.results_dir)  # the notebooks' kernels inherit these
        os.environ["COEVOLVE_FIGURES_DIR"] = str(self.figures_dir)
        todo = [e for e in self.runnable() if not self.done(e)]
        if todo and ASSEMBLY not in todo:  # new results: the tables are assembled again
            todo.append(ASSEMBLY)
        skipped = [e.notebook for e in self.runnable() if e not in todo]
        if skipped:
            print(f"complete, skipped: {', '.join(skipped)} (--force runs them again)")
        if not self.train:
            print(self.describe(with_commands=True))
        start = time.perf_counter()
        for index, experiment in enumerate(todo, 1):
            left = sum(self.estimate(e) for e in todo[index - 1:])
            print(f"[{index}/{len(todo)}] {experiment.notebook} ({', '.join(experiment.produces) or '-'}) at "
                  f"{datetime.now():%H:%M:%S}; {_minutes(time.perf_counter() - start)} so far, about "
                  f"{_minutes(left)} left", flush=True)
            began = time.perf_counter()
            values = self.values[experiment.notebook]
            run_notebook(NOTEBOOKS_DIR / experiment.notebook, self.out_dir / experiment.notebook, values,
                         progress=not self.quiet)
            write_json_atomic(self.stamp_path(experiment), {
                "notebook": experiment.notebook, "parameters": values, "key": _stamp_key(experiment, values),
                "seconds": round(time.perf_counter() - began, 1),
                "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        tables = shown_path(self.results_dir / "tables.md")
        print(f"done in {_minutes(time.perf_counter() - start)}: tables in {tables}")
        return 0
