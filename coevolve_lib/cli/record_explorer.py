"""`python -m coevolve_lib record-explorer`: record the explorer calls of the Table 12 rows that `make reproduce`
replays (notebook 12's `explorer_recordings` in configs/reproduce.yaml), so that a profile without an endpoint still
shows an LLM explorer's runs.

For each such row, its model (`openai:<folder>`, a local model folder) is served on loopback by `vllm serve` (vLLM's
CPU build, `make vllm`; `--server transformers` for `transformers serve`), and the row's runs (synthesis only, then
CoEvolve) train in a scratch folder with `data_engine.llm_calls=record`, appending every explorer reply to the row's
recording. The CoEvolve run asks D_0's calls again: the answered ones come from the recording, the failed ones are
asked again (`record` asks a recorded model error again), and their new replies replace the failures, so both replays
see the same D_0, the last one recorded. A run whose D_0 holds no task ends there: that is what the row then shows.
An existing recording is replaced only by one whose share of model errors is at most `core.llm_calls.MAX_ERROR_SHARE`
(5%): a recording of mostly errors would replay an explorer that was never heard (`transformers serve`'s
hermes-style tool-call parser raises on the tiny policy's malformed `<tool_call>` blocks, where vLLM's leaves them in
the reply's content: docs/log.md).
The runs `make reproduce` measures are the replays, in the study's own folders.
"""

from __future__ import annotations

import argparse
import os
import shutil

from coevolve_lib.cli.local_servers import transformers_serve, vllm_serve
from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.llm_calls import commit_recording
from coevolve_lib.core.paths import REPO_ROOT, RUNS_DIR, profile_label, shown_path
from coevolve_lib.engine.data_engine import EmptyPool
from coevolve_lib.studies.catalog import explorers
from coevolve_lib.studies.reproduce import EXPLORER_EXPERIMENT, parameters, recorded_explorers
from coevolve_lib.studies.run import variant_run
from coevolve_lib.training.loop import train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coevolve_lib record-explorer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny", help="the profile whose replayed rows are recorded (tiny)")
    parser.add_argument("--row", help="only this paper row (default: every row with a recording)")
    parser.add_argument("--server", choices=("vllm", "transformers"), default="vllm",
                        help="the row's model's server: vllm serve (.venv-vllm, `make vllm`) or transformers serve")
    args = parser.parse_args(argv)
    values = parameters(EXPLORER_EXPERIMENT, args.profile, None, False)
    recorded = recorded_explorers(args.profile, values)
    rows = [args.row] if args.row else list(recorded)
    unknown = [row for row in rows if row not in recorded]
    if not rows or unknown:
        raise ConfigError(f"configs/reproduce.yaml gives profile {args.profile} no recording for row(s) "
                          f"{unknown or '(any)'} (notebook {EXPLORER_EXPERIMENT.notebook.split('_')[0]}: "
                          f"explorer_recordings; rows with one: {sorted(recorded)})")
    scratch = RUNS_DIR / "record_explorer" / profile_label(args.profile)
    for row in rows:
        spec, recording = recorded[row][0], REPO_ROOT / recorded[row][1]
        folder = spec.removeprefix("openai:")
        if not spec.startswith("openai:") or not (REPO_ROOT / folder / "config.json").exists():
            raise ConfigError(f"row {row}: {spec} is not openai:<a local model folder> that a local server can "
                              "serve; to record an endpoint's calls, train the row's runs against it with "
                              f"--set data_engine.llm_calls=record --set data_engine.llm_record={recorded[row][1]}")
        partial = recording.with_name(f"{recording.stem}.partial{recording.suffix}")  # the committed one stays
        partial.unlink(missing_ok=True)  # until the new one is whole
        shutil.rmtree(scratch / row, ignore_errors=True)
        (scratch / row).mkdir(parents=True)
        study = explorers({row: spec}, values.get("default_row", ""))
        recording_settings = ["data_engine.llm_calls=record", f"data_engine.llm_record={shown_path(partial)}"]
        serve = vllm_serve if args.server == "vllm" else transformers_serve
        with serve(folder, scratch / row / "server.log") as (base_url, _, _):
            os.environ["OPENAI_BASE_URL"] = base_url
            for variant in study.variants:
                if variant.paper_row != row:
                    continue
                for seed in values.get("seeds", [0]):
                    run = variant_run(args.profile, [*values.get("overrides", []), *recording_settings], variant, seed)
                    out = scratch / row / f"{variant.name}_seed{seed}"
                    try:
                        train(run, out, progress=True)
                        outcome = "trained"
                    except EmptyPool as empty:
                        outcome = f"not trained: {empty}"
                    print(f"{row} {variant.name} seed {seed}: {outcome}")
        report = commit_recording(partial, recording)  # refused over the error bound: see the server's log
        print(f"{shown_path(recording)}: {report['asks']} asks, {report['errors']} model errors "
              f"({100 * report['error_share']:.1f}%), {recording.stat().st_size / 1e6:.2f} MB")
    return 0
