"""YAML the user gives: a file (a profile, a sweep) and a value typed on a command line or in a notebook, read with
PyYAML's safe loader bounded in depth (and, for a typed value, without aliases), so that either fails in one line; and
`section.field=value` overrides read into a nested mapping."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from coevolve_lib.core.config import ConfigError, quoted
from coevolve_lib.core.paths import shown_path

MAX_YAML_DEPTH = 64
"""Deepest nesting of collections a YAML text may have (the kit's profiles nest 4 deep): deeper is refused in one
line before Python's recursion limit makes it a traceback (`"[" * 2000 + "]" * 2000` did)."""


class _BoundedLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing nesting deeper than `MAX_YAML_DEPTH`."""

    def compose_node(self, parent, index):
        self.depth = getattr(self, "depth", 0) + 1
        try:
            if self.depth > MAX_YAML_DEPTH:
                raise ConfigError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _NoAliasLoader(_BoundedLoader):
    """The bounded loader without aliases: `*a` repeats the node anchored `&a`, so a few lines of nested aliases
    expand to gigabytes (a value typed on a command line never needs one; profile files may use them)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise ConfigError(f"YAML alias *{self.peek_event().anchor} (write the value out: aliases are refused "
                              "in a value, since a few of them expand to gigabytes)")
        return super().compose_node(parent, index)


def load_yaml_file(path: Path) -> dict | list | None:
    """A YAML file of the user's (a profile, a sweep), read with `_BoundedLoader`: a ConfigError when it nests too
    deep (naming the file), a yaml.YAMLError when it is no YAML."""
    try:
        return yaml.load(path.read_text(), Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as exc:
        raise ConfigError(f"{shown_path(path)}: {exc}") from None


def read_value(text: str, what: str):
    """A value a user typed (a `--set` value, a notebook parameter), read as YAML without aliases; a ConfigError in
    one line, quoting at most a short prefix of `text`, if it is no valid value."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(getattr(exc, "problem", None) or "not valid YAML").split())
        if text.lstrip().startswith(("*", "&", "!", "%", "@", "`")):  # YAML syntax, not the text a user meant
            problem = f"YAML reads a leading {text.lstrip()[0]!r} as syntax: quote the value, e.g. " \
                      f"--set \"key='{text.strip()[:20]}'\""
        raise ConfigError(f"{what}: {quoted(text)} is not a valid value ({problem})") from None
    except ValueError:  # the only one PyYAML lets through: an integer past Python's digit limit
        raise ConfigError(f"{what}: {quoted(text)} is not a valid value (an integer of more than "
                          f"{sys.get_int_max_str_digits()} digits)") from None


def parse_overrides(items: list[str]) -> dict:
    """`["training.max_steps=20", "data_engine.explore.runs=2"]` -> a nested mapping (values read as YAML by
    `read_value`)."""
    out: dict = {}
    for item in items:
        key, sep, text = str(item).partition("=")
        if not sep or not key or "" in key.split("."):
            raise ConfigError(f"override {quoted(item)} is not of the form section.field=value")
        value = read_value(text, f"override {quoted(key)}")
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {quoted(item)} sets a field inside {part!r}, which is a value")
        node[leaf] = value
    return out
