"""`python -m coevolve_lib evaluate`: zero-shot (or checkpoint) evaluation of a chat model on a profile's benchmark,
with the benchmark's own metric (`Environment.evaluate`: BFCL multi-turn success, AppWorld TGC and SGC).

`python -m coevolve_lib evaluate --model tiny --set environment.category=base --split val --out results/x.json`

The benchmark's own settings (BFCL's data version and category, AppWorld's data root) are the profile's `environment`
section: `--set environment.<field>=<value>`.

Each finished episode is appended to `<out>.rollouts.jsonl` as it ends (BFCL: a killed run started again with the
same arguments keeps those episodes and runs only the remaining tasks); the results JSON (schema `results/v2`,
`core/results.py`) records the scale beside the value, plus per-task outcomes.
"""

from __future__ import annotations

import json
import sys

from coevolve_lib import profiles
from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.environment import (
    checked_evaluation,
    environment_class,
    make_environment,
)
from coevolve_lib.core.paths import RUNS_DIR, checked_output
from coevolve_lib.core.results import headline_row
from coevolve_lib.core.run_lock import output_lock
from coevolve_lib.core.user_yaml import parse_overrides
from coevolve_lib.rollout.agent import rollout_phase
from coevolve_lib.rollout.evaluation import load_evaluated_model


def main(argv: list[str] | None = None) -> int:
    parser = profiles.ArgumentParser("python -m coevolve_lib evaluate", __doc__)
    parser.add_argument("--profile", default="tiny",
                        help="a profile of configs/ or a .yaml profile file giving the defaults (default: tiny)")
    parser.add_argument("--model", help="tiny, smollm2-135m, a local path/hub id, or openai:<model>")
    parser.add_argument("--environment", dest="environment_name", help="a registered environment (bfcl, appworld, an "
                        "installed entry point) or a module:Class reference (`python -m coevolve_lib extensions` lists "
                        "them)")
    parser.add_argument("--benchmark", dest="benchmark", help="--environment's name before (read, with a notice, "
                        "until the next release)")
    parser.add_argument("--split", help="the environment's split (BFCL: val, train or all; AppWorld: dev, test_normal, "
                        "test_challenge)")
    parser.add_argument("--limit", help="first N tasks of the split")
    parser.add_argument("--all-tasks", action="store_true", help="ignore the profile's limit: the whole split")
    parser.add_argument("--seed", help="sampling seed")
    parser.add_argument("--temperature", help="evaluation temperature (default: the profile's, 0)")
    parser.add_argument("--max-new-tokens", help="tokens per reply (rollout section)")
    parser.add_argument("--tool-format", help="auto, native or prompt (rollout section)")
    parser.add_argument("--tool-docs", help="full, compact or none (rollout section)")
    parser.add_argument("--batch-size", help="episodes batched per model call (rollout section)")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint for openai: models")
    parser.add_argument("--out", required=True, help="results JSON path (episodes go to <out>.rollouts.jsonl)")
    parser.add_argument("--no-resume", action="store_true", help="start afresh instead of keeping finished episodes")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a profile value, e.g. --set rollout.max_steps_per_episode=10 or --set "
                             "environment.category=base (repeatable; the options above win)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    # Values stay strings here: the config validates and converts them, with one error line per bad value.
    given = {k: v for k, v in vars(args).items() if v is not None and k not in ("quiet", "set")}
    if "benchmark" in given:
        print("note: --benchmark is --environment now; the old name is read until the next release", file=sys.stderr)
        given.setdefault("environment_name", given.pop("benchmark"))
    evaluation = {k: given[k] for k in ("model", "environment_name", "split", "limit", "seed", "temperature",
                                        "base_url") if k in given}
    rollout = {k: given[k] for k in ("max_new_tokens", "tool_format", "tool_docs", "batch_size") if k in given}
    if args.all_tasks:
        evaluation["limit"] = None
    run = profiles.run_config(args.profile, profiles.deep_merge(parse_overrides(args.set),
                                                                {"evaluation": evaluation, "rollout": rollout}))
    cfg, out = run.evaluation, checked_output(args.out)
    if out.is_dir():  # found now, not after the whole evaluation ran
        raise ConfigError(f"--out {out} is a directory; give the results file's path (e.g. {out / 'result.json'})")
    with output_lock(out):  # one evaluation per results file at a time
        if args.no_resume:
            out.with_suffix(".rollouts.jsonl").unlink(missing_ok=True)
        environment = make_environment(cfg.environment_name, run.data_engine,
                                       RUNS_DIR / "evaluate" / environment_class(cfg.environment_name).name)
        try:  # an EvaluationError (nothing measured) is one line and status 1, in coevolve_lib.__main__
            rollout = rollout_phase(cfg.rollout, temperature=cfg.temperature, seed=cfg.seed)
            result = checked_evaluation(environment, environment.evaluate(
                load_evaluated_model(cfg), cfg, out, rollout, experiment="zero_shot", progress=not args.quiet))
        finally:
            environment.close()
    headline = headline_row(result)
    others = result["metrics"][1:]
    for row in result["metrics"]:
        temperature = row.get("temperature", cfg.temperature)
        print(f"{cfg.model} on {row['eval_set']} (n={row['n']}, T={temperature}): {row['metric']} "
              f"{row['value'] if row['value'] is None else format(row['value'], '.2f')}% ({row['correct']}/{row['n']})")
    details = result.get("details") or {}
    counted = [f"{name.replace('_', ' ')} {details[name]}" for name in ("model_errors", "environment_errors")
               if name in details]
    if counted:
        print(", ".join(counted))
    print(json.dumps({"model": result["model"], **{k: headline[k] for k in ("eval_set", "n", "value")},
                      **{row["metric"]: row["value"] for row in others}}))
    return 0
