"""A step API over the official backend classes for BFCL multi-turn tasks (`envs.bfcl.tasks`), and scoring equal to
the official checker.

`BFCLEnv` holds its own backend instances (never the global instance cache of the official executor, which
shares state between rollouts of one task), executes only calls that `safe_calls` accepted, and records
the canonical call strings of every executed step in `history` ([turn][step][call]). A call it rejects is
graded as BFCL grades a call it cannot run: a call made in its turn, with its error as the result (a `print`
call, which BFCL's `eval` does run, with print's result "None", after the calls in its arguments). So the verdict
is the verdict `multi_turn_checker` gives on the same calls: the per-turn rules are the official ones and the state and
response comparisons are the official sub-checkers themselves (`backend.checker_module`).
`python -m coevolve_lib bfcl-replay` (`envs.bfcl.replay`) checks that agreement on ground truth and perturbed ground
truth, and `benchmarks/bfcl_differential.py` on thousands of randomly mutated trajectories.
"""

from __future__ import annotations

import copy
import datetime
import inspect
import json
from collections.abc import Mapping, Sequence
from functools import cache

from coevolve_lib.core.safe_calls import Call, CallParseError, check_allowed, parse_builtin_call, parse_call
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl import call_guards
from coevolve_lib.envs.bfcl.state_size import state_size
from coevolve_lib.envs.bfcl.tasks import BFCLTask

EMPTY_TURN = "multi_turn:empty_turn_model_response"
EXEC_ERROR = "Error during execution"
"""Prefix of the observation of a call that was rejected or raised (the official executor's wording)."""


def is_error_observation(observation: str) -> bool:
    """A call failed: it was rejected or raised ("Error during execution: ..."), or the backend refused it with a
    JSON object holding an "error" key (how every BFCL class reports a failure, e.g. `cd` to a missing folder)."""
    text = observation.strip()
    if text.startswith(EXEC_ERROR) or text.lower().startswith("error"):
        return True
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "error" in value


def grade(task: "BFCLTask", turns: list[list[str]]) -> bool:
    """The checker's verdict on `turns` (the calls made in each user turn), executed in a fresh env of `task`."""
    env = BFCLEnv(task)
    for calls in turns:
        if calls:
            env.execute(calls)
        env.end_turn()
    verdict = env.score()["success"]
    env.close()
    return verdict


def start_env(task: Mapping) -> BFCLEnv:
    """A fresh environment in the start state of a task-like record (a pool task, a task spec, an exploration
    source: its `initial_config`, `involved_classes` and `data_version`)."""
    return BFCLEnv.from_config(task["initial_config"], task["involved_classes"], task.get("data_version", "v3"))


STATE_OVER = "Error during execution: the environment's state passed its budget (max_state_chars); no call runs"
OUTPUT_OVER = ("Error during execution: this reply's calls already printed more than the episode may keep "
               "(max_episode_observation_chars); no further call of it runs")


class BFCLEnv:
    """One rollout of one task: `execute` a step, `end_turn` after each user turn, then `score`.

    `max_state_chars` bounds the backend state as its tools walk it (`state_size`), measured after every call: once
    a call passes it, `state_over` is set, no later call runs (each gets an error observation) and every turn fails
    without the checker (comparing such a state is the work the bound prevents). None: no bound (validation and
    replay run recorded or ground-truth calls; an explorer's run is `calls_per_run` calls, too few to multiply a
    state: ~2 calls per level of folders and 2 per doubling)."""

    def __init__(self, task: BFCLTask, max_state_chars: int | None = None):
        self.task = task
        self.max_state_chars = max_state_chars
        self.state_over = False
        self._instances = _load_instances(task)
        self._methods = _method_table(self._instances)
        self.method_names: frozenset[str] = frozenset(self._methods)
        self.history: list[list[list[str]]] = [[]]  # [turn][step][canonical call]: the calls that ran
        self.turn_verdicts: list[dict] = []
        self._model_results: list[str] = []  # results of every call made, rejected ones included, all turns so far
        self._calls_in_turn = 0  # calls made in the turn in progress, rejected ones included
        self._gt_instances: dict | None = None  # created at the first scored turn
        self._gt_methods: dict = {}

    @classmethod
    def from_config(cls, initial_config: dict, involved_classes: list[str], data_version: str = "v3",
                    long_context: bool = False) -> "BFCLEnv":
        """An env for a synthetic task: no user turns, no ground truth (use `state()` as the outcome)."""
        task = BFCLTask(id="synthetic_0", category="synthetic_long_context" if long_context else "synthetic",
                        data_version=data_version, turns=[], initial_config=copy.deepcopy(initial_config),
                        involved_classes=list(involved_classes))
        return cls(task)

    @property
    def turn(self) -> int:
        """Index of the turn in progress."""
        return len(self.history) - 1

    def execute(self, calls: Sequence[Call | str], parsed: bool = False, output_budget: int | None = None) -> list[str]:
        """One model step: run each call in order, return one observation per call. Never raises.

        `output_budget`: once the step's observations hold more characters, no further call of it runs (each gets
        `OUTPUT_OVER`, and counts as a call of its turn): what the episode could not keep is never computed (32
        `find` calls over a large tree printed 14.7 million characters for an episode that keeps 1 million).

        `parsed=True`: the Calls come from the kit's own parsers (`safe_calls`), whose calls read back as themselves
        (a test holds this), so each is only checked against the env's function names, not parsed again; a Call
        built by hand is parsed from its source, so that what runs is exactly what is recorded.

        Observations are formatted as the official executor formats results. A call that is not accepted
        (unparsable, not literal-only, unknown function) yields an `Error during execution: ...` observation
        and is neither executed nor written to `history`. Like a call BFCL's executor fails on, it still
        counts as a call of its turn (so the turn is not empty) and its error joins the results; a `print`
        call joins them with the result BFCL's `eval` gives it, after the calls in its arguments ran (and were
        written to `history`), as there (`_rejected_result`). Items that are neither a call string nor a Call
        (None, numbers) are no call at all and count for nothing.
        """
        if isinstance(calls, (str, Call)):
            calls = [calls]
        try:
            calls = list(calls)
        except Exception:
            return [f"Error during execution: expected a list of calls, got {type(calls).__name__}"]
        observations, accepted, printed = [], [], 0
        for call in calls:
            if self.state_over or (output_budget is not None and printed > output_budget):
                observations.append(STATE_OVER if self.state_over else OUTPUT_OVER)
                self._calls_in_turn += 1
                continue
            try:
                call = self._accept(call, parsed)
            except CallParseError as e:
                observations.append(f"Error during execution: {e}")
                if isinstance(call, (str, Call)):
                    self._calls_in_turn += 1
                    result, ran = self._rejected_result(call, observations[-1])
                    accepted += ran
                    self._model_results.append(result)
                continue
            result = _run(self._methods, call)
            printed += len(result)
            accepted.append(call.to_source())
            observations.append(result)
            self._calls_in_turn += 1
            self._model_results.append(result)
            self._measure_state()
        if accepted:
            self.history[-1].append(accepted)
        return observations

    def _measure_state(self) -> None:
        if self.max_state_chars is not None:
            self.state_over = state_size(self._instances.values(), self.max_state_chars) > self.max_state_chars

    def _accept(self, call, parsed: bool) -> Call:
        if isinstance(call, str):
            return parse_call(call, self.method_names)
        if not isinstance(call, Call):
            raise CallParseError(f"expected a Call or a call string, got {type(call).__name__}")
        if parsed:
            check_allowed(call.name, self.method_names)
            return call
        # A Call may be built by hand: re-parse its source so that what runs is exactly what is recorded.
        try:
            source = call.to_source()
        except Exception as e:
            raise CallParseError(f"malformed Call: {e}") from None
        return parse_call(source, self.method_names)

    def _rejected_result(self, call: Call | str, error: str) -> tuple[str, list[str]]:
        """The result BFCL's executor records for a call the kit rejected, and the calls that ran for it.

        The error, except for the builtin `print`, which BFCL's `eval` runs under the name Python reads (`ｐｒｉｎｔ`
        is `print`). Its argument calls (known functions, literal arguments: `print(ls())`) run first, in Python's
        order, as they do there; print discards their results. Then the result is print's own: "None" when print
        accepts the arguments (unpacked ones included: `print(*['x'])`), else the error. Python's print never runs.
        """
        try:
            name, arguments = parse_builtin_call(call if isinstance(call, str) else call.to_source(), self.method_names)
        except Exception:  # not literals and accepted calls, or a hand-built Call whose source cannot be written
            return error, []
        if name != "print":
            return error, []
        args, kwargs, ran = [], {}, []
        for argument in arguments:
            value = argument.value
            if argument.call is not None:
                if self.state_over:  # an earlier argument call passed the state budget: eval would run this one
                    return STATE_OVER, ran
                ran.append(argument.call.to_source())
                try:
                    with call_guards.restored_precision():
                        value = _invoke(self._methods, argument.call)
                except Exception as e:  # eval stops at the first exception: the rest never runs
                    return f"Error during execution: {e}", ran
                finally:
                    self._measure_state()
            if argument.unpack == "*":
                try:
                    args.extend(value)
                except TypeError:  # not iterable
                    return error, ran
            elif argument.unpack == "**":
                if not isinstance(value, dict) or not all(type(key) is str for key in value) or kwargs.keys() & value:
                    return error, ran
                kwargs.update(value)
            elif argument.keyword is None:
                args.append(value)
            elif argument.keyword in kwargs:  # also given by an earlier `**`
                return error, ran
            else:
                kwargs[argument.keyword] = value
        return ("None" if _print_accepts(kwargs) else error), ran

    def end_turn(self) -> dict | None:
        """Close the turn in progress; with ground truth, return its verdict under the official rules."""
        turn, calls_made = self.turn, self._calls_in_turn
        self.history.append([])
        self._calls_in_turn = 0
        ground_truth = self.task.ground_truth
        if ground_truth is None or turn >= len(ground_truth):
            return None
        verdict = self._check_turn(turn, calls_made, ground_truth[turn])
        self.turn_verdicts.append(verdict)
        return verdict

    def _check_turn(self, turn: int, calls_made: int, gt_calls: list[str]) -> dict:
        """The body of the official per-turn loop of `multi_turn_checker`, on this env's instances."""
        checker = bfcl_backend.checker_module(self.task.data_version)
        verdict = {"turn": turn, "valid": True, "error_type": None, "error_message": None}
        if self.state_over:
            return {**verdict, "valid": False, "error_type": "state_cap", "error_message": STATE_OVER}
        if self._gt_instances is None:
            self._gt_instances = _load_instances(self.task)
            self._gt_methods = _method_table(self._gt_instances)
        gt_results = [_run(self._gt_methods, parse_call(text)) for text in gt_calls]
        if not gt_calls:  # no expected calls: nothing is checked, the model's calls have still changed state
            return verdict
        # BFCL's turn is empty when no step decoded to a call (its runner drops empty steps); a call it then
        # fails to run still counts, so here a rejected call does too.
        if not calls_made:
            return {**verdict, "valid": False, "error_type": EMPTY_TURN,
                    "error_message": f"Model response list is empty for turn {turn}"}
        for result in (checker.state_checker(self._instances, self._gt_instances),
                       checker.response_checker(self._model_results, gt_results, turn)):
            if not result["valid"]:
                return {**verdict, "valid": False, "error_type": result["error_type"],
                        "error_message": result["error_message"]}
        return verdict

    def score(self) -> dict:
        """The episode verdict. Turns not yet closed count as empty, as in the official runner."""
        ground_truth = self.task.ground_truth
        if ground_truth is None:
            raise ValueError(f"task {self.task.id} has no ground truth to score against; use state()")
        while len(self.turn_verdicts) < len(ground_truth):
            self.end_turn()
        failed = next((v for v in self.turn_verdicts if not v["valid"]), None)
        return {
            "success": failed is None,
            "turn_valid": [v["valid"] for v in self.turn_verdicts],
            "error_type": failed["error_type"] if failed else None,
            "error_message": failed["error_message"] if failed else None,
            "turns_scored": len(self.turn_verdicts),
        }

    def state(self) -> dict:
        """{class: {public attribute: value}} as JSON-friendly deep copies (file trees in initial_config form)."""
        return {name: {key: _jsonable(value) for key, value in vars(instance).items() if not key.startswith("_")}
                for name, instance in self._instances.items()}

    def close(self) -> None:
        self._instances, self._methods, self._gt_instances, self._gt_methods = {}, {}, None, {}


def _load_instances(task: BFCLTask) -> dict:
    """Fresh backend instances, loaded as `execute_multi_turn_func_call` loads them."""
    stateless = bfcl_backend.stateless_classes(task.data_version)
    instances = {}
    for name in task.involved_classes:
        instance = bfcl_backend.backend_class(task.data_version, name)()
        if name not in stateless:
            instance._load_scenario(copy.deepcopy(task.initial_config.get(name, {})), long_context=task.long_context)
        instances[name] = instance
    return instances


def _method_table(instances: dict) -> dict:
    """Public method name -> bound method; a later class wins a name clash, as in the official executor."""
    return {name: getattr(instance, name)
            for instance in instances.values() for name in _public_method_names(type(instance))}


@cache
def _public_method_names(cls: type) -> tuple[str, ...]:
    # The official executor lists `inspect.getmembers(instance, inspect.ismethod)` on every call; the
    # names depend only on the class, so list them once on a bare instance.
    return tuple(name for name, _ in inspect.getmembers(cls(), inspect.ismethod) if not name.startswith("_"))


_PRINT_KEYWORDS = frozenset({"sep", "end", "file", "flush"})


def _print_accepts(kwargs: dict) -> bool:
    """Python's print(*objects, **kwargs) returns (None) with the keywords: any objects, no other keyword, no file
    (None is stdout), sep and end None or a string."""
    return (set(kwargs) <= _PRINT_KEYWORDS and kwargs.get("file") is None
            and all(kwargs.get(key) is None or type(kwargs[key]) is str for key in ("sep", "end")))


def _invoke(methods: dict, call: Call):
    """Execute one accepted call, guarded (`call_guards`), and return its result; raises what the call raises.

    A call whose arguments would compute for seconds raises ValueError (the reason) before it runs. Call it inside
    `call_guards.restored_precision()`, so that no call changes the numeric precision of later calls."""
    # Fresh argument objects per execution, as `eval` of the call text would give: a backend may store
    # an argument list in its state, and the same Call object may run in several envs.
    args, kwargs = copy.deepcopy((call.args, dict(call.kwargs)))
    refusal = call_guards.refusal(call.name, methods[call.name], args, kwargs)
    if refusal:
        raise ValueError(refusal)
    return methods[call.name](*args, **kwargs)


def _run(methods: dict, call: Call) -> str:
    """Execute one accepted call (`_invoke`) and format its result exactly as the official executor does; an error
    or a refusal is an error observation."""
    try:
        with call_guards.restored_precision():  # the result is formatted at the precision the call set, as in BFCL
            result = _invoke(methods, call)
            if type(result) is str:
                return result
            if type(result) is dict:
                try:
                    return json.dumps(result)
                except Exception:  # some results hold objects json cannot encode
                    return str(result)
            return str(result)
    except Exception as e:
        return f"Error during execution: {e}"


def _jsonable(value, depth: int = 0):
    if depth > 100:
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) else str(k): _jsonable(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v, depth + 1) for v in value), key=repr)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    kind = type(value).__name__
    if kind == "File":  # GorillaFileSystem tree nodes, written as in initial_config (Directory.parent is a cycle)
        return {"type": "file", "content": value.content}
    if kind == "Directory":
        node = {"type": "directory", "contents": _jsonable(value.contents, depth + 1)}
        return node if value.parent is not None else {value.name: node}  # the root, keyed by its name
    if hasattr(value, "__dict__"):
        return {k: _jsonable(v, depth + 1) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)
