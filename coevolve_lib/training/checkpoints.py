"""A run folder's checkpoints and the configuration it belongs to: which checkpoint a run resumes from (damaged ones
passed over), full weights reloaded strictly, and the refusal to resume a folder with another configuration."""

from __future__ import annotations

import json
import logging
import zipfile
from pathlib import Path

from coevolve_lib.core.config import ConfigError, RunConfig, run_identity
from coevolve_lib.core.paths import shown_path
from coevolve_lib.core.records import CorruptFileError, read_json

log = logging.getLogger(__name__)

STATE_FILE = "coevolve_state.json"


def checkpoint_damage(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint's files, None when nothing is: a JSON file that does not parse (an emptied
    `trainer_state.json`), a safetensors file shorter than its header says, a torch file (`optimizer.pt`, zip) without
    its closing directory: a file cut short or emptied after it was saved (a full disk, a partial copy); full weights
    without the config.json `load_saved_weights` reads them with. Cheap: the headers and directories are read, not
    the tensors."""
    from safetensors import SafetensorError, safe_open

    if any(checkpoint.glob("model*.safetensors")) and not (checkpoint / "config.json").exists():
        return "config.json is missing beside the model weights"

    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        name = path.relative_to(checkpoint)
        if path.suffix == ".json":
            try:
                json.loads(path.read_bytes())
            except ValueError:
                return f"{name} is not JSON"
        elif path.suffix == ".safetensors":
            try:
                with safe_open(str(path), framework="pt"):
                    pass
            except SafetensorError as error:
                return f"{name} is not whole ({error})"
        elif path.suffix in (".pt", ".pth", ".bin") and not zipfile.is_zipfile(path):
            return f"{name} is cut short (no zip directory)"
    return None


def latest_checkpoint(trainer_dir: Path, recorded_steps: set | None = None) -> Path | None:
    """The newest `checkpoint-N` folder to resume from: one that holds our state file (a checkpoint cut before it was
    written is skipped), no damaged file (`checkpoint_damage`) and, given the steps metrics.jsonl holds a row of
    (`recorded_steps`), a row of each of its steps 1..N: a step's row is appended before its checkpoint is saved, so a
    missing one is a damaged line, and resuming past it would rewrite the run's summary from fewer steps. A damaged
    one is passed over with a warning for the one before it: the steps after that are replayed, exactly, as after a
    kill. A ConfigError when every one is damaged."""
    done = sorted((p for p in trainer_dir.glob("checkpoint-*") if (p / STATE_FILE).exists()),
                  key=lambda p: int(p.name.split("-")[1]), reverse=True)
    damaged = []
    for checkpoint in done:
        step = int(checkpoint.name.split("-")[1])
        missing = [] if recorded_steps is None else sorted(set(range(1, step + 1)) - recorded_steps)
        damage = checkpoint_damage(checkpoint) or (
            f"metrics.jsonl has no row of step {missing[0]}, which it trained (a damaged line)" if missing else None)
        if damage is None:
            for problem in damaged:
                log.warning("%s; resuming from %s instead", problem, checkpoint.name)
            return checkpoint
        damaged.append(f"{shown_path(checkpoint)}: {damage}")
    if damaged:
        raise ConfigError(f"{damaged[0]}, and no earlier checkpoint is whole: delete {shown_path(trainer_dir)} to "
                          "train the run again from its first step")
    return None


def load_saved_weights(model, checkpoint: Path) -> None:
    """Load a full-weights checkpoint into `model` as `from_pretrained` reads it. transformers 5 keeps some weights
    fused in memory (a MoE block's experts as one `experts.gate_up_proj` tensor) and saves them in the hub's layout
    (`experts.0.gate_proj.weight`, ...); its Trainer resumes with a plain `load_state_dict(strict=False)` that skips
    them with a warning only, so a resumed Qwen3-30B-A3B run went on from its step-0 experts. `from_pretrained`
    converts them back; every tensor is then copied, strictly."""
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=model.dtype, local_files_only=True)
    model.load_state_dict(saved.state_dict(), strict=True)


def check_run_folder(run: RunConfig, out_dir: Path) -> None:
    """A run folder belongs to one configuration: resuming it with another (another seed included) would train
    nothing new and relabel the old run's results, so it is refused, in one line, before anything is written."""
    path = out_dir / "run_config.json"
    if not path.exists():
        return
    try:
        recorded = read_json(path)
    except CorruptFileError as error:
        recorded = error
    if not isinstance(recorded, dict) or not isinstance(recorded.get("config"), dict):
        # Damaged, or written before runs recorded their whole config: with nothing to compare, resuming could
        # relabel the run's results with another configuration.
        raise ConfigError(f"{shown_path(path)} does not say which configuration the run in {shown_path(out_dir)} "
                          "has (damaged, or written by an older kit): give another --out, or delete the folder to "
                          "train this run there from the start")
    recorded = recorded["config"]
    # how the explorer's replies are got (live, recorded, replayed) is not the run's identity
    before, now = flat(run_identity(recorded)), flat(as_json(run_identity(run)))
    differing = sorted(key for key in before.keys() | now.keys() if before.get(key) != now.get(key))
    if differing:
        shown = ", ".join(f"{key} {before.get(key)!r} -> {now.get(key)!r}" for key in differing[:4])
        more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
        raise ConfigError(f"{out_dir} holds a run of another configuration ({shown}{more}): resume it with its own "
                          "settings, or give another --out")


def as_json(value):
    """`value` as JSON reads it back (tuples as lists): how a recorded config compares with a live one."""
    return json.loads(json.dumps(value, default=str))


def flat(mapping: dict, prefix: str = "") -> dict:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`."""
    out = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        out.update(flat(value, name + ".") if isinstance(value, dict) else {name: value})
    return out
