"""A study: training variants of one profile (the paper's comparisons and ablations), each one run of the CoEvolve loop
(`training.loop.train`), measured the same way.

A variant is a name and the overrides that make it (e.g. `no_rare`: `data_engine.signals.enabled=[forgetting,
boundary]`). A run's folder is named by the hash of its whole resolved config, `runs/studies/<profile>/
<pool_updates>_seed<k>_<hash>/`, so two studies that need the same run share it (Table 2's CoEvolve run is Table 5's
reference), a finished run is reused and a killed one resumes.

Each run is measured on the profile's held-out sets (greedy success from the run's last evaluation, and optionally
pass@k from k samples per task on the set it ranks by) and on the BFCL val split (the paper's metric); the starting
policy ("zero-shot") is read off the first variant's step-0 evaluation. The rows are results/v2 metric rows
(coevolve_lib/core/results.py) that carry the scale they were measured at (profile, model, steps, tasks x K, seed) and
the run's config hash, written to `results/<study>/<profile>_seeds<..>_steps<n>.json`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import multiprocessing
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tqdm.auto import tqdm

from coevolve_lib import profiles
from coevolve_lib.core.config import RunConfig, run_identity
from coevolve_lib.core.models import HFChatModel
from coevolve_lib.core.paths import RESULTS_DIR, RUNS_DIR, profile_label, repo_relative
from coevolve_lib.core.records import config_hash, file_sha256, read_jsonl, write_json_atomic
from coevolve_lib.core.results import headline_row, heldout_eval_set, write_result
from coevolve_lib.engine.data_engine import DataEngine, EmptyPool
from coevolve_lib.engine.feedback import round_counts
from coevolve_lib.rollout.agent import RolloutPhase, rollout_phase
from coevolve_lib.rollout.evaluation import pass_at_k, task_outcomes
from coevolve_lib.training.loop import train
from coevolve_lib.training.plan import flatten_overrides, plan

ZERO_SHOT = "zero_shot"
D0_EVAL_SET = "pool/d0"
"""The eval_set of the fixed D_0 sample evaluated during training (docs/records.md)."""
SHARED_STARTS = "shared_starts"
"""Folder beside the runs where runs that start alike share D_0 and their step-0 evaluation (`training.loop.train`)."""


@dataclass(frozen=True)
class Variant:
    name: str
    """Row key, e.g. `coevolve` or `no_rare`."""
    overrides: tuple[str, ...] = ()
    """`section.field=value` strings applied on top of the profile and the study's own overrides."""
    paper_row: str = ""
    """The paper's row this variant reproduces (its table's first cell), for the tables beside the paper."""


@dataclass(frozen=True)
class Study:
    name: str
    """Names the results file and the `experiment` of its rows."""
    tables: tuple[str, ...]
    """The paper's tables (and figures) the study fills, e.g. ("table5",)."""
    variants: tuple[Variant, ...]
    """The runs, in row order; the first one's step-0 evaluation is the zero-shot row."""
    zero_shot: str = ""
    """The paper's row for the starting policy (no training), e.g. "Zero-shot (Qwen3-4B)"; "": no zero-shot row."""
    pass_k: int = 0
    """k of pass@k on the held-out set (k sampled episodes per task); 0: greedy success only."""


def variant_run(profile: str, overrides: list[str], variant: Variant, seed: int) -> RunConfig:
    """The run config of one variant and seed: the profile, the study's overrides, the variant's, the seed."""
    return profiles.run_config(profile, [*overrides, *variant.overrides, f"training.seed={seed}"])


def run_hash(run: RunConfig) -> str:
    """The hash of a run's whole resolved config (`run_identity`): equal hashes, the same run."""
    return config_hash(run_identity(run))


def run_folder(runs_dir: str | Path, run: RunConfig) -> Path:
    """Where a run lives: named by its config, so every study that needs it finds it."""
    return Path(runs_dir) / f"{run.training.pool_updates}_seed{run.training.seed}_{run_hash(run)}"


def default_runs_dir(profile: str) -> Path:
    return RUNS_DIR / "studies" / profile_label(profile)


def results_file(results_dir: str | Path, study: str, profile: str, seeds: list[int], steps: int) -> Path:
    """Where a study's rows go: one file per study, profile, seed set and training length."""
    return Path(results_dir) / study / f"{profile_label(profile)}_seeds{'-'.join(map(str, seeds))}_steps{steps}.json"


def settings_hash(profile: str, seeds: list[int], overrides: list[str], study: Study) -> str:
    """The config hash of a study's results file: what it was asked to run (its runs' hashes are on its rows)."""
    return config_hash({"profile": profile, "seeds": list(seeds), "overrides": list(overrides),
                        "variants": [asdict(v) for v in study.variants], "pass_k": study.pass_k})


def finished(folder: Path, max_steps: int) -> bool:
    summary = folder / "summary.json"
    return summary.exists() and json.loads(summary.read_text()).get("steps") == max_steps


def planned_runs(study: Study, profile: str, seeds: list[int], overrides: list[str] = (),
                 runs_dir: str | Path | None = None) -> list[dict]:
    """Every run the study needs: variant, seed, config, folder, whether it is finished, and its launch command (the
    profile's: `accelerate launch` for multi-GPU profiles)."""
    runs_dir = Path(runs_dir or default_runs_dir(profile))
    planned = []
    for seed in seeds:
        for variant in study.variants:
            run = variant_run(profile, list(overrides), variant, seed)
            folder = run_folder(runs_dir, run)
            settings = [*overrides, *variant.overrides, f"training.seed={seed}"]
            command = plan(run, folder, settings)["commands"]["train"]
            planned.append({"study": study.name, "variant": variant.name, "seed": seed, "run": run, "folder": folder,
                            "finished": finished(folder, run.training.max_steps), "command": command})
    return planned


def _train_job(run: RunConfig, folder: Path) -> None:
    """One run of `train_in_parallel`, in its own process: one torch thread, its output in the run's `train.log`."""
    os.environ["COEVOLVE_MAX_TORCH_THREADS"] = "1"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.log", "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        train(run, folder, progress=False, shared_starts=folder.parent / SHARED_STARTS)


def train_in_parallel(planned: list[dict], jobs: int, progress: bool = True) -> None:
    """Train the unfinished runs of `planned`, `jobs` at a time, each in its own process on one torch thread (CPU
    profiles on a multi-core machine: the tiny model's small matrices use two cores better as two runs than as two
    threads of one). What the runs share is built here first (warm start, held-out sets), so no two processes build it
    at once; a run that fails stops the study with its log's last lines."""
    todo = [p for p in planned if not p["finished"]]
    if not todo:
        return
    first = DataEngine(todo[0]["run"].data_engine, todo[0]["folder"], todo[0]["run"].evaluation.environment_name)
    first.policy(progress=progress)
    first.heldout_sets()
    first.close()
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch state shared with this one
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {pool.submit(_train_job, p["run"], p["folder"]): p for p in todo}
        bar = tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc=f"runs ({jobs} at a time)",
                   disable=not progress)
        for future in bar:
            planned_run = futures[future]
            try:
                future.result()
            except EmptyPool:  # an outcome, not a failure: run_study records it (D_0's report is on disk)
                pass
            except Exception as error:
                log = planned_run["folder"] / "train.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                raise RuntimeError(f"run {planned_run['variant']} seed {planned_run['seed']} failed ({error}); "
                                   f"{log}:\n{tail}") from error
            bar.set_postfix_str(f"{planned_run['variant']} seed {planned_run['seed']} done")


def train_studies(studies: list[Study], profile: str, seeds: list[int] = (0,), overrides: list[str] | dict = (),
                  jobs: int = 1, progress: bool = True, runs_dir: str | Path | None = None) -> list[dict]:
    """Train every run several studies need, each once (a run two studies share, e.g. the CoEvolve reference, has one
    folder): `jobs` > 1 at a time in processes of their own (a core never waits for a study's last run while another
    study's runs are left), one: in turn in this process. `run_study` then measures each study from the finished runs
    (and records a run whose D_0 held no task). Returns the runs, in order."""
    planned = {}
    for study in studies:
        for run in planned_runs(study, profile, list(seeds), flatten_overrides(overrides), runs_dir):
            planned.setdefault(run["folder"], run)
    runs = list(planned.values())
    if jobs > 1:
        train_in_parallel(runs, jobs, progress)
        return runs
    for run in runs:
        if not run["finished"]:
            with contextlib.suppress(EmptyPool):  # an outcome, not a failure: run_study records it
                train(run["run"], run["folder"], progress=progress,
                      shared_starts=run["folder"].parent / SHARED_STARTS)
    return runs


def run_study(study: Study, profile: str, seeds: list[int] = (0,), overrides: list[str] | dict = (),
              runs_dir: str | Path | None = None, results_path: str | Path | None = None,
              progress: bool = True, jobs: int = 1) -> list[dict]:
    """Train (or reuse) every variant for every seed and measure it; returns the metric rows, also written to
    `results_path` (default `results_file(RESULTS_DIR, ...)`). `jobs` > 1 trains that many runs at once
    (`train_in_parallel`; single-process CPU profiles)."""
    overrides = flatten_overrides(overrides)
    rows, not_trained = [], []
    plans = planned_runs(study, profile, seeds, overrides, runs_dir)
    if jobs > 1:
        train_in_parallel(plans, jobs, progress)
    for planned in plans:
        run, folder = planned["run"], planned["folder"]
        if not finished(folder, run.training.max_steps):
            try:
                train(run, folder, progress=progress, shared_starts=folder.parent / SHARED_STARTS)
            except EmptyPool as empty:  # e.g. an explorer LLM that wrote no valid call: what it did is the result
                not_trained.append(untrained(planned, empty))
                continue
        variant = next(v for v in study.variants if v.name == planned["variant"])
        rows += measure(study, run, variant, planned["seed"], folder)
        if study.zero_shot and variant == study.variants[0]:
            rows += measure(study, run, Variant(ZERO_SHOT, paper_row=study.zero_shot), planned["seed"], folder,
                            sampled_dir=folder.parent / ZERO_SHOT)
    first = variant_run(profile, overrides, study.variants[0], seeds[0])
    steps = first.training.max_steps
    settings = {"profile": profile, "seeds": list(seeds), "overrides": overrides, "pass_k": study.pass_k,
                "variants": [asdict(v) for v in study.variants], "rank_by": first.data_engine.heldout.rank_by}
    write_result(Path(results_path or results_file(RESULTS_DIR, study.name, profile, list(seeds), steps)),
                 experiment=study.name, profile=profile, model=rows[0]["model"] if rows else first.model,
                 config_hash=settings_hash(profile, seeds, overrides, study), table=",".join(study.tables),
                 run_dir=repo_relative(runs_dir or default_runs_dir(profile)), config=settings, metrics=rows,
                 details={"not_trained": not_trained})
    return rows


def untrained(planned: dict, empty: EmptyPool) -> dict:
    """A study run that could not train, as its results file keeps it: the variant, the seed, why, and what its D_0
    round did (`round_counts`)."""
    return {"variant": planned["variant"], "seed": planned["seed"], "reason": str(empty),
            "d0": round_counts(empty.report)}


def _sampled_outcomes(folder: Path, model_path: str, tasks: list[dict], rollout: RolloutPhase, samples: int,
                      seed: int, environment) -> dict[str, list[int]]:
    """K sampled episodes per held-out task of the model at `model_path`, cached in `folder`."""
    path = folder / f"heldout_sampled_k{samples}_seed{seed}.json"
    if path.exists() and json.loads(path.read_text())["model"] == repo_relative(model_path):
        return json.loads(path.read_text())["outcomes"]
    sampled = replace(rollout, generation=replace(rollout.generation, seed=seed))
    outcomes = task_outcomes(HFChatModel(model_path), tasks, sampled, environment, samples=samples)
    write_json_atomic(path, {"model": repo_relative(model_path), "samples": samples, "seed": seed,
                             "outcomes": outcomes})
    return outcomes


def run_fingerprint(run: RunConfig, engine: DataEngine, folder: Path, model_path: str | Path,
                    trained: bool = True) -> dict:
    """What tells two runs apart once they are done: the size of the D_0 they trained on and the sha256 of the weights
    they ended with (two variants with equal weights on every seed were the same run: a setting the world gives no
    room to act: `report.study_table` says so in the row); for a trained run also the size and the sha256 of its
    final pool (sorted task ids) and, per feedback round, the % of its rollouts each signal type flagged
    (`signal_shares`)."""
    weights = Path(model_path) / "model.safetensors"
    out = {"d0_tasks": sum(task["pool_version"] == 0 for task in engine.pool.tasks),
           "weights_sha256": file_sha256(weights)[:16] if weights.exists() else None}
    if trained:
        ids = sorted(task["task_id"] for task in engine.pool.tasks)
        out |= {"pool_tasks": len(ids), "pool_sha256": config_hash(ids),
                "signal_shares": signal_shares(folder / "metrics.jsonl", run.training.feedback_every)}
    return out


def signal_shares(metrics: Path, feedback_every: int) -> dict[str, list[float]]:
    """Per signal type, the % of the training rollouts it flagged in each window of `feedback_every` steps."""
    steps = [row for row in read_jsonl(metrics) if "train/episodes" in row]
    types = sorted({key.removeprefix("signals/") for row in steps for key in row if key.startswith("signals/")})
    windows: dict[int, list[dict]] = {}
    for row in steps:
        windows.setdefault((row["step"] - 1) // feedback_every, []).append(row)
    return {kind: [round(100 * sum(r.get(f"signals/{kind}", 0) for r in rows)
                         / max(sum(r["train/episodes"] for r in rows), 1), 1) for _, rows in sorted(windows.items())]
            for kind in types}


def _row(study: Study, run: RunConfig, variant: Variant, seed: int, metric: str, eval_set: str, k: int,
         temperature: float, per_task: dict[str, float], folder: Path, model: str, trained: dict) -> dict:
    values = list(per_task.values())
    return {"table": ",".join(study.tables), "variant": variant.name, "paper_row": variant.paper_row,
            "benchmark": run.evaluation.environment_name, "eval_set": eval_set,
            "metric": metric, "k": k, "temperature": temperature, "seed": seed, "n": len(values),
            "value": round(100.0 * sum(values) / len(values), 2) if values else None,
            "profile": run.profile, "model": run.model,
            "steps": 0 if variant.name == ZERO_SHOT else run.training.max_steps,
            "tasks_per_step": run.training.tasks_per_step, "group_size": run.training.group_size,
            "config_hash": run_hash(run), "run_dir": repo_relative(folder), "model_path": repo_relative(model),
            **trained, "per_task": per_task}


def measure(study: Study, run: RunConfig, variant: Variant, seed: int, folder: Path,
            sampled_dir: Path | None = None) -> list[dict]:
    """Greedy success on each held-out set (with `Study.pass_k`, also pass@k on the set the profile ranks by), and BFCL
    val success, of a run's final policy (or, for the zero-shot variant, of the policy it started from: the run's
    step-0 evaluation). The starting policy is the same for every seed, so its samples are drawn once (sampling seed
    0, cached in `sampled_dir`)."""
    zero_shot = variant.name == ZERO_SHOT
    step = 0 if zero_shot else run.training.max_steps
    evaluation = json.loads((folder / "eval" / f"step_{step:05d}.json").read_text())
    engine = DataEngine(run.data_engine, folder, run.evaluation.environment_name)
    model_path = engine.policy() if zero_shot else str(folder / "final")
    trained = run_fingerprint(run, engine, folder, model_path, trained=not zero_shot)
    out = []
    for name, (key, tasks) in engine.heldout_sets().items():  # the paper profiles have none
        eval_set = heldout_eval_set(name, key)
        greedy = {t: float(o[0]) for t, o in evaluation["heldout_outcomes"][name].items()}
        out.append(_row(study, run, variant, seed, "greedy_success", eval_set, 1, 0.0, greedy, folder, model_path,
                        trained))
        if study.pass_k and name == run.data_engine.heldout.rank_by:
            rollout = rollout_phase(run.rollout, token_level=True,
                                     max_completion_tokens=run.training.max_completion_tokens)
            sampled = _sampled_outcomes(sampled_dir or folder / "eval", model_path, tasks, rollout, study.pass_k,
                                        0 if zero_shot else seed, engine.environment)
            passed = {t: pass_at_k(len(o), sum(o), study.pass_k) for t, o in sampled.items()}
            mean = {t: sum(o) / len(o) for t, o in sampled.items()}
            temperature = run.rollout.temperature
            out += [_row(study, run, variant, seed, f"pass@{study.pass_k}", eval_set, study.pass_k, temperature,
                         passed, folder, model_path, trained),
                    _row(study, run, variant, seed, "sampled_success", eval_set, 1, temperature, mean, folder,
                         model_path, trained)]
    if evaluation.get("d0_outcomes"):  # the fixed D_0 sample: tasks the runs train on (every variant's pool holds them)
        d0 = {t: float(o[0]) for t, o in evaluation["d0_outcomes"].items()}
        out.append(_row(study, run, variant, seed, "greedy_success", D0_EVAL_SET, 1, 0.0, d0, folder, model_path,
                        trained))
    val = folder / "eval" / f"val_step_{step:05d}.json"
    if val.exists():
        benchmark_row = headline_row(json.loads(val.read_text()))
        per_task = {t["task_id"]: float(t["success"]) for t in benchmark_row["per_task"]}
        out.append(_row(study, run, variant, seed, "greedy_success", benchmark_row["eval_set"], 1, 0.0, per_task,
                        folder, model_path, trained))
    engine.close()
    return out


def run_summaries(study: Study, profile: str, seeds: list[int], overrides: list[str] = (),
                  runs_dir: str | Path | None = None) -> dict[str, list[dict]]:
    """Variant -> the summary.json of each seed's run (in `seeds` order); runs not trained yet are left out."""
    summaries: dict[str, list[dict]] = {}
    for planned in planned_runs(study, profile, seeds, overrides, runs_dir):
        path = planned["folder"] / "summary.json"
        if path.exists():
            summaries.setdefault(planned["variant"], []).append(json.loads(path.read_text()))
    return summaries
