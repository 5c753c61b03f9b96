"""Exploration for AppWorld (paper section 3.2): the offline (no LLM) explorer and the LLM one.

`AppWorldExplorer` re-explores an AppWorld task's start state on AppWorld's own server: each run logs into the
target's apps, then makes up to S calls drawn from their API docs, with argument values the run has already seen
(a `note_id` from a search result), and records each as a triplet/v1 whose action is an `envs.appworld.calls` call
string. `AppWorldLLMExplorer` asks the explorer model for each call instead. The runs' triplets become task specs in
`envs.appworld.abstraction`.

The kit never runs the calls itself: it sends `calls.call_code` to the server, which executes it.
"""

from __future__ import annotations

import ast
import json
import random
import re
from abc import abstractmethod
from collections.abc import Callable

from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.safe_calls import CallParseError
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import (
    NO_VALID_ACTION,
    WORDS,
    Explorer,
    action_tags,
    guidance,
    render_history,
    run_ids,
    stable_seed,
    triplet_record,
)
from coevolve_lib.envs.appworld.calls import (
    TOKEN_PARAMETER,
    AppWorldCall,
    call_code,
    code_calls,
    is_failed_output,
    login_preamble,
    parse_appworld_call,
)
from coevolve_lib.envs.appworld.client import AppWorldServerError
from coevolve_lib.envs.appworld.server import AppWorldServer
from coevolve_lib.prompts import clip, load_prompt

EXCLUDED_APIS = re.compile(r"login|logout|signup|delete_account|update_account_\w+|\w*password\w*|\w*verif\w*")
"""API names (any app) the explorer never calls and no task holds: account management would lock the run out (or
change what the login preamble relies on), and password/verification APIs need codes nobody can read back."""
EXCLUDED_CALLS = frozenset({"supervisor.complete_task", "supervisor.show_active_task"})
"""complete_task ends the AppWorld task (every task spec's solution adds it itself); show_active_task shows the running
task's own instruction, which differs in every task synthesized from it."""
SUPERVISOR = "supervisor"
"""Its read (GET) APIs are explored with every target: the profile and addresses are values other APIs take."""
OBSERVATION_CHARS = 4000
"""A triplet keeps this much of a call's printed output (a search can print pages)."""
OPTIONAL_ARGUMENT_P = 0.3
"""Chance that an optional parameter is passed (otherwise AppWorld uses its default)."""
MAX_DRAWS = 20
"""Draws per step before a run gives up finding a call it may make and has not made."""


def explorable_apis(api_docs: dict, apps: list[str]) -> list[str]:
    """`app.api` names the explorer may call: the apps' APIs and the supervisor's reads, none excluded."""
    names = [f"{app}.{api}" for app in dict.fromkeys(apps) for api in api_docs.get(app, {})]
    names += [f"{SUPERVISOR}.{api}" for api, doc in api_docs.get(SUPERVISOR, {}).items() if doc["method"] == "GET"]
    return [name for name in dict.fromkeys(names) if allowed_api(name)]


def allowed_api(name: str) -> bool:
    """Whether an `app.api` name may be called and held by a task (`EXCLUDED_CALLS`, `EXCLUDED_APIS`)."""
    return name not in EXCLUDED_CALLS and not EXCLUDED_APIS.fullmatch(name.split(".", 1)[1])


# `a.b` names in LLM text, tried only where a run of word characters starts (its head of digits or non-ASCII letters
# skipped): `[A-Za-z_]\w*\.[A-Za-z_]\w*` alone finds the same names, but rescans a long word from each letter.
_DOTTED_NAME = re.compile(r"(?<!\w)[^\W_A-Za-z]*([A-Za-z_]\w*\.[A-Za-z_]\w*)")


def focus_apis(context: dict | None, allowed: list[str]) -> list[str]:
    """The allowed `app.api` names a context's focus_pattern entries name (plain names or "a.b>c.d" patterns)."""
    named = {name for entry in (context or {}).get("focus_pattern", []) for name in _DOTTED_NAME.findall(entry)}
    return [name for name in allowed if name in named]


def _canonical(text: str, api_docs: dict) -> str:
    try:
        return parse_appworld_call(text, api_docs).to_source()
    except CallParseError:
        return text.strip()


class ObservedValues:
    """Scalar values one run's outputs showed, by the key they appeared under, and the words of its texts: what the
    run's later calls take their arguments from."""

    def __init__(self):
        self.by_key: dict[str, list] = {}
        self.words: list[str] = []

    def harvest(self, output: str) -> None:
        try:
            self._walk(json.loads(output), None)
        except ValueError:
            pass  # plain text ("Execution successful.") names no key

    def _walk(self, value, key: str | None) -> None:
        if isinstance(value, dict):
            for name, item in value.items():
                self._walk(item, str(name))
        elif isinstance(value, list):
            for item in value[:50]:
                self._walk(item, key)
        elif key is not None and isinstance(value, (str, int, float, bool)):
            seen = self.by_key.setdefault(key, [])
            if value not in seen:
                seen.append(value)
            if isinstance(value, str):
                self.words += [w for w in re.findall(r"[A-Za-z]{4,}", value) if w not in self.words]


def _fits(value, kind: str) -> bool:
    """Whether an observed value has AppWorld's parameter type `kind`."""
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def _options(parameter: dict) -> list:
    """Allowed values from a constraint like "value in ['append', 'prepend']"."""
    for constraint in parameter.get("constraints") or []:
        match = re.fullmatch(r"value in (\[.*\])", constraint.strip())
        if match:
            try:
                return list(ast.literal_eval(match.group(1)))
            except (ValueError, SyntaxError):
                return []
    return []


def _bounds(parameter: dict) -> tuple[int, int]:
    """A small integer range inside the constraints ("value >= 1.0, <= 20.0")."""
    text = " ".join(parameter.get("constraints") or [])
    low = re.search(r">=\s*(-?[\d.]+)", text)
    high = re.search(r"<=\s*(-?[\d.]+)", text)
    first = int(float(low.group(1))) if low else 1
    return first, min(int(float(high.group(1))) if high else first + 4, first + 4)


class ArgumentDrawer:
    """One call's arguments: required parameters always, optional ones sometimes; values the run observed under the
    parameter's own name first, else (required ones) its default, else a small made-up value of its type."""

    def __init__(self, rng: random.Random, api_docs: dict, observed: ObservedValues):
        self.rng, self.api_docs, self.observed = rng, api_docs, observed

    def call(self, name: str) -> AppWorldCall:
        app, api = name.split(".", 1)
        kwargs = tuple((parameter["name"], self.value(parameter))
                       for parameter in self.api_docs[app][api]["parameters"]
                       if parameter["name"] != TOKEN_PARAMETER
                       and (parameter["required"] or self.rng.random() < OPTIONAL_ARGUMENT_P))
        return AppWorldCall(app, api, kwargs)

    def value(self, parameter: dict):
        options = _options(parameter)
        if options:
            return self.rng.choice(options)
        kind = parameter["type"]
        listed = kind.startswith("list[")
        item_kind = kind[5:-1] if listed else kind
        seen = [v for v in self.observed.by_key.get(parameter["name"], []) if _fits(v, item_kind)]
        if listed:
            return [self.rng.choice(seen) if seen else self.made_up(item_kind, parameter)]
        if seen:
            return self.rng.choice(seen)
        # An optional parameter is passed to try another value: its default is what leaving it out gives.
        if parameter["required"] and parameter.get("default") is not None:
            return parameter["default"]
        return self.made_up(kind, parameter)

    def made_up(self, kind: str, parameter: dict):
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind in ("integer", "number"):
            value = self.rng.randint(*_bounds(parameter))
            return value if kind == "integer" else float(value)
        # A short phrase, of words the run has seen when it has (a search for 'Gate' finds the 'Gate code' note).
        words = self.observed.words or list(WORDS)
        return " ".join(self.rng.sample(words, k=min(len(words), self.rng.randint(1, 2))))


class AppWorldRuns(Explorer):
    """What both AppWorld explorers share: R runs, one after the other on one server (it holds one task at a time),
    each from the target task's start state (`initial_config["appworld_task"]`), logged into the target's apps. A
    subclass makes a run's steps (`_steps`). A server failure ends its run, keeping the triplets already made, and is
    counted in `cost.skipped` as `server_<kind>`; the next run restarts the server, or, when it will not come back,
    the exploration stops."""

    def __init__(self, server: AppWorldServer | Callable[[], AppWorldServer], api_docs: dict):
        super().__init__()
        self._server = server
        self.api_docs = api_docs

    @property
    def server(self) -> AppWorldServer:
        return self._server() if callable(self._server) else self._server

    def explore(self, target: ExplorationTarget, context: dict | None, config: ExploreConfig) -> list[dict]:
        plan = self._plan(target, context, config)
        triplets = []
        for k, run_id in enumerate(run_ids(target, context, config.runs)):
            server = self.server
            try:
                server.ensure_running()
            except AppWorldServerError as error:  # it will not come back: the remaining runs cannot run
                self.cost.skip(f"server_{error.kind}")
                break
            try:
                for triplet in self._run(server.client, target, context, run_id, k, config, plan):
                    triplets.append(triplet)
            except AppWorldServerError as error:
                self.cost.skip(f"server_{error.kind}")
        return triplets

    def _run(self, client, target, context, run_id, k, config, plan):
        """One run's triplets, as they are made: the task initialized, logged in, `_steps`, the task closed."""
        task_id = target.initial_config["appworld_task"]
        client.initialize(task_id, experiment_name="explore_" + re.sub(r"[^\w.-]+", "_", run_id))
        try:
            if is_failed_output(client.execute(task_id, login_preamble(target.involved_classes))):
                self.cost.skip("login_failed")
                return
            yield from self._steps(client, task_id, target, context, run_id, k, config, plan)
        finally:
            client.close(task_id)

    def _execute(self, client, task_id: str, call: AppWorldCall) -> tuple[str, bool]:
        """(the call's printed output, clipped; whether it succeeded)."""
        output = client.execute(task_id, call_code(call, self.api_docs)).rstrip()
        return clip(output, OBSERVATION_CHARS), not is_failed_output(output)

    @abstractmethod
    def _plan(self, target: ExplorationTarget, context: dict | None, config: ExploreConfig) -> dict:
        """What every run of one exploration shares (the APIs it may call, ...)."""

    @abstractmethod
    def _steps(self, client, task_id, target, context, run_id, k, config, plan):
        """One run's triplets after the login, as they are made (a generator)."""


class AppWorldExplorer(AppWorldRuns):
    """Calls drawn from the target's AppWorld API docs, with arguments from what the run has observed, executed on
    AppWorld's server (`AppWorldRuns`).

    Guided: a `focus_ratio` share of steps draws from the context's focus_pattern APIs, and no call in do_not_repeat
    is made. Each (target, run) has its own seeded RNG (as `SchemaExplorer`), so the same inputs give the same calls."""

    name = "appworld_schema"

    def _plan(self, target, context, config):
        apis = explorable_apis(self.api_docs, target.involved_classes)
        return {"apis": apis, "focus": focus_apis(context, apis),
                "banned": {_canonical(text, self.api_docs) for text in (context or {}).get("do_not_repeat", [])}}

    def _steps(self, client, task_id, target, context, run_id, k, config, plan):
        rng = random.Random(stable_seed(config.seed, target.task_id, target.signal_id, k))
        observed = ObservedValues()
        drawer = ArgumentDrawer(rng, self.api_docs, observed)
        made: set[str] = set()
        for step in range(config.calls_per_run):
            call = self._draw(rng, drawer, plan["apis"], plan["focus"], config.focus_ratio, plan["banned"] | made)
            if call is None:
                self.cost.skip("no_new_call")
                break
            action = call.to_source()
            made.add(action)
            output, valid = self._execute(client, task_id, call)
            if valid:
                observed.harvest(output)
            yield triplet_record(target, context, run_id, step, action, output, valid, self.name)

    @staticmethod
    def _draw(rng, drawer, apis, focus, focus_ratio, avoid) -> AppWorldCall | None:
        for _ in range(MAX_DRAWS):
            call = drawer.call(rng.choice(focus if focus and rng.random() < focus_ratio else apis))
            if call.to_source() not in avoid:
                return call
        return None


class AppWorldReplay(AppWorldRuns):
    """ReST's stand-in for exploration on AppWorld (`engine/pool_updates/rest.py`, `RoundStages.replay`): the calls the
    policy's own code made with literal arguments (`calls.code_calls`; those a task may hold: `allowed_api`), run
    again in one run from the task's start state, each with what it prints. An AppWorld record keeps a reply's code
    and the output of the whole block, not each call's result, so the calls are run again to observe them."""

    name = "policy"

    def _plan(self, target, context, config):
        steps = (target.trajectory or {}).get("steps", [])
        return {"calls": [call for step in steps for call in code_calls(step.get("code"), self.api_docs)
                          if allowed_api(call.name)]}

    def _steps(self, client, task_id, target, context, run_id, k, config, plan):
        marker = {"signal_id": target.signal_id, "signal_type": (target.signal or {}).get("type")}  # e.g. rest/<id>
        for step, call in enumerate(plan["calls"]):
            output, valid = self._execute(client, task_id, call)
            yield triplet_record(target, context, run_id, step, call.to_source(), output, valid, self.name) | marker


LLM_ACTION_FORMAT = ("Exactly one AppWorld API call, written as Python with literal keyword arguments only, inside "
                     "<action>...</action> tags, e.g. <action>simple_note.search_notes(query='groceries')</action>. "
                     "You are logged in to every app listed: never pass access_token. Use only the APIs listed in the "
                     "environment description.")
"""The Fig. 9 prompt's action format on AppWorld (the explorer adds the token itself, as `call_code` does)."""


def describe_apis(target: ExplorationTarget, apis: list[str], api_docs: dict) -> str:
    """The `{initial_obs}` of Fig. 9 on AppWorld: the apps, each allowed API's parameters and one-line description
    (from AppWorld's docs), and the task whose start state is explored."""
    lines = [f"AppWorld apps: {', '.join(target.involved_classes)} (and the supervisor's profile).", "APIs:"]
    for name in apis:
        app, api = name.split(".", 1)
        doc = api_docs[app][api]
        signature = ", ".join(f"{p['name']}: {p['type']}{'' if p['required'] else ' (optional)'}"
                              for p in doc["parameters"] if p["name"] != TOKEN_PARAMETER)
        lines.append(f"- {name}({signature}): {clip(doc['description'].split('. ')[0].rstrip('.'), 160)}.")
    lines += ["", "The apps start in the state of this task:", target.description]
    return "\n".join(lines)


class AppWorldLLMExplorer(AppWorldRuns):
    """The paper's LLM explorer (Figs. 9-10, `explore_llm`) on AppWorld: each step the model picks one API call in
    an `<action>` tag, parsed as a call string (never evaluated) and run on the server (`AppWorldRuns`: the runs go
    one after the other, one model call per step). A reply without a valid call is recorded as an invalid step, as on
    BFCL; a model failure ends the run, counted in `cost.skipped`."""

    name = "llm"

    def __init__(self, model: ChatModel, server: AppWorldServer | Callable[[], AppWorldServer], api_docs: dict):
        super().__init__(server, api_docs)
        self.model = model

    def _plan(self, target, context, config):
        apis = explorable_apis(self.api_docs, target.involved_classes)
        return {"apis": apis, "system": load_prompt("explore_system").format(action_format=LLM_ACTION_FORMAT),
                "guidance": guidance(context),
                "environment": describe_apis(target, apis, self.api_docs),
                "generation": GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)}

    def _steps(self, client, task_id, target, context, run_id, k, config, plan):
        history = []
        for step in range(config.calls_per_run):
            user = load_prompt("explore_user").format(exploration_guidance=plan["guidance"],
                                                      initial_obs=plan["environment"],
                                                      history_text=render_history(history))
            [reply] = self.cost.generate(self.model, [[{"role": "system", "content": plan["system"]},
                                                       {"role": "user", "content": user}]], plan["generation"])
            if reply.error:  # the endpoint is failing even after its retries: end this run
                self.cost.skip("model_error")
                return
            call, action, reason = self._parse(reply.text, plan["apis"])
            if call is None:
                self.cost.skip("no_valid_action")
                observation, valid = f"{NO_VALID_ACTION}: {reason}", False
            else:
                action = call.to_source()
                observation, valid = self._execute(client, task_id, call)
            history.append((action, observation))
            yield triplet_record(target, context, run_id, step, action, observation, valid, self.name)

    def _parse(self, text: str, apis: list[str]) -> tuple[AppWorldCall | None, str, str]:
        """(call or None, the action text, the rejection reason); the last <action> tag wins, as on BFCL."""
        tags = action_tags(text or "")
        if not tags:
            return None, clip((text or "").strip(), 500), "no <action>...</action> tag in the reply"
        action = tags[-1].strip().strip("`").strip()
        try:
            call = parse_appworld_call(action, self.api_docs)
        except CallParseError as error:
            return None, clip(action, 500), str(error)
        if call.name not in apis:
            return None, clip(action, 500), f"{call.name} is not an API this exploration may call"
        return call, action, ""


def make_appworld_explorer(config: ExploreConfig, model: ChatModel | None,
                           server: AppWorldServer | Callable[[], AppWorldServer], api_docs: dict) -> Explorer:
    """`envs.bfcl.explore.make_explorer` for AppWorld: the LLM explorer (`explorer: llm`, needs the model) or the
    offline one."""
    if config.explorer == "llm":
        if model is None:
            raise ValueError("explorer='llm' needs a model (data_engine.explorer_model)")
        return AppWorldLLMExplorer(model, server, api_docs)
    return AppWorldExplorer(server, api_docs)
