"""The paper's Tables 2-3 at a profile's scale: the starting policy (zero-shot) vs GRPO on the static D_0 vs GRPO with
random exploration vs full CoEvolve, with the same steps and rollouts each, over several seeds.

    python -m coevolve_lib compare --profile tiny --seeds 0 1 2 [--set training.max_steps=20]

Each variant is one training run (`train.train`) in `<out>/<variant>_seed<k>/`, so a finished run is reused and a
killed one resumes: a repeated command takes seconds. The variants differ only in `training.pool_updates`:

    static    "+ Synthetic Data"       GRPO on the fixed D_0 (the paper's GRPO baseline)
    random    "+ Random Exploration"   every F steps, randomly drawn pool tasks re-explored unguided, no signals
    coevolve  "+ Feedback"             every F steps, signal-guided re-exploration (the full method)

Measured on the profile's held-out set (val-split environments, never trained on or explored from): greedy success
and pass@k (k samples at the rollout temperature), per seed, with bootstrap 95% confidence intervals over seeds and
tasks; the BFCL val split (the paper's metric) is measured too, on the profile's evaluation limit. The results are
the metric rows (`eval_set` names the set) of a results/v2 document (coevolve_lib/results.py), written to
`results/comparison/<profile>_seeds<..>_steps<n>.json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

from coevolve_lib import profiles
from coevolve_lib.config import RunConfig
from coevolve_lib.agent import RolloutConfig
from coevolve_lib.engine import DataEngine
from coevolve_lib.evaluate import pass_at_k, task_outcomes
from coevolve_lib.models import HFChatModel
from coevolve_lib.paths import FIGURES_DIR, RESULTS_DIR, RUNS_DIR, repo_relative
from coevolve_lib.records import config_hash, write_json_atomic
from coevolve_lib.results import metric_row, write_result
from coevolve_lib.agent import rollout_config
from coevolve_lib.train import train
from coevolve_lib.train_cli import flatten_overrides

VARIANTS = {"static": "none", "random": "random", "coevolve": "signals"}
"""Variant name -> `training.pool_updates`."""
PAPER_ROWS = {"zero_shot": "Zero-shot (Qwen3-4B)", "static": "+ Synthetic Data", "random": "+ Random Exploration",
              "coevolve": "+ Feedback"}
"""Variant -> its row in the paper's Table 3 (Qwen3-4B; Table 2's zero-shot / GRPO / CoEvolve are the same runs)."""


def run_folder(out_dir: Path, variant: str, seed: int) -> Path:
    return Path(out_dir) / f"{variant}_seed{seed}"


def results_file(results_dir: str | Path, profile: str, seeds: list[int], steps: int) -> Path:
    """Where a comparison's records go: one file per profile, seed set and training length."""
    return Path(results_dir) / "comparison" / f"{profile}_seeds{'-'.join(map(str, seeds))}_steps{steps}.json"


def variant_run(profile: str, overrides: list[str], variant: str, seed: int) -> RunConfig:
    """The run config of one variant and seed: the profile with the overrides, the seed and the variant's pool updates."""
    return profiles.run_config(profile, list(overrides) + [f"training.seed={seed}",
                                                            f"training.pool_updates={VARIANTS[variant]}"])


def run_hash(run: RunConfig) -> str:
    """The config hash of a training run (its training and rollout sections), as every results file of the run
    records it."""
    return config_hash({"training": asdict(run.training), "rollout": asdict(run.rollout)})


def figure_file(figures_dir: str | Path, profile: str, seeds: list[int], steps: int) -> Path:
    """Where a comparison's learning curves go (named like its results file)."""
    return results_file(figures_dir, profile, seeds, steps).with_suffix(".png")


def run_summaries(out_dir: str | Path, seeds: list[int]) -> dict[str, list[dict]]:
    """Variant -> the summary.json of each seed's run (in `seeds` order)."""
    return {variant: [json.loads((run_folder(out_dir, variant, seed) / "summary.json").read_text()) for seed in seeds]
            for variant in VARIANTS}


def _finished(folder: Path, max_steps: int) -> bool:
    summary = folder / "summary.json"
    return summary.exists() and json.loads(summary.read_text()).get("steps") == max_steps


def _sampled_outcomes(folder: Path, model_path: str, tasks: list[dict], rollout: RolloutConfig, samples: int,
                      seed: int) -> dict[str, list[int]]:
    """K sampled episodes per held-out task of the model at `model_path`, cached in `folder`."""
    path = folder / f"heldout_sampled_k{samples}_seed{seed}.json"
    if path.exists() and json.loads(path.read_text())["model"] == repo_relative(model_path):
        return json.loads(path.read_text())["outcomes"]
    sampled = replace(rollout, generation=replace(rollout.generation, seed=seed))
    outcomes = task_outcomes(HFChatModel(model_path), tasks, sampled, samples=samples)
    write_json_atomic(path, {"model": repo_relative(model_path), "samples": samples, "seed": seed, "outcomes": outcomes})
    return outcomes


def _result(run: RunConfig, variant: str, seed: int, metric: str, eval_set: str, k: int,
            temperature: float, per_task: dict[str, float], run_dir: Path, model: str) -> dict:
    values = list(per_task.values())
    return {"table": "table2-3", "variant": variant, "paper_row": PAPER_ROWS[variant], "benchmark": "bfcl",
            "data_version": run.data_engine.data_version, "eval_set": eval_set, "metric": metric, "k": k,
            "temperature": temperature, "seed": seed, "n": len(values),
            "value": round(100.0 * sum(values) / len(values), 2) if values else None,
            "profile": run.profile, "model": run.model, "steps": run.training.max_steps,
            "tasks_per_step": run.training.tasks_per_step, "group_size": run.training.group_size,
            "config_hash": run_hash(run),
            "run_dir": repo_relative(run_dir), "model_path": repo_relative(model), "per_task": per_task}


def compare(profile: str = "tiny", seeds: list[int] = (0,), overrides: list[str] = (), out_dir: str | Path | None = None,
            pass_k: int = 4, results_path: str | Path | None = None, progress: bool = True) -> list[dict]:
    """Train (or reuse) every variant for every seed, measure them and the starting policy; returns the metric rows
    (also written to `results_path`, default `results_file(RESULTS_DIR, ...)`). `overrides`: a nested mapping
    or `section.field=value` strings, applied to every run."""
    out_dir = Path(out_dir or RUNS_DIR / f"compare_{profile}")
    if isinstance(overrides, dict):
        overrides = flatten_overrides(overrides)
    results = []
    for seed in seeds:
        for variant in VARIANTS:
            run = variant_run(profile, overrides, variant, seed)
            folder = run_folder(out_dir, variant, seed)
            if not _finished(folder, run.training.max_steps):
                train(run, folder, progress=progress)
            results += _measure(run, variant, seed, folder, pass_k)
        run = variant_run(profile, overrides, "static", seed)  # every variant starts from the same policy
        results += _measure(run, "zero_shot", seed, run_folder(out_dir, "static", seed), pass_k,
                            sampled_dir=Path(out_dir) / "zero_shot")
    steps = variant_run(profile, overrides, "static", seeds[0]).training.max_steps
    settings = {"profile": profile, "seeds": list(seeds), "overrides": list(overrides), "pass_k": pass_k}
    write_result(Path(results_path or results_file(RESULTS_DIR, profile, list(seeds), steps)), experiment="comparison",
                 profile=profile, model=results[0]["model"], config_hash=config_hash(settings), table="table2-3",
                 run_dir=repo_relative(out_dir), config=settings, metrics=results)
    return results


def _measure(run: RunConfig, variant: str, seed: int, folder: Path, pass_k: int,
             sampled_dir: Path | None = None) -> list[dict]:
    """Greedy and pass@k on the held-out set, and BFCL val success, of a run's final policy (or, for `zero_shot`,
    of the policy it started from: the run's step-0 evaluation). The starting policy is the same for every seed, so
    its samples are drawn once (sampling seed 0, cached in `sampled_dir`) and every seed's zero-shot row uses them."""
    step = 0 if variant == "zero_shot" else run.training.max_steps
    evaluation = json.loads((folder / "eval" / f"step_{step:05d}.json").read_text())
    engine_config = run.data_engine
    key, tasks = DataEngine(engine_config, folder).heldout()
    model_path = DataEngine(engine_config, folder).policy() if variant == "zero_shot" else str(folder / "final")
    eval_set = f"heldout/{key}"
    greedy = {t: float(o[0]) for t, o in evaluation["heldout_outcomes"].items()}
    rollout = rollout_config(run.rollout, token_level=True, max_completion_tokens=run.training.max_completion_tokens)
    sampled = _sampled_outcomes(sampled_dir or folder / "eval", model_path, tasks, rollout, pass_k,
                                0 if variant == "zero_shot" else seed)
    passed = {t: pass_at_k(len(o), sum(o), pass_k) for t, o in sampled.items()}
    mean = {t: sum(o) / len(o) for t, o in sampled.items()}
    temperature = run.rollout.temperature
    out = [_result(run, variant, seed, "greedy_success", eval_set, 1, 0.0, greedy, folder, model_path),
           _result(run, variant, seed, f"pass@{pass_k}", eval_set, pass_k, temperature, passed, folder, model_path),
           _result(run, variant, seed, "sampled_success", eval_set, 1, temperature, mean, folder, model_path)]
    val = folder / "eval" / f"val_step_{step:05d}.json"
    if val.exists():
        bfcl = metric_row(json.loads(val.read_text()))
        per_task = {t["task_id"]: float(t["success"]) for t in bfcl["per_task"]}
        out.append(_result(run, variant, seed, "greedy_success", bfcl["eval_set"], 1, 0.0, per_task, folder,
                           model_path))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = profiles.profile_parser("python -m coevolve_lib compare", __doc__, "training.max_steps=20")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (default: 0 1 2)")
    parser.add_argument("--pass-k", type=int, default=4, help="k of pass@k on the held-out set (default: 4)")
    parser.add_argument("--out", help="folder of the runs (default: runs/compare_<profile>)")
    parser.add_argument("--results", help="results JSON (default: results/comparison/<profile>_seeds<..>_steps<n>.json)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    profiles.run_config_from_args(args)  # every value checked before anything runs
    if any(seed < 0 for seed in args.seeds) or args.pass_k < 1:
        raise profiles.ConfigError(f"--seeds must be >= 0 and --pass-k >= 1 (got {args.seeds}, {args.pass_k})")
    from coevolve_lib.report import comparison_table, plot_learning_curves, rounds_table

    results = compare(args.profile, args.seeds, args.set, args.out, args.pass_k, args.results, not args.quiet)
    summaries = run_summaries(args.out or RUNS_DIR / f"compare_{args.profile}", args.seeds)
    figure = figure_file(FIGURES_DIR, args.profile, args.seeds, summaries["static"][0]["max_steps"])
    plot_learning_curves(summaries, figure)
    print(comparison_table(results).to_string())
    print(rounds_table(summaries).to_string())
    print(f"learning curves: {figure}")
    return 0
