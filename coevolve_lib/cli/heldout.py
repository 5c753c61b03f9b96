"""`python -m coevolve_lib heldout`: build a profile's held-out sets, print what they hold; --commit records their
ids (`engine.heldout`)."""

from __future__ import annotations

import json
from collections import Counter

from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.paths import RUNS_DIR, profile_label
from coevolve_lib.core.results import HELDOUT_TITLES
from coevolve_lib.engine import heldout
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.heldout import COMMITTED_SETS, commit_set
from coevolve_lib.profiles import profile_parser, run_config_from_args


def main(argv: list[str] | None = None) -> int:
    parser = profile_parser("python -m coevolve_lib heldout", f"{__doc__}\n\n{heldout.__doc__}",
                            "data_engine.heldout.new_tasks.size=50")
    parser.add_argument("--commit", action="store_true",
                        help=f"record the sets' task ids in coevolve_lib/data/{COMMITTED_SETS.name}")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    run = run_config_from_args(args)
    if not run.data_engine.heldout.sets():
        raise ConfigError(f"profile {args.profile} has no held-out set (data_engine.heldout.*.size are 0)")
    engine = DataEngine(run.data_engine, RUNS_DIR / f"heldout_{profile_label(args.profile)}",
                        run.evaluation.environment_name)
    for name in run.data_engine.heldout.sets():
        key, tasks = engine.heldout(name, progress=not args.quiet)
        calls = Counter(len(t["reference_actions"]) for t in tasks)
        print(json.dumps({"set": name, "title": HELDOUT_TITLES[name], "key": key, "tasks": len(tasks),
                          "environments": len({t["provenance"]["origin_task"] for t in tasks}),
                          "reference_calls": dict(sorted(calls.items()))}, indent=1))
        if args.commit:
            commit_set(key, tasks, args.profile)
            print(f"committed {name} to {COMMITTED_SETS}")
    return 0
