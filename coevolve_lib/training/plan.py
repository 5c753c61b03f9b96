"""Around the CoEvolve loop of `train`: the run plan (what `python -m coevolve_lib train --dry-run` prints,
coevolve_lib/cli/train.py), the launch commands (in-process, `accelerate launch`, vLLM) and the notebooks' entry
point, `run_training`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import asdict, replace
from pathlib import Path

from coevolve_lib import profiles
from coevolve_lib.core.config import RunConfig
from coevolve_lib.core.environment import environment_class
from coevolve_lib.core.llm_calls import record_path
from coevolve_lib.core.paths import REPO_ROOT, RUNS_DIR, profile_label, shown_path
from coevolve_lib.core.shared_files import SETTLE_TIMEOUT_S
from coevolve_lib.training.checkpoints import flat
from coevolve_lib.training.loop import train
from coevolve_lib.training.memory import (
    GPU_MEMORY_GB,
    SERVER_MEMORY_UTILIZATION,
    checkpoint_disk,
    colocate_utilization,
    fitting_accumulation,
    memory_plan,
    server_split,
    vllm_memory,
)
from coevolve_lib.training.processes import COLLECTIVE_MARGIN_S, collective_timeout_s
from coevolve_lib.training.rollout_func import training_rollouts
from coevolve_lib.training.summary import summarize
from coevolve_lib.training.trl_args import grpo_kwargs


def train_command(run: RunConfig, out: str, overrides: list[str] = ()) -> list[str]:
    """The command that trains `run` into `out`, as shell words (the `--set overrides` quoted): in-process, or
    `accelerate launch` for multi-process profiles: with the profile's accelerate config file, else with accelerate's
    own defaults and `--multi_gpu`."""
    launch = run.training.launch
    train = ["-m", "coevolve_lib", "train", "--profile", run.profile, "--out", out,
             *[part for override in overrides for part in ("--set", shlex.quote(override))]]
    if launch.num_processes == 1 and not launch.accelerate_config:
        return ["python", *train]
    accelerate = ["accelerate", "launch"]
    if launch.accelerate_config:
        accelerate += ["--config_file", launch.accelerate_config]
    else:
        # accelerate starts several processes (torchrun) only for `--multi_gpu`, on GPUs and on CPU alike (there the
        # run's processes join over gloo, `loop.train`); with `--cpu` it starts one, its multi-CPU path being mpirun.
        accelerate += ["--multi_gpu"]
    if launch.offload_optimizer:  # DeepSpeed's own option, over the config file's `offload_optimizer_device: none`
        accelerate += ["--offload_optimizer_device", "cpu"]
    accelerate += ["--num_machines", str(launch.num_machines), "--num_processes", str(launch.num_processes)]
    if launch.num_machines > 1:
        accelerate += ["--machine_rank", "$NODE_RANK", "--main_process_ip", "$MASTER_ADDR", "--main_process_port",
                       "29500"]
    return accelerate + train


def vllm_commands(run: RunConfig, out: str, overrides: list[str] = ()) -> tuple[dict, list[str]]:
    """The vLLM launch recipes of a multi-GPU profile (docs/training.md, vLLM rollouts), and their notes: colocate
    (the train command with vLLM on the training GPUs) and server (`trl vllm-serve` on GPUs of its own, started
    first, and the train command on the others). Each names vLLM's context length (`TrainConfig.vllm_context`),
    colocate the GPU share the model needs when the profile's is too small (`colocate_utilization`), and each the
    gradient accumulation under which its training fits the GPUs (`memory.fitting_accumulation`: more micro-batches
    of fewer sequences); a recipe that fits no split is left out, with a note."""
    cfg, launch = run.training, run.training.launch
    if launch.num_processes == 1 and not launch.accelerate_config:  # in-process (CPU) profiles
        return {}, []
    commands, notes = {}, []
    colocate = ["training.vllm_mode=colocate", f"training.vllm_max_model_length={cfg.vllm_context}"]
    share = colocate_utilization(run)
    steps = fitting_accumulation(run, "vllm_colocate")
    if share is None:
        notes.append(f"no vLLM colocate recipe: {run.model} needs more than {SERVER_MEMORY_UTILIZATION} of a "
                     f"{launch.gpu_memory_gb:g} GB GPU at tensor parallel size {cfg.vllm_tensor_parallel_size}")
    elif steps is None:
        notes.append(f"no vLLM colocate recipe: beside vLLM's share, the training does not fit a "
                     f"{launch.gpu_memory_gb:g} GB GPU at any gradient accumulation (training_memory)")
    else:
        if share != cfg.vllm_gpu_memory_utilization:
            colocate.append(f"training.vllm_gpu_memory_utilization={share}")
            notes.append(f"vLLM colocate: {run.model} needs {share} of each {launch.gpu_memory_gb:g} GB GPU "
                         f"(vllm_gpu_memory_utilization {cfg.vllm_gpu_memory_utilization} holds less than its "
                         f"weights, overhead and one {cfg.vllm_context}-token sequence); the training keeps "
                         f"{(1 - share) * launch.gpu_memory_gb:.1f} GB")
        if steps != cfg.gradient_accumulation_steps:
            colocate.append(f"training.gradient_accumulation_steps={steps}")
            notes.append(f"vLLM colocate: gradient_accumulation_steps {steps} (micro-batches of "
                         f"{replace(cfg, gradient_accumulation_steps=steps).per_device_batch_size}), so that the "
                         "training fits beside vLLM's share (training_memory)")
        commands["train_vllm_colocate"] = " ".join(train_command(run, out, overrides) + _sets(colocate))
    steps = fitting_accumulation(run, "vllm_server")
    split = None if steps is None else server_split(replace(cfg, gradient_accumulation_steps=steps))
    if split is None:
        why = (f"{launch.num_processes} GPU(s) leave none for a server of vllm_tensor_parallel_size "
               f"{cfg.vllm_tensor_parallel_size}" if server_split(cfg) is None else
               f"the training does not fit its {launch.gpu_memory_gb:g} GB GPUs at any gradient accumulation")
        return commands, notes + [f"no vLLM server recipe: {why}"]
    tp, gpus_per_node = cfg.vllm_tensor_parallel_size, launch.num_processes // launch.num_machines
    first = split.launch.num_processes  # the server's first GPU, counted over the nodes
    server_node, server_gpu = divmod(first, gpus_per_node)
    if server_gpu + tp > gpus_per_node:  # the server's GPUs start on the next node
        server_node, server_gpu = server_node + 1, 0
    host = "$VLLM_SERVER_HOST" if server_node else cfg.vllm_server_host
    gpus = lambda start, count: ",".join(str(i) for i in range(start, start + count))  # noqa: E731
    settings = ["training.vllm_mode=server", f"training.launch.num_processes={split.launch.num_processes}",
                f"training.gradient_accumulation_steps={split.gradient_accumulation_steps}"]
    if split.launch.num_machines != launch.num_machines:
        settings.append(f"training.launch.num_machines={split.launch.num_machines}")
    if host != cfg.vllm_server_host:
        settings.append(f"training.vllm_server_host={host}")
    server_run = replace(run, training=split)
    # the GPUs the training leaves on the server's node serve as data-parallel replicas, none left idle there
    replicas = min(launch.num_processes - first, gpus_per_node - server_gpu) // tp
    idle = launch.num_processes - split.launch.num_processes - replicas * tp
    serve = ["trl", "vllm-serve", "--model", run.model, "--tensor-parallel-size", str(tp), "--data-parallel-size",
             str(replicas), "--port", str(cfg.vllm_server_port), "--max-model-len", str(cfg.vllm_context)]
    commands["vllm_server"] = f"CUDA_VISIBLE_DEVICES={gpus(server_gpu, replicas * tp)} " + " ".join(serve)
    commands["train_vllm_server"] = " ".join(
        [f"CUDA_VISIBLE_DEVICES={gpus(0, min(split.launch.num_processes, gpus_per_node))}",
         *train_command(server_run, out, overrides), *_sets(settings)])
    notes.append(f"vLLM server mode: start vllm_server on node {server_node} first ({replicas} replica(s) of "
                 f"{tp} GPU(s)); train_vllm_server then trains on {split.launch.num_processes} GPU(s) with "
                 f"gradient_accumulation_steps {split.gradient_accumulation_steps} (micro-batches of "
                 f"{split.per_device_batch_size}); {idle} of {launch.num_processes} GPUs idle"
                 + (f"; VLLM_SERVER_HOST=<node {server_node}'s address>" if server_node else ""))
    return commands, notes


def _sets(settings: list[str]) -> list[str]:
    """`--set` options turning vLLM rollouts on, with `settings`."""
    return [part for setting in ["training.use_vllm=true", *settings] for part in ("--set", setting)]


def plan(run: RunConfig, out_dir: str | Path, overrides: list[str] = ()) -> dict:
    """What a run would do, resolved from its config, without loading a model (the `--dry-run` output); its
    commands carry the `--set` `overrides` the config was made with, so they run as printed."""
    cfg, launch = run.training, run.training.launch
    out = shown_path(out_dir)  # commands run from the repository root
    commands = {"train": " ".join(train_command(run, out, overrides))}
    extra, notes = vllm_commands(run, out, overrides)
    commands.update(extra)
    explorer, replayed = run.data_engine.explorer_model, run.data_engine.llm_calls == "replay"
    if replayed:  # RunConfig checks that a replay names its explorer
        recording = shown_path(record_path(out_dir, run.data_engine.llm_record))
        notes.append(f"the explorer's calls are replayed from {recording} (data_engine.llm_calls=replay): no endpoint "
                     "is asked")
    if explorer and explorer.startswith("openai:") and not replayed:
        commands["explorer_env"] = (f"export OPENAI_BASE_URL=<OpenAI-compatible endpoint serving "
                                    f"{explorer.removeprefix('openai:')}> OPENAI_API_KEY=<its key>")
        data, processes = run.data_engine, launch.num_processes
        rate = data.explorer_requests_per_minute
        notes.append(f"explorer: at most {data.explorer_max_concurrent} calls in flight over the run "
                     f"({data.explorer_max_concurrent // processes} per process; data_engine.explorer_max_concurrent)"
                     + (f", {rate} requests a minute ({rate / processes:g} per process; "
                        "data_engine.explorer_requests_per_minute)" if rate else ", unpaced")
                     + f"; a round ends within data_engine.round_deadline_s = {data.round_deadline_s:g} s")
        if not os.environ.get("OPENAI_BASE_URL"):
            notes.append("OPENAI_BASE_URL is not set: the explorer LLM needs an OpenAI-compatible endpoint")
    if launch.accelerate_config and not (REPO_ROOT / launch.accelerate_config).exists():
        notes.append(f"accelerate config {launch.accelerate_config} does not exist (paths are relative to the repo)")
    if launch.num_machines > 1:
        notes.append(f"run the train command on each of the {launch.num_machines} nodes, with NODE_RANK=0.."
                     f"{launch.num_machines - 1} and MASTER_ADDR=<node 0's address>; --out must be on a filesystem "
                     f"all nodes share (a process waits up to {SETTLE_TIMEOUT_S:g} s to read a file another wrote as "
                     "it was written, then stops the run in one line)")
    disk = checkpoint_disk(run)
    if disk:  # a paper backbone: its memory is planned for the GPUs named
        named = [name for name, gb in GPU_MEMORY_GB.items() if gb == launch.gpu_memory_gb]
        notes.insert(0, f"GPUs: {launch.num_processes} x {launch.gpu_memory_gb:g} GB ({' / '.join(named) or 'set'}; "
                        "training.launch.gpu_memory_gb): the memory table is for these; for yours, train --gpu "
                        f"{'|'.join(GPU_MEMORY_GB)}")
        notes.append(f"disk: {disk['per_checkpoint_gb']:g} GB per checkpoint, {disk['checkpoints_kept']} of "
                     f"{disk['checkpoints_saved']} kept (training.save_total_limit), up to {disk['peak_gb']:g} GB in "
                     f"{out}/ with the final model")
    if launch.num_processes > 1:
        notes.append("multi-GPU runs evaluate checkpoints after training: python -m coevolve_lib evaluate "
                     f"--profile {run.profile} --model {out}/final --all-tasks --out <results.json>")
    environment, environment_notes = environment_class(run.evaluation.environment_name).plan(run)
    notes += environment_notes
    completions = cfg.tasks_per_step * cfg.group_size
    vllm = {}
    if "train_vllm_colocate" in commands:
        vllm["colocate"] = vllm_memory(run, colocate_utilization(run))
    if "vllm_server" in commands:
        vllm["server"] = vllm_memory(run, SERVER_MEMORY_UTILIZATION)
    return {
        "profile": run.profile, "environment": environment, "policy_model": run.model, "explorer_model": explorer,
        "schedule": {"max_steps": cfg.max_steps, "pool_updates": cfg.pool_updates,
                     "feedback_every": cfg.feedback_every if cfg.pool_updates != "none" else None,
                     "feedback_rounds": cfg.rounds if cfg.pool_updates != "none" else 0,
                     "d0_size": run.data_engine.d0_size},
        "batch": {"tasks_per_step": cfg.tasks_per_step, "group_size": cfg.group_size,
                  "tasks_drawn_per_step": cfg.tasks_per_step * cfg.draw_factor,
                  "completions_per_step": completions, "processes": launch.num_processes,
                  "machines": launch.num_machines, "per_device_train_batch_size": cfg.per_device_batch_size,
                  "gradient_accumulation_steps": cfg.gradient_accumulation_steps},
        "grpo_config": grpo_kwargs(cfg, run.rollout, str(Path(out_dir) / "trainer"), cuda=True),
        "rollout": training_rollouts(run).recorded(),
        "lora": asdict(cfg.lora) if cfg.lora.enabled else None,
        "launch": asdict(launch),
        "collectives": ({"timeout_s": collective_timeout_s(run), "round_deadline_s": run.data_engine.round_deadline_s,
                         "margin_s": COLLECTIVE_MARGIN_S} if launch.num_processes > 1 else None),
        "vllm_memory": {name: memory for name, memory in vllm.items() if memory is not None} or None,
        "training_memory": memory_plan(run),
        "checkpoint_disk": checkpoint_disk(run),
        "commands": commands, "notes": notes,
    }


def run_training(profile: str = "tiny", overrides: dict | list[str] | None = None, out_dir: str | Path | None = None,
                 resume: bool = True, progress: bool = True, engine=None,
                 shared_starts: str | Path | None = None) -> dict:
    """Notebook entry point: in-process for single-process profiles, `accelerate launch` for multi-GPU ones.
    `engine`: a data engine the notebook has open on `out_dir` (in-process runs reuse it, `loop.train`).
    `shared_starts`: where in-process runs share their D_0 and step-0 evaluation with runs that start alike
    (`loop.train`)."""
    run = profiles.run_config(profile, overrides)
    out_dir = Path(out_dir or RUNS_DIR / f"train_{profile_label(profile)}")
    if run.training.launch.num_processes == 1:
        return train(run, out_dir, resume=resume, progress=progress, engine=engine,
                     shared_starts=shared_starts)
    settings = flatten_overrides(overrides)
    subprocess.run(shlex.split(plan(run, out_dir, settings)["commands"]["train"]), check=True, cwd=REPO_ROOT)
    return summarize(out_dir)


def flatten_overrides(overrides: dict | list[str] | None) -> list[str]:
    """Overrides as `--set` strings: `{"training": {"max_steps": 20}}` -> `["training.max_steps=20"]` (values as
    JSON, which `--set` reads); strings as they are."""
    if not isinstance(overrides, dict):
        return list(overrides or [])
    return [f"{key}={json.dumps(value)}" for key, value in flat(overrides).items()]
