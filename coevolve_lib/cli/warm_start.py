"""`python -m coevolve_lib warm-start`: build (or find) a profile's warm start and check what it gives GRPO
(`training.policy_check`); --ship copies it into the package (`engine.warm_start.ship_warm_start`)."""

from __future__ import annotations

import json
from pathlib import Path

from coevolve_lib.core.config import ConfigError, run_identity
from coevolve_lib.core.environment import environment_class
from coevolve_lib.core.models import set_torch_threads
from coevolve_lib.core.paths import RUNS_DIR, profile_label
from coevolve_lib.core.records import config_hash
from coevolve_lib.engine import warm_start
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.profiles import profile_parser, run_config_from_args
from coevolve_lib.training.policy_check import check_policy


def main(argv: list[str] | None = None) -> int:
    parser = profile_parser("python -m coevolve_lib warm-start", f"{__doc__}\n\n{warm_start.__doc__}",
                            "environment.warm_start.max_steps=600")
    parser.add_argument("--ship", action="store_true",
                        help="build it here (not from the shipped copy) and ship it: copy it to "
                             "coevolve_lib/data/warm_start/<profile> with its manifest")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    run = run_config_from_args(args)
    settings = environment_class(run.evaluation.environment_name).Settings(**run.environment)
    if not getattr(settings, "warm_start", None) or not settings.warm_start.enabled:
        raise ConfigError(f"profile {args.profile} has no warm start (environment.warm_start.enabled is false, or "
                          f"its environment, {run.evaluation.environment_name}, has none)")
    set_torch_threads(run.training.torch_threads)
    # the check's D_0 and held-out sets live in a folder of the run's own settings (a --set changes them)
    folder = RUNS_DIR / f"warm_start_{profile_label(args.profile)}_{config_hash(run_identity(run))}"
    engine = DataEngine(run.data_engine, folder, run.evaluation.environment_name)
    engine.initial_pool(progress=not args.quiet)
    path = engine.policy(progress=not args.quiet, use_shipped=not args.ship)
    check = check_policy(engine, path, max_completion_tokens=run.training.max_completion_tokens,
                         progress=not args.quiet)
    built = json.loads((Path(path) / "warm_start.json").read_text()) if (Path(path) / "warm_start.json").exists() \
        else json.loads((Path(path) / "manifest.json").read_text())["summary"]
    print(json.dumps({"policy": path, "check": check, "build": {k: v for k, v in built.items() if k != "recipe"}},
                     indent=1))
    if args.ship:
        command = " ".join(["python -m coevolve_lib warm-start", f"--profile {args.profile}",
                            *[f"--set {s}" for s in args.set], "--ship"])
        recipe = engine.environment.warm_start_recipe()
        folder = warm_start.ship_warm_start(path, args.profile, recipe, config_hash(recipe),
                                 {**{k: v for k, v in built.items() if k not in ("recipe", "recipe_key")},
                                  "check": check}, command)
        print(f"shipped to {folder}")
    return 0
