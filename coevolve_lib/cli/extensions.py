"""`python -m coevolve_lib extensions`: every environment, signal type and pool update a profile can name now, and where
each comes from (the kit, a `register` call, an installed package's entry point, a profile's `module:Class`).

With `--profile`, the profile's own names are loaded first (its benchmark, signal types and pool update), so a
`module:Class` it names is listed with the rest. How to add one from a package of your own: docs/architecture.md.
"""

from __future__ import annotations

from coevolve_lib.core.environment import registered_environments
from coevolve_lib.core.extensions import ENTRY_POINT_GROUPS, registered
from coevolve_lib.engine.pool_updates import POOL_UPDATES
from coevolve_lib.engine.signals import SIGNALS
from coevolve_lib.profiles import ArgumentParser, run_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser("python -m coevolve_lib extensions", __doc__)
    parser.add_argument("--profile", help="also load what this profile names (a name of configs/ or a .yaml path)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="override a value of --profile (repeatable)")
    args = parser.parse_args(argv)
    if args.profile:
        run_config(args.profile, args.set)  # its names are found (and loaded) by the profile check
    tables = {"environments": registered_environments(), "signals": registered("signals", SIGNALS),
              "pool_updates": registered("pool_updates", POOL_UPDATES)}
    for kind, rows in tables.items():
        print(f"{kind} (entry-point group {ENTRY_POINT_GROUPS[kind]}):")
        width = max((len(name) for name, _ in rows), default=0)
        for name, origin in rows:
            print(f"  {name:<{width}}  {origin}")
    return 0
