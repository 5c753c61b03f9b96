"""A rehearsal of a paper profile on CPU (`python -m coevolve_lib rehearse --profile paper-qwen3-4b --out DIR`): the
commands a user runs on a GPU node, run here on the profile's own code paths with only sizes, the explorer and the
model replaced, so that what breaks on the way to a GPU breaks here first.

    train     the command `train --dry-run` prints, on 2 processes (`accelerate launch --multi_gpu`, gloo), with the
              profile's stand-in (`engine.standins`: the backbone's architecture at tiny dims, the real Qwen
              vocabulary and chat template, format-warm-started on the profile's environment, BFCL or AppWorld; on
              AppWorld each process runs its own servers) and `configs/rehearsal.yaml`'s sizes: D_0, 3 GRPO steps
              with the profile's GRPO settings (full weights or LoRA, beta with its reference model, dapo, gradient
              checkpointing, gradient accumulation), a sharded feedback round after each but the last, a checkpoint
              after each
    kill      what a kill during the last step with a round leaves (its checkpoint and the later ones, the model, the
              summary, its round and later ones, and their pool tasks removed), then the same command again, its
              process group killed (SIGKILL) while that step's rollouts run
    resume    the same command again: it resumes from the checkpoint before and must replay that step, its round and
              the steps after exactly (episodes, round report, pool and the final weights, against the first
              launch's); the weights must have moved (the restore is checked only where training changed something)
    evaluate  the multi-GPU recipe's `evaluate --model <run>/final` on the first val tasks

`DIR/rehearsal.json` records what ran and what it measured (`Rehearsal`); the commands' output goes to
`DIR/<phase>.log`. Stated deviations (each commented in `configs/rehearsal.yaml`): no DeepSpeed (ZeRO-3 needs GPUs;
`benchmarks/gpu_check.sh` runs it), float32 (bf16 is emulated on CPU), no LLM explorer (an offline one: no endpoint
here), the kit's format reward (a stand-in never solves a task, so the binary reward would leave nothing to update),
short lengths; on BFCL compact tool docs (full docs cost ~23 minutes per GRPO step on 2 cores) and the
GorillaFileSystem world only; on AppWorld no API list in the prompt, and the synthetic world unless APPWORLD_ROOT
names the official data (the AppWorld stand-in learns on the synthetic world either way).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil
import yaml

from coevolve_lib import profiles
from coevolve_lib.core.config import ConfigError, RunConfig, RunError
from coevolve_lib.core.model_specs import BUILT_MODELS
from coevolve_lib.core.paper_models import paper_model
from coevolve_lib.core.paths import MODELS_DIR, REPO_ROOT, shown_path
from coevolve_lib.core.records import read_jsonl, write_json_atomic
from coevolve_lib.core.shared_files import file_digest
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.training.plan import flatten_overrides, plan

REHEARSAL_FILE = profiles.CONFIGS_DIR / "rehearsal.yaml"
REHEARSAL_MARKER = ".coevolve-rehearsal"
"""The file that marks a folder as a rehearsal's: only such a folder (or a new or empty one) has its run and logs
deleted by the next rehearsal."""
LAUNCH_TIMEOUT_S = 1800
"""Most seconds one launched command may take (a paper profile's whole rehearsal takes a few minutes)."""


@dataclass
class Rehearsal:
    """What `rehearsal.json` holds."""

    profile: str
    architecture: str
    """The stand-in's transformers class (the backbone's)."""
    model: str
    """The backbone the profile trains, and its stand-in: `<hub id> (stand-in <spec>)`."""
    processes: int
    rollout_engine: str
    """What generated the GRPO rollouts: the kit's engines on the training model, or TRL's vLLM (`training.use_vllm`,
    colocated in each process or a `trl vllm-serve` server)."""
    steps: int
    """GRPO steps of the finished run (after the resume)."""
    rounds: int
    """Feedback rounds with a report (D_0 not counted)."""
    tool_calls_parsed: int
    """Tool calls decoded from the stand-in's replies (AppWorld: the APIs its code names): training rollouts and
    evaluation episodes."""
    tool_calls_rejected: int
    """Tool-call attempts the parser refused (BFCL: invalid JSON, unknown argument shapes; AppWorld: a reply with no
    code block)."""
    lora_trainable_params: int
    """Parameters of the LoRA adapters (0: the profile trains all weights)."""
    trainable_params: int
    """Parameters the optimizer updated (the adapters, or the whole model)."""
    weights_moved: int
    """Weight tensors the training changed (full weights: against the stand-in; LoRA: adapter tensors that left their
    zero init)."""
    resumed: bool
    """After a real kill mid-step, the next launch resumed from the first checkpoint and replayed the last step and its
    round exactly (the step's episodes, its metrics row, the round's report and the pool, against the first
    launch's)."""
    resume_failures: list
    """The resume checks that did not hold (empty when `resumed`)."""
    evaluated: bool
    """`evaluate` on `<run>/final` measured its tasks."""
    seconds: float
    grpo: dict = field(default_factory=dict)
    """The profile's GRPO settings the run used, and what TRL logged of them (KL, the MoE router's auxiliary loss)."""
    phases: dict = field(default_factory=dict)
    """Seconds per phase (train, resume, evaluate) and each command as run."""
    evaluation: dict = field(default_factory=dict)
    vllm: dict | None = None
    """A colocated vLLM's context as its engine was built (`max_model_len`) beside the plan's
    (`planned_max_model_len`), from the run's `vllm.json`; None without vLLM."""

    @property
    def failed_checks(self) -> list[str]:
        """The checks that did not hold: what makes `rehearse` exit non-zero."""
        failed = [f"resume: {name}" for name in self.resume_failures]
        if not self.weights_moved:
            failed.append("the training moved no weight (no reward varied in a group): the restore went unchecked")
        if not self.evaluated:
            failed.append("evaluate measured no task")
        if self.vllm and self.vllm["max_model_len"] != self.vllm["planned_max_model_len"]:
            failed.append(f"vLLM's context {self.vllm['max_model_len']} is not the plan's "
                          f"{self.vllm['planned_max_model_len']}")
        return failed


def rehearsal_run(profile: str, overrides: list[str] = ()) -> tuple[RunConfig, list[str]]:
    """The rehearsed run config and its `--set` strings: the profile, `configs/rehearsal.yaml` (its shared settings,
    then its section for the profile's environment), the backbone's stand-in warm-started on that environment as the
    model, then the user's `overrides`."""
    base = profiles.run_config(profile)
    backbone, environment = paper_model(base.model), base.evaluation.environment_name
    settings = yaml.safe_load(REHEARSAL_FILE.read_text())
    by_environment = settings.pop("environments")
    if backbone is None or environment not in by_environment:
        raise ConfigError(f"rehearse runs the paper profiles (a paper backbone as model, on "
                          f"{' or '.join(by_environment)}); {profile!r} trains {base.model!r} on {environment}")
    sets = [*flatten_overrides(settings), *flatten_overrides(by_environment[environment]),
            f"model={backbone.standin_for(environment)}", *overrides]
    return profiles.run_config(profile, sets), sets


def rehearsed_models() -> list[str]:
    """The stand-ins the paper profiles' rehearsals run (`rehearsal_run`'s model of every profile that trains a paper
    backbone)."""
    return sorted({rehearsal_run(name)[0].model for name in profiles.profile_names()
                   if paper_model(profiles.run_config(name).model) is not None})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(command: list[str], log: Path) -> float:
    """Run a printed command from the repository root with this interpreter's tools first on the PATH, its output in
    `log`; its seconds. A RunError naming the log when it fails."""
    start = time.perf_counter()
    proc = _start(command, log)
    try:
        proc.wait(LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RunError(f"{command[0]} ran past {LAUNCH_TIMEOUT_S} s; see {shown_path(log)}") from None
    if proc.returncode:
        tail = [line for line in log.read_text().splitlines() if line.strip()][-1:]
        raise RunError(f"`{shlex.join(command[:6])} ...` exited {proc.returncode} ({tail[0][:300] if tail else ''}); "
                       f"see {shown_path(log)}")
    return round(time.perf_counter() - start, 1)


def launch_and_kill(command: list[str], log: Path, started: str, finished: Path) -> tuple[float, bool]:
    """Run a printed command as `launch` does and SIGKILL it, every process under it included (as a cluster's job
    kill does), a second after `started` shows in its output (the loop announces each step's rollouts); (seconds,
    whether the kill landed before `finished` was written, i.e. mid-step). A RunError when the command ends before
    that."""
    start = time.perf_counter()
    process = _start(command, log)
    try:
        while started not in log.read_text(errors="replace"):
            if process.poll() is not None:
                raise RunError(f"`{shlex.join(command[:6])} ...` ended (status {process.returncode}) before "
                               f"{started!r}; see {shown_path(log)}")
            if time.perf_counter() - start > LAUNCH_TIMEOUT_S:
                raise RunError(f"{command[0]} showed no {started!r} in {LAUNCH_TIMEOUT_S} s; see {shown_path(log)}")
            time.sleep(0.2)
        time.sleep(1.0)
        mid_step = not finished.exists()
    finally:  # the launcher and every process under it: torchrun starts its workers in sessions of their own
        tree = [process] if process.poll() is not None else [psutil.Process(process.pid),
                                                             *psutil.Process(process.pid).children(recursive=True)]
        for member in tree:
            try:
                member.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        process.wait()
        psutil.wait_procs([member for member in tree if isinstance(member, psutil.Process)], timeout=30)
    return round(time.perf_counter() - start, 1), mid_step and process.returncode == -signal.SIGKILL


def _start(command: list[str], log: Path) -> subprocess.Popen:
    """A printed command started from the repository root, this interpreter's tools first on the PATH, its output
    appended to `log` after the command line."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log, "a") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _round_report(run_dir: Path, round_index: int | None) -> str | None:
    """A round's report.json (its wall times are in timings.json), None for no round."""
    path = run_dir / f"round_{round_index:03d}" / "report.json" if round_index is not None else None
    return path.read_text() if path is not None and path.exists() else None


def _episodes(run_dir: Path, step: int) -> list:
    """What a step's episodes did (their timings left out)."""
    return [(r["task_id"], r["sample_index"], r["reward"], r["steps"])
            for r in read_jsonl(run_dir / "rollouts" / f"step_{step:05d}.jsonl")]


def _calls(records: list[dict]) -> tuple[int, int]:
    """(calls decoded, attempts refused) over the episodes' steps: BFCL steps list the tool calls the parser refused
    (`rejected`); an AppWorld step's calls are the APIs its code names, and a reply with no code block (`code` None)
    is its refused attempt."""
    steps = [step for record in records for step in record["steps"]]
    refused = sum(len(s["rejected"]) if "rejected" in s else int(s.get("code", "") is None) for s in steps)
    return sum(len(s["calls"]) for s in steps), refused


def _parameter_count(folder: Path, name: str) -> int:
    """Parameters in a safetensors file of `folder` (0: no such file), read from its header."""
    from safetensors import safe_open

    path = folder / name
    if not path.exists():
        return 0
    with safe_open(str(path), framework="pt") as tensors:
        return sum(math.prod(tensors.get_slice(key).get_shape()) for key in tensors.keys())


def _moved(standin: Path, final: Path) -> int:
    """Tensors of `final` that differ from the stand-in's (full weights), or LoRA B matrices that are no longer 0."""
    import torch
    from safetensors.torch import load_file

    if (final / "adapter_model.safetensors").exists():
        return sum(bool(t.any()) for k, t in load_file(final / "adapter_model.safetensors").items() if "lora_B" in k)
    before, after = load_file(standin / "model.safetensors"), load_file(final / "model.safetensors")
    return sum(not torch.equal(before[name].float(), after[name].float()) for name in before if name in after)


def _weights_digest(final: Path) -> str | None:
    """The sha256 of a final model's weight file (the full model's or the adapters')."""
    name = "adapter_model.safetensors" if (final / "adapter_model.safetensors").exists() else "model.safetensors"
    return file_digest(final / name)


def _file_step(name: str) -> int:
    """The step of a step record's name (`rollouts/step_00002.jsonl` -> 2)."""
    return int(name.rsplit("_", 1)[1].split(".")[0])


def _files(run_dir: Path) -> dict[str, int]:
    """The step records' modification times: a step trained again rewrites its files."""
    return {f"{folder}/{p.name}": p.stat().st_mtime_ns for folder in ("rollouts", "signals")
            for p in sorted((run_dir / folder).glob("step_*.jsonl"))}


def _kill_and_resume(train: list[str], out: Path, run_dir: Path, killed: int, killed_round: int | None,
                     last: int) -> tuple[dict[str, float], list[str]]:
    """The kill and resume phases (see the module docstring) after the first launch of `train`, whose last step is
    `last`; the kill lands in step `killed` (the last with a round, `killed_round`): their seconds, and the resume
    checks that did not hold."""
    metrics, files = (run_dir / "metrics.jsonl").read_text().splitlines(), _files(run_dir)
    final_weights = _weights_digest(run_dir / "final")
    replayed = range(killed, last + 1)
    step_episodes, pool = [_episodes(run_dir, step) for step in replayed], (run_dir / "pool.jsonl").read_text()
    round_report = _round_report(run_dir, killed_round)
    # What a kill during step `killed` leaves: its checkpoint and the later ones, the model, the summary, its round
    # and the later ones never written
    for step in replayed:
        shutil.rmtree(run_dir / "trainer" / f"checkpoint-{step}")
    shutil.rmtree(run_dir / "final")
    (run_dir / "summary.json").unlink()
    if killed_round is not None:
        for round_dir in run_dir.glob("round_*"):
            if int(round_dir.name.split("_")[1]) >= killed_round:
                shutil.rmtree(round_dir)
        TaskPool(run_dir / "pool.jsonl").drop_rounds_from(killed_round)
    # ... and then a real kill: the same command, its process group killed once step `killed` is under way
    killed_s, killed_mid_step = launch_and_kill(train, out / "killed.log", f"step {killed}: ",
                                                run_dir / "rollouts" / f"step_{killed:05d}.jsonl")
    seconds = {"killed_s": killed_s, "resume_s": launch(train, out / "resume.log")}
    after = _files(run_dir)
    resume_checks = {  # each must hold; the record names those that did not
        "killed_mid_step": killed_mid_step,
        "earlier_metrics_kept": (run_dir / "metrics.jsonl").read_text().splitlines()[:killed - 1]
        == metrics[:killed - 1],
        "one_row_per_step": [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == list(range(1, last + 1)),
        "only_the_killed_steps_rewritten": all((after.get(name) == mtime) == (_file_step(name) < killed)
                                               for name, mtime in files.items()),
        "killed_steps_replayed_exactly": [_episodes(run_dir, step) for step in replayed] == step_episodes,
        "round_redone_exactly": _round_report(run_dir, killed_round) == round_report,
        "pool_as_before": (run_dir / "pool.jsonl").read_text() == pool,  # the redone round added the same tasks
        "final_weights_as_before": _weights_digest(run_dir / "final") == final_weights,
        "checkpoint_rewritten": (run_dir / "trainer" / f"checkpoint-{last}").is_dir()}
    return seconds, [name for name, held in resume_checks.items() if not held]


def rehearse(profile: str, out: str | Path, overrides: list[str] = ()) -> Rehearsal:
    """Rehearse `profile` into `out` (see the module docstring); returns the record it writes to `rehearsal.json`
    (with `failed_checks`)."""
    run, sets = rehearsal_run(profile, overrides)
    standin = MODELS_DIR / BUILT_MODELS[run.model]
    if not (standin / "config.json").exists():
        raise ConfigError(f"the stand-in {run.model!r} is not built (expected {shown_path(standin)}); `python -m "
                          "coevolve_lib rehearse` builds it, and so does `python -m coevolve_lib setup --all-standins`")
    out = Path(out)
    run_dir = out / "run"
    marker = out / REHEARSAL_MARKER
    if out.is_dir() and any(out.iterdir()) and not marker.exists():
        raise ConfigError(f"--out {shown_path(out)} holds files a rehearsal did not make (no {REHEARSAL_MARKER}): "
                          "a rehearsal deletes its folder's run/ and logs, so give a new or empty folder")
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a rehearsal starts from nothing: it is the resume it checks, not an old run's
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text("made by python -m coevolve_lib rehearse, which deletes run/ and *.log here when run again\n")
    for log in out.glob("*.log"):
        log.unlink()
    start = time.perf_counter()
    resolved = plan(run, run_dir, sets)
    train = shlex.split(resolved["commands"]["train"])
    train = [*train[:2], "--main_process_port", str(free_port()), *train[2:]]  # 29500 may be taken here
    phases = {"train_command": shlex.join(train)}

    phases["train_s"] = launch(train, out / "train.log")
    last = max(int(p.name.split("-")[1]) for p in (run_dir / "trainer").glob("checkpoint-*"))
    with_round = [step for step in range(1, last + 1) if run.training.round_after(step)]
    killed = with_round[-1] if with_round else last
    killed_round = killed // run.training.feedback_every if with_round else None
    seconds, resume_failures = _kill_and_resume(train, out, run_dir, killed, killed_round, last)
    phases.update(seconds)

    results = out / "evaluation.json"
    evaluate = ["python", "-m", "coevolve_lib", "evaluate", "--profile", profile, "--model",
                shown_path(run_dir / "final"), "--out", shown_path(results), "--quiet",
                *[part for setting in sets if not setting.startswith("model=") for part in ("--set", setting)]]
    phases["evaluate_command"] = shlex.join(evaluate)
    phases["evaluate_s"] = launch(evaluate, out / "evaluate.log")
    evaluation = json.loads(results.read_text())
    eval_records = read_jsonl(results.with_suffix(".rollouts.jsonl"))

    rows = read_jsonl(run_dir / "metrics.jsonl")
    train_records = [r for step in range(1, last + 1)
                     for r in read_jsonl(run_dir / "rollouts" / f"step_{step:05d}.jsonl")]
    parsed, rejected = _calls(train_records + eval_records)
    lora = _parameter_count(run_dir / "final", "adapter_model.safetensors")
    summary = json.loads((run_dir / "summary.json").read_text())
    trl = lambda key: [r[f"trl/{key}"] for r in rows if f"trl/{key}" in r]  # noqa: E731
    record = Rehearsal(
        profile=profile, architecture=json.loads((standin / "config.json").read_text())["architectures"][0],
        model=f"{profiles.run_config(profile).model} (stand-in {run.model})",
        processes=run.training.launch.num_processes, steps=summary["steps"],
        rollout_engine=f"vllm ({run.training.vllm_mode})" if run.training.use_vllm else "kit",
        rounds=sum(1 for p in run_dir.glob("round_*/report.json") if p.parent.name != "round_000"),
        tool_calls_parsed=parsed, tool_calls_rejected=rejected, lora_trainable_params=lora,
        trainable_params=lora or _parameter_count(run_dir / "final", "model.safetensors"),
        weights_moved=_moved(standin, run_dir / "final"), resumed=not resume_failures, resume_failures=resume_failures,
        evaluated=evaluation["metrics"][0]["n"] > 0, seconds=round(time.perf_counter() - start, 1),
        grpo={"weights": "lora" if run.training.lora.enabled else "full", "beta": run.training.beta,
              "loss_type": run.training.loss_type, "gradient_checkpointing": run.training.gradient_checkpointing,
              "dtype": run.training.dtype, "gradient_accumulation_steps": run.training.gradient_accumulation_steps,
              "trl_kl": trl("kl"), "trl_aux_loss": trl("aux_loss"), "trl_loss": trl("loss")},
        phases=phases,
        evaluation={row["metric"]: row["value"] for row in evaluation["metrics"]}
        | {"n": evaluation["metrics"][0]["n"]},
        vllm=json.loads((run_dir / "vllm.json").read_text()) if (run_dir / "vllm.json").exists() else None)
    write_json_atomic(out / "rehearsal.json", asdict(record) | {"failed_checks": record.failed_checks})
    return record
