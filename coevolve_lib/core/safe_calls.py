"""Parse model-written function calls with `ast`, never with eval/exec.

The official BFCL executor `eval`s model text behind a small denylist, so `__import__('os')...` or
`open(...)` run for real. The kit instead accepts only `name(literal, key=literal, ...)`: the callee is a
plain name (optionally restricted to `allowed_names`) and every argument is a literal (str, int, float,
bool, None and list/tuple/set/dict of literals). Anything else becomes a `CallParseError` with a reason.
An accepted call is rebuilt as canonical source (`Call.to_source`), which is what the kit records and what
the official checker would re-execute. `parse_builtin_call` reads a call of a Python builtin (BFCL's `eval` runs
`print`) for grading it without running Python's builtin: literal arguments and accepted calls only.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from functools import cached_property
from keyword import iskeyword

MAX_SOURCE_CHARS = 100_000
"""Longest call text accepted (BFCL ground-truth calls are under 2 kB)."""
MAX_LITERAL_DEPTH = 32
"""Deepest container nesting accepted in one argument value."""
MAX_INT_DIGITS = 4300
"""Most decimal digits of an integer argument: CPython's default int-to-str limit, above which the call could not
be recorded (`repr` raises). A hex, octal or binary literal reaches it with far fewer characters."""
_INT_BOUND = 10**MAX_INT_DIGITS


class CallParseError(ValueError):
    """The text is not one safe literal-only function call; the message says why."""


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple = ()  # positional literal values
    kwargs: tuple = ()  # (key, literal value) pairs in source order

    def to_source(self) -> str:
        return self._source

    @cached_property  # written once per call: the budget, the record and the executor all read it
    def _source(self) -> str:
        parts = [repr(v) for v in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})"

    @property
    def kwargs_dict(self) -> dict:
        return dict(self.kwargs)


def parse_call(text: str, allowed_names: Collection[str] | None = None) -> Call:
    """Parse one call such as `f(a=1, b='x')`; raise CallParseError with the reason otherwise."""
    node, lines = _parse_expression(text)
    return _call_from_node(node, lines, allowed_names)


def parse_call_list(text: str, allowed_names: Collection[str] | None = None) -> tuple[list[Call], list[str]]:
    """Parse `[f(a=1), g()]` (BFCL prompt style), a tuple of calls, or one bare call.

    Returns the accepted calls and one error message per rejected element. Text that is not a call list at
    all (prose, an empty string, a number) returns `([], [reason])`.
    """
    if isinstance(text, str):
        text = text.strip("`\n ")  # the same trimming as BFCL's `default_decode_execute_prompting`
    try:
        node, lines = _parse_expression(text)
    except CallParseError as e:
        return [], [str(e)]
    if isinstance(node, ast.Call):
        elements = [node]
    elif isinstance(node, (ast.List, ast.Tuple)):
        elements = node.elts
    else:
        return [], [f"not a call or a list of calls (got a {type(node).__name__} expression)"]
    calls, errors = [], []
    for index, element in enumerate(elements):
        try:
            calls.append(_call_from_node(element, lines, allowed_names))
        except CallParseError as e:
            errors.append(f"call {index}: {e}")
    return calls, errors


def call_from_json(name: str, arguments: dict | str | None, allowed_names: Collection[str] | None = None) -> Call:
    """Build a Call from a native tool call (`arguments` is a dict, a JSON object string, or None)."""
    # ASCII only: a call string is re-parsed, and Python would read `ｌｓ` as `ls` (see `_call_from_node`).
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or name.startswith("__"):
        raise CallParseError(f"invalid function name {str(name)[:80]!r}")
    check_allowed(name, allowed_names)
    if arguments is None or arguments == "":
        arguments = {}
    if isinstance(arguments, str):
        if len(arguments) > MAX_SOURCE_CHARS:
            raise CallParseError(f"arguments longer than {MAX_SOURCE_CHARS} characters")
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as e:
            raise CallParseError(f"arguments are not valid JSON: {e}") from None
    if not isinstance(arguments, dict):
        raise CallParseError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    size = 0
    for key, value in arguments.items():
        # As a keyword in the recorded source: `class=1` and non-ASCII names (read back NFKC-normalized) would not
        # parse back as this call.
        if not isinstance(key, str) or not key.isidentifier() or not key.isascii() or iskeyword(key):
            raise CallParseError(f"invalid argument name {str(key)[:80]!r}")
        size += len(key) + _check_json_value(value, depth=0)
    if size > MAX_SOURCE_CHARS:  # an already-decoded dict skipped the length check on the JSON text
        raise CallParseError(f"arguments longer than {MAX_SOURCE_CHARS} characters")
    return _readable(Call(name, (), tuple(arguments.items())))


def _readable(call: Call) -> Call:
    """`call`, if its source can be read back (escapes can make it longer than what was parsed)."""
    if len(call.to_source()) > MAX_SOURCE_CHARS:
        raise CallParseError(f"{call.name}: the call's source would be longer than {MAX_SOURCE_CHARS} characters")
    return call


@dataclass(frozen=True)
class Argument:
    """One argument of `parse_builtin_call`: a literal `value`, or a literal-only `call` whose result is the value;
    `keyword` is its name when written `key=...`, and `unpack` is "*" or "**" when written `*...` or `**...`."""
    value: object = None
    call: Call | None = None
    keyword: str | None = None
    unpack: str = ""


def parse_builtin_call(text: str, allowed_names: Collection[str]) -> tuple[str, list[Argument]]:
    """Read a call of a Python builtin, such as `print(*['x'], ls(), sep='/')`, as `eval` reads it; nothing runs.

    Returns the callee's name as Python's parser reads it (NFKC-normalized: `ｐｒｉｎｔ` is `print`) and the arguments
    in the order Python evaluates them (positional, then keyword). Each argument is a literal or a call that
    `parse_call` accepts with `allowed_names`, optionally unpacked (`*` / `**`); anything else, and a repeated
    keyword (a SyntaxError in Python, so nothing of the call runs), is a CallParseError."""
    node, lines = _parse_expression(text)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallParseError("not a call of a plain name")
    name = node.func.id
    arguments = []
    for arg in node.args:
        starred = isinstance(arg, ast.Starred)
        arguments.append(_argument(arg.value if starred else arg, name, lines, allowed_names,
                                   None, "*" if starred else ""))
    _check_unique_keywords(node.keywords, name)
    for keyword in node.keywords:
        arguments.append(_argument(keyword.value, name, lines, allowed_names, keyword.arg,
                                   "" if keyword.arg else "**"))
    return name, arguments


def _argument(node: ast.expr, name: str, lines, allowed_names, keyword: str | None, unpack: str) -> Argument:
    if isinstance(node, ast.Call):
        return Argument(call=_call_from_node(node, lines, allowed_names), keyword=keyword, unpack=unpack)
    return Argument(value=_literal(node, name, depth=0), keyword=keyword, unpack=unpack)


def _parse_expression(text) -> tuple[ast.expr, list[bytes] | None]:
    """`text` as one Python expression node; every failure (size, syntax, encoding, depth) is a CallParseError.

    Also returns the UTF-8 lines of the parsed text (what ast's column offsets count) when it is not all ASCII,
    so that names can be checked as written; None for ASCII text."""
    if not isinstance(text, str):
        raise CallParseError(f"expected a string, got {type(text).__name__}")
    if len(text) > MAX_SOURCE_CHARS:
        raise CallParseError(f"input longer than {MAX_SOURCE_CHARS} characters")
    if "\x00" in text:
        raise CallParseError("input contains a null byte")
    if not text.strip():
        raise CallParseError("empty input")
    text = text.strip()
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise CallParseError(f"invalid syntax: {e.msg}") from None
    except (ValueError, UnicodeError, RecursionError, MemoryError, OverflowError) as e:
        # Lone surrogates, too-deep nesting for the parser, ints over the digit limit, and the like.
        raise CallParseError(f"unparsable input: {type(e).__name__}: {str(e)[:200]}") from None
    # The tokenizer accepted the text, so it encodes (no lone surrogates); bytes.splitlines breaks where it does.
    return node, None if text.isascii() else text.encode("utf-8").splitlines()


def _call_from_node(node: ast.expr, lines: list[bytes] | None, allowed_names: Collection[str] | None) -> Call:
    if not isinstance(node, ast.Call):
        raise CallParseError(f"not a function call (got a {type(node).__name__} expression)")
    if not isinstance(node.func, ast.Name):
        raise CallParseError(f"the callee must be a plain function name, not a {type(node.func).__name__} expression")
    name = node.func.id
    if lines is not None:
        # ast NFKC-normalizes identifiers, so full-width `ｌｓ()` parses as `ls`. BFCL's executor prefixes only ASCII
        # names with their instance, so there it is a NameError: refuse such a name as written, before anything runs.
        written = lines[node.func.lineno - 1][node.func.col_offset:node.func.end_col_offset]
        if not written.isascii():
            raise CallParseError(f"function name {written.decode('utf-8', 'replace')!r} is not ASCII")
    if name.startswith("__"):
        raise CallParseError(f"dunder name {name!r} is not allowed")
    check_allowed(name, allowed_names)
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise CallParseError(f"{name}: *args are not allowed")
        args.append(_literal(arg, name, depth=0))
    if any(keyword.arg is None for keyword in node.keywords):
        raise CallParseError(f"{name}: **kwargs are not allowed")
    _check_unique_keywords(node.keywords, name)
    kwargs = []
    for keyword in node.keywords:
        kwargs.append((keyword.arg, _literal(keyword.value, f"{name}({keyword.arg}=...)", depth=0)))
    return _readable(Call(name, tuple(args), tuple(kwargs)))


def _check_unique_keywords(keywords: list[ast.keyword], name: str) -> None:
    # ast.parse accepts a repeated keyword; only compile() refuses it. A set keeps the check linear in the keywords.
    seen = set()
    for keyword in keywords:
        if keyword.arg is None:
            continue
        if keyword.arg in seen:
            raise CallParseError(f"{name}: keyword argument {keyword.arg!r} repeated")
        seen.add(keyword.arg)


def check_allowed(name: str, allowed_names: Collection[str] | None) -> None:
    if allowed_names is not None and name not in allowed_names:
        raise CallParseError(f"unknown function {name!r}")


def _literal(node: ast.expr, where: str, depth: int):
    """The Python value of a literal node; a stricter `ast.literal_eval` that also bounds nesting depth."""
    if depth > MAX_LITERAL_DEPTH:
        raise CallParseError(f"{where}: argument nested deeper than {MAX_LITERAL_DEPTH} levels")
    if isinstance(node, ast.Constant):
        return _scalar(node.value, where)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            value = _scalar(operand.value, where)
            return -value if isinstance(node.op, ast.USub) else value
        raise CallParseError(f"{where}: a sign applies only to a number")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(item, where, depth + 1) for item in node.elts]
        if isinstance(node, ast.List):
            return items
        if isinstance(node, ast.Tuple):
            return tuple(items)
        return _hashable(lambda: set(items), where)
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise CallParseError(f"{where}: ** inside a dict is not allowed")
        keys = [_literal(key, where, depth + 1) for key in node.keys]
        values = [_literal(value, where, depth + 1) for value in node.values]
        return _hashable(lambda: dict(zip(keys, values)), where)
    kind = {ast.Call: "a nested call", ast.Name: "a variable name", ast.Attribute: "an attribute access",
            ast.Lambda: "a lambda", ast.JoinedStr: "an f-string", ast.Starred: "a starred expression",
            ast.NamedExpr: "an assignment expression"}.get(type(node), f"a {type(node).__name__} expression")
    raise CallParseError(f"{where}: argument values must be literals, not {kind}")


def _scalar(value, where: str):
    # bool is a subclass of int; bytes, complex and Ellipsis are literals no BFCL function takes.
    if value is None or type(value) in (str, bool):
        return value
    if type(value) is int:
        if abs(value) >= _INT_BOUND:
            raise CallParseError(f"{where}: integer longer than {MAX_INT_DIGITS} digits")
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise CallParseError(f"{where}: non-finite float")  # repr(inf) would not round-trip
        return value
    raise CallParseError(f"{where}: unsupported literal type {type(value).__name__}")


def _hashable(build, where: str):
    try:
        return build()
    except TypeError as e:  # an unhashable set element or dict key, e.g. {[1]: 2}
        raise CallParseError(f"{where}: {e}") from None


def _check_json_value(value, depth: int) -> int:
    """Refuse what `_literal` refuses in a decoded JSON value; return its size (characters of strings, 1 otherwise)."""
    if depth > MAX_LITERAL_DEPTH:
        raise CallParseError(f"argument nested deeper than {MAX_LITERAL_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise CallParseError("non-finite float")
    if type(value) is int and abs(value) >= _INT_BOUND:
        raise CallParseError(f"integer longer than {MAX_INT_DIGITS} digits")
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return 1 + sum(_check_json_value(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return 1 + sum(len(str(key)) + _check_json_value(item, depth + 1) for key, item in value.items())
    return 1
