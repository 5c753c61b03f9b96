"""AppWorld actions as call strings: the one format the AppWorld explorer records, a synthesized task's action sequence
holds, and validation renders to code.

A call is `<app>.<api>(key=literal, ...)`, e.g. `simple_note.show_note(note_id=3)`: keyword literals only, parsed with
`safe_calls` (never evaluated), and without `access_token`: the code gets it from the login preamble every rendered
solution starts with (the supervisor's passwords, as AppWorld's own agents log in). What the kit runs is code that
AppWorld's server executes in the kit's sandbox (`server.py`); the kit itself never executes it.

    calls = ["simple_note.search_notes(query='Gate')", "simple_note.show_note(note_id=3)", ...]
    solution_code(calls, api_docs, answer_from="field:content")   # preamble + one line per call + complete_task
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from coevolve_lib.core.safe_calls import CallParseError, parse_call

DATA_VERSION = "appworld"
"""The `data_version` of AppWorld targets, specs and pool tasks (BFCL's are "v3", ...)."""
TOKEN_PARAMETER = "access_token"
"""The parameter the login preamble fills (`tokens[<app>]`); a call string never holds it."""
NO_LOGIN_APPS = ("supervisor", "api_docs")
"""Apps whose APIs need no login."""
ANSWER_COUNT = "count"
"""`answer_from` of a task whose answer is the number of items the last call returned."""
ANSWER_FIELD = "field:"
"""`answer_from` prefix of a task whose answer is one field of the last call's result (`field:content`)."""
FAILED_OUTPUT = "Execution failed"
"""How AppWorld's printed output starts when the code raised or was refused (an API's error status included)."""

_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\.([A-Za-z_]\w*\(.*\))\s*$", re.DOTALL)
_API_NAME = re.compile(r"\bapis\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)")


@dataclass(frozen=True)
class AppWorldCall:
    app: str
    api: str
    kwargs: tuple = ()
    """(name, literal value) pairs in source order."""

    @property
    def name(self) -> str:
        return f"{self.app}.{self.api}"

    def to_source(self) -> str:
        """The canonical call string (what records and task action sequences hold)."""
        return f"{self.app}.{self.api}({', '.join(f'{k}={v!r}' for k, v in self.kwargs)})"

    def as_json(self) -> dict:
        """{name, arguments}: how the Fig. 13 judge shows a call (`engine.judge`)."""
        return {"name": self.name, "arguments": dict(self.kwargs)}

    def to_code(self, login: bool) -> str:
        """The Python expression AppWorld runs: `apis.<app>.<api>(..., access_token=tokens['<app>'])` when the API
        takes a token (`login`)."""
        parts = [f"{k}={v!r}" for k, v in self.kwargs]
        if login:
            parts.append(f"{TOKEN_PARAMETER}=tokens[{self.app!r}]")
        return f"apis.{self.app}.{self.api}({', '.join(parts)})"


def parse_appworld_call(text: str, api_docs: dict | None = None) -> AppWorldCall:
    """Parse `app.api(key=literal, ...)`; CallParseError (with the reason) for anything else: another shape,
    positional arguments, an explicit access_token, or (given AppWorld's `{app: {api: doc}}`) an unknown API or
    parameter."""
    match = _CALL.match(text if isinstance(text, str) else "")
    if not match:
        raise CallParseError(f"not an AppWorld call `app.api(key=value, ...)`: {str(text)[:120]!r}")
    app, rest = match.groups()
    call = parse_call(rest)
    if call.args:
        raise CallParseError(f"{app}.{call.name}: AppWorld APIs take keyword arguments only")
    names = [k for k, _ in call.kwargs]
    if TOKEN_PARAMETER in names:
        raise CallParseError(f"{app}.{call.name}: {TOKEN_PARAMETER} comes from the login preamble, not the call")
    if api_docs is not None:
        doc = api_docs.get(app, {}).get(call.name)
        if doc is None:
            raise CallParseError(f"unknown AppWorld API {app}.{call.name}")
        known = {p["name"] for p in doc["parameters"]}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise CallParseError(f"{app}.{call.name} has no parameter(s) {unknown}")
    return AppWorldCall(app, call.name, call.kwargs)


def is_failed_output(output: str) -> bool:
    """AppWorld says the executed code failed (an API error, a refused call, an exception)."""
    return str(output).lstrip().startswith(FAILED_OUTPUT)


def api_tool_docs(api_docs: dict, apps: list[str]) -> list[dict]:
    """The apps' API docs as tool docs named `app.api` (the names rollouts' `calls` and contexts use)."""
    return [{**doc, "name": f"{app}.{api}"}
            for app in dict.fromkeys(apps) for api, doc in api_docs.get(app, {}).items()]


def needs_login(app: str, api: str, api_docs: dict) -> bool:
    """Whether the API takes an access token (its docs list `access_token`)."""
    return any(p["name"] == TOKEN_PARAMETER for p in api_docs[app][api]["parameters"])


def login_preamble(apps: list[str]) -> str:
    """Code that logs into each app with the supervisor's password and keeps the tokens in `tokens` (the phone app
    takes the phone number as its username, the others the email, as in AppWorld)."""
    lines = ['passwords = {p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}',
             "profile = apis.supervisor.show_profile()",
             "tokens = {}"]
    for app in dict.fromkeys(apps):
        if app in NO_LOGIN_APPS:
            continue
        username = 'profile["phone_number"]' if app == "phone" else 'profile["email"]'
        lines.append(f"tokens[{app!r}] = apis.{app}.login(username={username}, "
                     f"password=passwords[{app!r}])[{TOKEN_PARAMETER!r}]")
    return "\n".join(lines)


def login_apps(calls: list[AppWorldCall], api_docs: dict) -> list[str]:
    """The apps the calls need a token for, in first-use order."""
    return list(dict.fromkeys(c.app for c in calls if needs_login(c.app, c.api, api_docs)))


def call_code(call: AppWorldCall, api_docs: dict) -> str:
    """One step: run the call, keep its value in `result`, print it (the printed text is the observation)."""
    return f"result = {call.to_code(needs_login(call.app, call.api, api_docs))}\nprint(result)"


def answer_expression(answer_from: str | None) -> str | None:
    """The expression over the last `result` that a task's answer is (None: the task asks for no answer)."""
    if answer_from is None:
        return None
    if answer_from == ANSWER_COUNT:
        return "len(result)"
    if answer_from.startswith(ANSWER_FIELD):
        return f"result[{answer_from[len(ANSWER_FIELD):]!r}]"
    raise ValueError(f"unknown answer_from {answer_from!r}: {ANSWER_COUNT!r} or '{ANSWER_FIELD}<key>'")


def solution_steps(actions: list[str], api_docs: dict, answer_from: str | None = None) -> list[str]:
    """A task's reference solution as code cells to run in order in one AppWorld shell: the login preamble, one cell
    per call, then `complete_task` (with the answer `answer_from` names, if any). Cells, so that each call's output
    and error stay apart."""
    calls = [parse_appworld_call(action, api_docs) for action in actions]
    answer = answer_expression(answer_from)
    cells = [login_preamble(login_apps(calls, api_docs))] + [call_code(call, api_docs) for call in calls]
    cells.append(f"apis.supervisor.complete_task(answer={answer})" if answer else "apis.supervisor.complete_task()")
    return cells


def solution_code(actions: list[str], api_docs: dict, answer_from: str | None = None) -> str:
    """A task's reference solution as one block of code (`solution_steps` joined)."""
    return "\n".join(solution_steps(actions, api_docs, answer_from))


def code_api_names(code: str | None) -> list[str]:
    """`app.api` for every `apis.<app>.<api>` the code names, in order (what a rollout step's `calls` holds for the
    signals: the code is read as text, never run by the kit)."""
    return [f"{app}.{api}" for app, api in _API_NAME.findall(code or "")]


def code_calls(code: str | None, api_docs: dict) -> list[AppWorldCall]:
    """The calls a reply's code makes that can be run again as call strings: each `apis.<app>.<api>(key=literal, ...)`
    in source order, its `access_token` left out (a replay logs in itself), the lines of the login preamble's own
    (`login_preamble`: the passwords, the profile) skipped. The code is parsed, never run. Left out: a call with a
    positional argument, an argument that is not a literal (a variable, an expression), or an API or parameter
    AppWorld's docs do not know."""
    preamble = {line.strip() for line in login_preamble([]).splitlines()}
    kept = "\n".join(line for line in (code or "").splitlines() if line.strip() not in preamble)
    try:
        tree = ast.parse(kept)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
    calls = []
    for node in nodes:
        function = node.func
        if not (isinstance(function, ast.Attribute) and isinstance(function.value, ast.Attribute)
                and isinstance(function.value.value, ast.Name) and function.value.value.id == "apis") or node.args:
            continue
        kwargs = []
        for keyword in node.keywords:
            if keyword.arg == TOKEN_PARAMETER:
                continue
            try:
                if keyword.arg is None:  # **mapping
                    raise ValueError
                kwargs.append((keyword.arg, ast.literal_eval(keyword.value)))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                break
        else:
            try:
                call = AppWorldCall(function.value.attr, function.attr, tuple(kwargs))
                calls.append(parse_appworld_call(call.to_source(), api_docs))
            except CallParseError:
                pass
    return calls
