"""Extensions from outside the kit: how a profile's name for an environment, a signal type or a pool update is found.

A name is looked up in three places, in this order:
1. the kit's registry (`core.environment.ENVIRONMENTS`, `engine.signals.SIGNALS`, `engine.pool_updates.POOL_UPDATES`),
   which also holds whatever a `register` call in an imported module added;
2. the installed packages' entry points of the registry's group (`ENTRY_POINT_GROUPS`), read with `importlib.metadata`:
   a package declares `[project.entry-points."coevolve_lib.environments"] library = "my_pkg.env:LibraryEnv"` in its
   `pyproject.toml`, is installed (`pip install -e .`), and every command of `python -m coevolve_lib` knows `library`;
3. a `"module:attribute"` reference written in the profile itself
   (`evaluation.environment_name: my_pkg.env:LibraryEnv`), imported when the profile is loaded: a module on
   `sys.path` (the working folder, or `PYTHONPATH`) needs no install.

Importing a module a profile names runs that module, as `pip install` does: a profile is the user's own file. Model
output is never a profile. `registered(...)` lists what each place holds and where it came from
(`python -m coevolve_lib extensions`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re

ENTRY_POINT_GROUPS = {"environments": "coevolve_lib.environments", "signals": "coevolve_lib.signals",
                      "pool_updates": "coevolve_lib.pool_updates"}
"""Registry -> the entry-point group installed packages declare their extensions in."""
REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
"""A `module:attribute` reference (dotted names both sides), as entry points write them."""


ORIGINS: dict[tuple[str, str], str] = {}
"""(registry kind, name) -> where an extension `find` loaded from outside came from (what `registered` shows)."""


class ExtensionError(ValueError):
    """A name that no registry, entry point or module reference gives, or whose code cannot be loaded: one line."""


def entry_points(kind: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points installed packages declare for the registry `kind` (read at each call: a test or a notebook
    may install one mid-session)."""
    return {point.name: point for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUPS[kind])}


def is_reference(name: str) -> bool:
    return isinstance(name, str) and REFERENCE.match(name) is not None


def load_reference(reference: str, what: str):
    """The object `module:attribute` names; an ExtensionError naming `what` when the module or attribute is not
    there, or the module fails to import."""
    module_name, _, attribute = reference.partition(":")
    try:
        target = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 (a user's module can raise anything on import: one line, not a trace)
        raise ExtensionError(f"{what} {reference!r}: cannot import {module_name} ({type(error).__name__}: "
                             f"{' '.join(str(error).split())[:300]})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ExtensionError(f"{what} {reference!r}: {module_name} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def find(kind: str, name: str, registry: dict, what: str):
    """What `name` names for the registry `kind`: the registry's entry, else an installed entry point of that name,
    else `name` read as a `module:attribute` reference; an ExtensionError (one line, with the names that exist) when
    none of the three has it. Where an outside one came from goes into `ORIGINS`; the caller stores what it loaded in
    its registry."""
    if name in registry:
        return registry[name]
    points = entry_points(kind)
    if name in points:
        point = points[name]
        found = load_reference(point.value, f"{what} {name!r} (entry point of {_distribution(point)})")
        ORIGINS[(kind, name)] = f"entry point {ENTRY_POINT_GROUPS[kind]} of {_distribution(point)} ({point.value})"
        return found
    if is_reference(name):
        found = load_reference(name, what)
        ORIGINS[(kind, name)] = f"module reference in a profile ({name})"
        return found
    raise ExtensionError(f"unknown {what} {name!r}; registered: {sorted(registry)}; installed entry points "
                         f"({ENTRY_POINT_GROUPS[kind]}): {sorted(points)}; or a module:Class reference")


def check_class(found, base: type, reference: str, what: str, named: str = "name") -> type:
    """`found` if it is a subclass of `base` with a non-empty string attribute `named` (the name its records and
    messages carry), else an ExtensionError saying what it is."""
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ExtensionError(f"{what} {reference!r} is {type(found).__name__} {getattr(found, '__qualname__', '')!s}"
                             f", not a subclass of {base.__module__}.{base.__qualname__}".replace("  ", " "))
    if not isinstance(getattr(found, named, None), str) or not getattr(found, named):
        raise ExtensionError(f"{what} {reference!r} has no `{named}` (a non-empty string its records carry)")
    return found


def registered(kind: str, registry: dict) -> list[tuple[str, str]]:
    """(name, where from) of each name the registry `kind` can give now: its entries (the kit's own, registered by
    an import, or loaded from an entry point or a reference), then the installed entry points not loaded yet."""
    rows = []
    for name, entry in registry.items():
        origin = ORIGINS.get((kind, name))
        if origin is None:
            module = entry if isinstance(entry, str) else getattr(entry, "__module__", type(entry).__module__)
            origin = "the kit" if str(module).startswith("coevolve_lib.") else f"registered by {module}"
        rows.append((name, origin))
    rows += [(name, f"entry point {ENTRY_POINT_GROUPS[kind]} of {_distribution(point)} ({point.value}), not loaded")
             for name, point in sorted(entry_points(kind).items()) if name not in registry]
    return rows


def _distribution(point: importlib.metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"
