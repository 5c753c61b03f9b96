"""The processes of a run: the process group with a timeout sized to the work, the process count checked against the
profile, and what this machine can run (CUDA, vLLM, FSDP), each refused in one line before anything loads."""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta

from coevolve_lib.core.config import ConfigError, RunConfig, TrainConfig


def gpu_visible() -> bool:
    """Whether torch sees a CUDA device here."""
    import torch  # heavy: only for this question (the CLI's quick paths never ask it)

    return torch.cuda.is_available()


def check_vllm(cfg: TrainConfig) -> None:
    """Refuse `use_vllm` where the vllm package is missing, in one line, before anything loads (called when training
    starts: a profile with use_vllm still loads, and dry-runs, without it)."""
    if cfg.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ConfigError("training.use_vllm=true needs the vllm package, which is not installed (GPU nodes: pip "
                          "install \"vllm==0.31.0\"; the CPU: `make vllm` and .venv-vllm/bin/python; docs/training.md "
                          "section 5); or set training.use_vllm=false")


def launches_fsdp() -> bool:
    """Whether `accelerate launch` started this process with FSDP (it exports ACCELERATE_USE_FSDP)."""
    from accelerate.utils import parse_flag_from_env

    return parse_flag_from_env("ACCELERATE_USE_FSDP", default=False)


MIN_COLLECTIVE_TIMEOUT_S = 1800
"""The shortest collective timeout a run gets: torch's gloo default (NCCL's is 600 s)."""


COLLECTIVE_MARGIN_S = 1800
"""What a process may wait past a round's deadline: the unit of work in hand when it passed (its explorer calls are
cut there, its environment calls are not), a checkpoint's save, a step's rollouts longer on one process."""


def collective_timeout_s(run: RunConfig) -> int:
    """How long a process of a multi-process run waits at a collective: `training.process_group_timeout_s`, else
    the longest a process works while others wait, a round or D_0 (each bounded by `data_engine.round_deadline_s`),
    plus `COLLECTIVE_MARGIN_S`; never below `MIN_COLLECTIVE_TIMEOUT_S`. A hang is reported then (torch's timeout
    error), not waited out. A warm start or held-out sets built on the main process are not counted (the kit ships
    its own; set the timeout when building one in a multi-process run)."""
    cfg = run.training
    if cfg.process_group_timeout_s is not None:
        return cfg.process_group_timeout_s
    return max(MIN_COLLECTIVE_TIMEOUT_S, int(run.data_engine.round_deadline_s + COLLECTIVE_MARGIN_S))


def check_processes(cfg: TrainConfig, processes: int) -> None:
    """One line when the run has another process count than its profile plans: each process would roll out and train
    its share of a step sized for `launch.num_processes` processes (4 of 32 tasks when 1 of 8 runs), and evaluation,
    which single-process runs do in the loop, would be skipped, all without a word."""
    planned = cfg.launch.num_processes
    if processes != planned:
        trained = cfg.tasks_per_step * processes // planned
        raise ConfigError(
            f"this run has {processes} process(es) but the profile plans {planned} (training.launch.num_processes): "
            f"a step would train {trained} of its {cfg.tasks_per_step} tasks; run the command `train --dry-run` "
            f"prints, or --set training.launch.num_processes={processes} to split every step over {processes}")


def distributed_state(run: RunConfig):
    """accelerate's process state of the run: the process group made here with the run's collective timeout
    (`collective_timeout_s`), before TRL's arguments would make one with none (transformers' `ddp_timeout` applies
    only to a group it makes itself), and the process count checked against the profile (`check_processes`)."""
    from accelerate import PartialState

    cpu = not gpu_visible()
    if cpu:
        # accelerate names a launched process's device `cpu:<index>`, which transformers hands torch.load as the
        # map_location of a resumed optimizer, and torch restores no `cpu:0`: the plain `cpu` for every process.
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
    # On CPU, accelerate joins launched processes (gloo) only in a state made with cpu=True (TRL's `use_cpu` makes its
    # own so); a default one leaves each process alone, and every one of them the main process.
    state = PartialState(cpu=cpu, timeout=timedelta(seconds=collective_timeout_s(run)))
    check_processes(run.training, state.num_processes)
    return state
