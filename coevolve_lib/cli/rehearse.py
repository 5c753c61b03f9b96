"""`python -m coevolve_lib rehearse --profile paper-qwen3-4b --out runs/rehearse/paper-qwen3-4b`: a paper profile's
GPU-node path on CPU (`training.rehearsal`): the printed train command on 2 processes with the backbone's stand-in
(built first, once, if `make setup` did not), a kill and a resume, then `evaluate` on the trained model;
`<out>/rehearsal.json` says what ran. Exit status 1, with the checks that failed in one line, when any of them did
(the resume, the evaluation, vLLM's context)."""

from __future__ import annotations

import json
import sys

from coevolve_lib import profiles
from coevolve_lib.core.paths import RUNS_DIR, checked_output, profile_label
from coevolve_lib.engine import standins
from coevolve_lib.training import rehearsal


def main(argv: list[str] | None = None) -> int:
    parser = profiles.profile_parser("python -m coevolve_lib rehearse", f"{__doc__}\n\n{rehearsal.__doc__}",
                                     "training.lora.enabled=true")
    parser.add_argument("--out", help="rehearsal folder (default: runs/rehearse/<profile>); its run is redone")
    args = parser.parse_args(argv)
    out = checked_output(args.out or RUNS_DIR / "rehearse" / profile_label(args.profile))
    if out.exists() and not out.is_dir():
        raise profiles.ConfigError(f"--out {out} is a file; give a folder")
    run, _ = rehearsal.rehearsal_run(args.profile, args.set)
    standins.build_all([run.model])  # the stand-in, kept when it is built already
    record = rehearsal.rehearse(args.profile, out, args.set)
    shown = ("profile", "architecture", "processes", "rollout_engine", "steps", "rounds", "tool_calls_parsed",
             "lora_trainable_params", "weights_moved", "resumed", "resume_failures", "evaluated", "vllm", "seconds")
    print(json.dumps({key: getattr(record, key) for key in shown}))
    if record.failed_checks:
        print(f"python -m coevolve_lib rehearse: failed: {'; '.join(record.failed_checks)} "
              f"({out / 'rehearsal.json'})", file=sys.stderr)
        return 1
    return 0
