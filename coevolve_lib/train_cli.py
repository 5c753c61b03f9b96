"""`python -m coevolve_lib train` and the notebooks' entry point around the CoEvolve loop of `train`: the run plan
(`--dry-run`), launching in-process or with `accelerate launch`, and the command line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import asdict
from pathlib import Path

import coevolve_lib.train as train_lib
from coevolve_lib import profiles
from coevolve_lib.config import RunConfig
from coevolve_lib.paths import REPO_ROOT, RUNS_DIR, shown_path
from coevolve_lib.train import train, training_rollouts
from coevolve_lib.train_summary import summarize
from coevolve_lib.trl_args import grpo_kwargs


def plan(run: RunConfig, out_dir: str | Path) -> dict:
    """What a run would do, resolved from its config, without loading a model (the `--dry-run` output)."""
    cfg, launch = run.training, run.training.launch
    out = shown_path(out_dir)  # commands run from the repository root
    command = ["python", "-m", "coevolve_lib", "train", "--profile", run.profile, "--out", out]
    if launch.num_processes > 1 or launch.accelerate_config:
        accelerate = ["accelerate", "launch", "--config_file", launch.accelerate_config or "default",
                      "--num_machines", str(launch.num_machines), "--num_processes", str(launch.num_processes)]
        if launch.num_machines > 1:
            accelerate += ["--machine_rank", "$NODE_RANK", "--main_process_ip", "$MASTER_ADDR",
                           "--main_process_port", "29500"]
        command = accelerate + ["-m", "coevolve_lib", "train", "--profile", run.profile, "--out", out]
    commands = {"train": " ".join(command)}
    explorer = run.data_engine.explorer_model
    notes = []
    if explorer and explorer.startswith("openai:"):
        commands["explorer_env"] = (f"export OPENAI_BASE_URL=<OpenAI-compatible endpoint serving "
                                    f"{explorer.removeprefix('openai:')}> OPENAI_API_KEY=<its key>")
    if explorer and explorer.startswith("openai:") and not os.environ.get("OPENAI_BASE_URL"):
        notes.append("OPENAI_BASE_URL is not set: the explorer LLM needs an OpenAI-compatible endpoint")
    if launch.accelerate_config and not (REPO_ROOT / launch.accelerate_config).exists():
        notes.append(f"accelerate config {launch.accelerate_config} does not exist (paths are relative to the repo)")
    if launch.num_machines > 1:
        notes.append(f"run the train command on each of the {launch.num_machines} nodes, with NODE_RANK=0.."
                     f"{launch.num_machines - 1} and MASTER_ADDR=<node 0's address>; --out must be on a filesystem "
                     "all nodes share")
    if launch.num_processes > 1:
        notes.append("multi-GPU runs evaluate checkpoints after training: python -m coevolve_lib evaluate "
                     f"--profile {run.profile} --model {out}/final --all-tasks --out <results.json>")
    completions = cfg.tasks_per_step * cfg.group_size
    return {
        "profile": run.profile, "policy_model": run.model, "explorer_model": explorer,
        "warm_start": run.data_engine.warm_start.enabled,
        "schedule": {"max_steps": cfg.max_steps, "pool_updates": cfg.pool_updates,
                     "feedback_every": cfg.feedback_every if cfg.pool_updates != "none" else None,
                     "feedback_rounds": cfg.max_steps // cfg.feedback_every if cfg.pool_updates != "none" else 0,
                     "d0_size": run.data_engine.d0_size},
        "batch": {"tasks_per_step": cfg.tasks_per_step, "group_size": cfg.group_size,
                  "completions_per_step": completions, "processes": launch.num_processes,
                  "machines": launch.num_machines, "per_device_train_batch_size": cfg.per_device_batch_size,
                  "gradient_accumulation_steps": cfg.gradient_accumulation_steps},
        "grpo_config": grpo_kwargs(cfg, run.rollout, str(Path(out_dir) / "trainer"), cuda=True),
        "rollout": asdict(training_rollouts(run)),
        "lora": asdict(cfg.lora) if cfg.lora.enabled else None,
        "launch": asdict(launch), "commands": commands, "notes": notes,
    }


def run_training(profile: str = "tiny", overrides: dict | list[str] | None = None, out_dir: str | Path | None = None,
                 resume: bool = True, progress: bool = True) -> dict:
    """Notebook entry point: in-process for single-process profiles, `accelerate launch` for multi-GPU ones."""
    run = profiles.run_config(profile, overrides)
    out_dir = Path(out_dir or RUNS_DIR / f"train_{profile}")
    if run.training.launch.num_processes == 1:
        return train(run, out_dir, resume=resume, progress=progress)
    command = plan(run, out_dir)["commands"]["train"]
    extra = [f"--set={k}" for k in flatten_overrides(overrides)] if isinstance(overrides, dict) else \
        [f"--set={o}" for o in overrides or []]
    subprocess.run(shlex.split(command) + extra, check=True, cwd=REPO_ROOT)
    return summarize(out_dir)


def flatten_overrides(mapping: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            out += flatten_overrides(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = profiles.profile_parser("python -m coevolve_lib train", train_lib.__doc__, "training.max_steps=20")
    parser.add_argument("--out", help="run folder (default: runs/train_<profile>)")
    parser.add_argument("--dry-run", action="store_true", help="resolve the config and print the plan; load nothing")
    parser.add_argument("--no-resume", action="store_true", help="refuse to continue an existing run folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    run = profiles.run_config_from_args(args)
    out_dir = Path(args.out or RUNS_DIR / f"train_{args.profile}")
    if args.dry_run:
        print(json.dumps(plan(run, out_dir), indent=2, default=str))
        return 0
    summary = train(run, out_dir, resume=not args.no_resume, progress=not args.quiet)
    if summary:
        print(json.dumps({k: summary[k] for k in ("profile", "steps", "signals_total", "pool_size_start",
                                                  "pool_size_end", "time")}, default=str))
    return 0
