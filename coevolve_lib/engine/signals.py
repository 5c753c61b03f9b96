"""Weakness signals mined from GRPO training rollouts (the paper's Section 3.1; paper notes 2.3 and 8.1-2).

Each signal type is one small `Signal` subclass in the `SIGNALS` registry. It sees all rollouts of one
training step at once (several tasks, K samples each), returns the `signal/v1` records that fire in that step,
and keeps whatever running state it needs as JSON, for checkpoint and resume. `SignalExtractor` runs the
enabled types side by side. Each type is evaluated on its own, so one trajectory may carry several types.

A new type is one class:

    @register
    class LongEpisode(Signal):
        type = "long"

        def observe(self, step, rollouts):
            return [self.fire(r, step, {"calls": len(action_names(r))})
                    for r in rollouts if outcome(r) < 0.5 and len(action_names(r)) > 20]

It is then enabled by name: `SignalExtractor(SignalConfig(enabled=("boundary", "long")))`. What the explorer is told
about its records is the class's too: `describe(evidence)` gives the context's instability pattern and
`focus_tools(evidence, known)` the tools to focus on (contexts.py names no signal type).
"""

from __future__ import annotations

import json
import logging
import math
import re
import reprlib
from abc import ABC, abstractmethod
from collections import Counter, defaultdict, deque
from typing import ClassVar

from coevolve_lib.core.config import RARE_PATTERNS, SignalConfig
from coevolve_lib.core.extensions import ORIGINS, ExtensionError, check_class, find

log = logging.getLogger(__name__)

SIGNAL_SCHEMA = "signal/v1"


def rollout_id(record: dict) -> str:
    """The record's rollout_id (see `engine.data_engine.stamp_rollouts`), or "<step>/<task_id>/<sample_index>"."""
    if "rollout_id" in record:
        return str(record["rollout_id"])
    return f"{record.get('step', 0)}/{record['task_id']}/{record.get('sample_index', 0)}"


def action_names(record: dict) -> list[str]:
    """Tool names called in the trajectory, in order, across all steps and turns ("cd(folder='x')" -> "cd")."""
    return [call.split("(", 1)[0].strip() for step in record["steps"] for call in step["calls"]]


def action_patterns(record: dict, kind: str = "bigram") -> list[str]:
    """The trajectory's action patterns of one `kind` (see SignalConfig.rare_pattern), with repeats."""
    if kind not in RARE_PATTERNS:
        raise ValueError(f"pattern kind must be one of {RARE_PATTERNS}, not {kind!r}")
    names = action_names(record)
    if not names:
        return []
    if kind == "sequence":
        return [">".join(names)]
    if kind == "set":
        return [",".join(sorted(set(names)))]
    if len(names) == 1:
        return names
    return [f"{a}>{b}" for a, b in zip(names, names[1:])]


def task_type(record: dict) -> str:
    """The sorted involved classes joined by "+", e.g. "GorillaFileSystem+TwitterAPI"."""
    return "+".join(sorted(set(record["involved_classes"])))


class Signal(ABC):
    """One signal type. It sees every rollout of a training step and returns the signal/v1 records that fire."""

    type: ClassVar[str]
    """Registry name, also the `type` of its records."""

    def __init__(self, config: SignalConfig):
        self.config = config

    @abstractmethod
    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        """Records fired by the rollouts of training step `step`; updates the running state. The rollouts are well
        formed: SignalExtractor has dropped the others (see `required_fields`)."""

    def required_fields(self) -> tuple[str, ...]:
        """Rollout fields this type reads beyond task_id, score and steps. Rollouts without them are skipped."""
        return ()

    def state_dict(self) -> dict:
        """The running state as JSON-serialisable data. A stateless type keeps none."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""

    @classmethod
    def describe(cls, evidence: dict) -> str | None:
        """The explorer context's `instability_pattern` for a record of this type, read off its evidence (Fig. 11);
        None: the generic sentence that quotes the evidence."""
        return None

    @classmethod
    def focus_tools(cls, evidence: dict, known: set[str]) -> list[str]:
        """Tools of `known` that the explorer should focus on because of this record, before the trajectory's own."""
        return []

    def fire(self, rollout: dict, step: int, evidence: dict) -> dict:
        """The signal/v1 record of this type for one rollout."""
        rid = rollout_id(rollout)
        return {"schema": SIGNAL_SCHEMA, "signal_id": f"{self.type}/{rid}", "type": self.type, "rollout_id": rid,
                "task_id": rollout["task_id"], "step": step, "evidence": evidence}


SIGNALS: dict[str, type[Signal]] = {}
"""Registered signal types by name."""


def register(cls: type[Signal]) -> type[Signal]:
    """Class decorator that makes a Signal subclass available under its `type` name."""
    name = getattr(cls, "type", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} needs a non-empty `type` name to be registered")
    if name in SIGNALS and SIGNALS[name] is not cls:
        # Re-running a notebook cell redefines the class, so the newer definition wins.
        log.warning("signal type %r: %s replaces %s", name, cls.__qualname__, SIGNALS[name].__qualname__)
    SIGNALS[name] = cls
    return cls


def signal_class(name: str) -> type[Signal]:
    """The signal type `name` gives (`core.extensions.find`: a registered type, an installed entry point of the
    `coevolve_lib.signals` group, or a `module:Class` reference); one loaded from outside is registered under its
    `type`, the name its records carry, which must be its own (not a kit type's). A ValueError in one line
    otherwise."""
    found = check_class(find("signals", name, SIGNALS, "signal type"), Signal, name, "signal type", named="type")
    if name not in SIGNALS:
        taken = SIGNALS.get(found.type)
        if taken is not None and taken is not found:
            raise ExtensionError(f"signal type {name!r} has the type {found.type!r} of {taken.__module__}."
                                 f"{taken.__qualname__}; give it a type of its own")
        register(found)
        ORIGINS.setdefault(("signals", found.type), ORIGINS.get(("signals", name), f"loaded as {name}"))
    return found


def outcome(rollout: dict) -> float:
    """The [0, 1] score s a signal reads: the training reward when the record has one (training rollouts; the prefix
    reward when the profile optimises it), else the checker's score (probe and evaluation rollouts)."""
    return rollout["reward"] if "reward" in rollout else rollout["score"]


def _solved(score: float, config: SignalConfig) -> bool:
    return score >= config.success_threshold


def group_key(rollout: dict) -> str:
    """The GRPO group a rollout belongs to (one draw of a task in one step); a hand-built record without a
    `group_id` falls back to its task_id."""
    return rollout.get("group_id", rollout["task_id"])


def is_mixed(scores: list[float], config: SignalConfig) -> bool:
    """Both solved and unsolved outcomes among a group's scores: a boundary group (with binary rewards, one with a
    GRPO advantage)."""
    solved = [_solved(score, config) for score in scores]
    return any(solved) and not all(solved)


@register
class Forgetting(Signal):
    """A failure on a task (or task type) that was solved within its last W scores, observed in earlier steps."""

    type = "forgetting"

    def __init__(self, config: SignalConfig):
        super().__init__(config)
        self.windows: dict[str, deque[float]] = {}

    def required_fields(self) -> tuple[str, ...]:
        return ("involved_classes",) if self.config.forgetting_key == "task_type" else ()

    def key(self, rollout: dict) -> str:
        return rollout["task_id"] if self.config.forgetting_key == "task" else task_type(rollout)

    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        fired = []
        for rollout in rollouts:
            key = self.key(rollout)
            window = list(self.windows.get(key, ()))
            if not _solved(outcome(rollout), self.config) and any(_solved(s, self.config) for s in window):
                fired.append(self.fire(rollout, step, {"key": key, "window": window, "score": outcome(rollout)}))
        # The window grows only after the whole step. Mixed outcomes within one step come from the same
        # policy, and that spread is a boundary signal, not forgetting.
        for rollout in rollouts:
            key = self.key(rollout)
            self.windows.setdefault(key, deque(maxlen=self.config.forgetting_window)).append(outcome(rollout))
        return fired

    @classmethod
    def describe(cls, evidence: dict) -> str | None:
        if "window" not in evidence:
            return None
        return (f"Solved within the recent window (scores {evidence['window']}) but failed now "
                f"(score {evidence.get('score')}): a skill the policy had is being lost.")

    def state_dict(self) -> dict:
        return {"windows": {key: list(window) for key, window in self.windows.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.windows = {key: deque(scores, maxlen=self.config.forgetting_window)
                        for key, scores in state["windows"].items()}


@register
class Boundary(Signal):
    """All K samples of a group (one draw of a task in one step) with both solved and unsolved outcomes: the groups
    with non-zero GRPO advantage variance when rewards are binary. Groups are keyed by `group_key`, not by task: a task
    drawn twice in a step is two groups."""

    type = "boundary"

    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        groups: dict[str, list[dict]] = defaultdict(list)
        for rollout in rollouts:
            groups[group_key(rollout)].append(rollout)
        fired = []
        for group in groups.values():
            scores = [outcome(r) for r in group]
            if is_mixed(scores, self.config):
                solved = sum(_solved(score, self.config) for score in scores)
                fired += [self.fire(r, step, {"group_scores": scores, "solved": solved}) for r in group]
        return fired

    @classmethod
    def describe(cls, evidence: dict) -> str | None:
        if "group_scores" not in evidence or "solved" not in evidence:
            return None
        scores, wins = evidence["group_scores"], evidence["solved"]
        return (f"Under one policy, {wins} of {len(scores)} sampled rollouts succeeded and "
                f"{len(scores) - wins} failed (scores {scores}): the outcome sits on the success boundary.")


@register
class Rare(Signal):
    """Trajectories that contain a rare action pattern: one of low cumulative frequency over training that still
    recurs, i.e. was seen in trajectories of at least `rare_min_tasks` distinct tasks (the paper's "systematic
    under-exploration instead of one-off stochastic events"). Low frequency is `SignalConfig.rare_rule`: `tail`
    (default), the least frequent recurring patterns that together make up under theta % of all N pattern
    occurrences; `pattern`, the paper's literal c_p / N < theta / 100 for each pattern alone."""

    type = "rare"

    def __init__(self, config: SignalConfig):
        super().__init__(config)
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.tasks: dict[str, list[str]] = {}  # per pattern, the first rare_min_tasks distinct tasks seen with it

    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        patterns = [sorted(set(action_patterns(r, self.config.rare_pattern))) for r in rollouts]
        for rollout, own in zip(rollouts, patterns):
            self.counts.update(own)
            self.total += len(own)
            for pattern in own:
                seen = self.tasks.setdefault(pattern, [])
                if len(seen) < self.config.rare_min_tasks and rollout["task_id"] not in seen:
                    seen.append(rollout["task_id"])
        if self.total < self.config.rare_min_total:
            return []
        rare_now = self.rare_patterns()  # this step's patterns were counted first, so c_p > 0 always holds
        fired = []
        for rollout, own in zip(rollouts, patterns):
            rare = [{"pattern": p, "count": self.counts[p]} for p in own if p in rare_now]
            if rare:
                fired.append(self.fire(rollout, step, {"patterns": rare, "total": self.total,
                                                       "theta": self.config.rare_theta}))
        return fired

    def rare_patterns(self) -> set[str]:
        """The patterns rare now. Counts are compared as integers, so a frequency exactly at theta / 100 is not rare,
        and `tail` takes or leaves each count level whole (patterns seen equally often are equally rare)."""
        theta, total = self.config.rare_theta, self.total
        recurring = {p: c for p, c in self.counts.items() if len(self.tasks[p]) >= self.config.rare_min_tasks}
        if self.config.rare_rule == "pattern":
            return {p for p, c in recurring.items() if c * 100 < theta * total}
        levels: dict[int, list[str]] = defaultdict(list)
        for pattern, count in recurring.items():
            levels[count].append(pattern)
        rare, mass = set(), 0
        for count, level in sorted(levels.items()):
            mass += count * len(level)
            if mass * 100 >= theta * total:
                break
            rare.update(level)
        return rare

    @classmethod
    def describe(cls, evidence: dict) -> str | None:
        if "patterns" not in evidence:
            return None
        seen = ", ".join(f"{p['pattern']} ({p['count']} of {evidence.get('total')})" for p in evidence["patterns"])
        return f"Action patterns rarely seen in training: {seen}; the policy has little experience with them."

    @classmethod
    def focus_tools(cls, evidence: dict, known: set[str]) -> list[str]:
        """The tools its rare patterns name ("cd>mv" -> cd, mv; AppWorld's "simple_note.search_notes>...")."""
        text = json.dumps(evidence.get("patterns", []))
        names = [part for dotted in re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", text)
                 for part in (dotted, *dotted.split("."))]
        return list(dict.fromkeys(name for name in names if name in known))

    def state_dict(self) -> dict:
        return {"counts": dict(self.counts), "total": self.total, "tasks": self.tasks}

    def load_state_dict(self, state: dict) -> None:
        self.counts, self.total, self.tasks = Counter(state["counts"]), state["total"], dict(state["tasks"])


@register
class Compositional(Signal):
    """A failure on a multi-class task while the agent recently solves single-class tasks of each class involved.

    It can do each part alone but not the composition: the "compositional blind spot" that the paper's limitations name.
    It is an example of a user-defined type, off by default. Single-class outcomes of the last `compositional_window`
    steps count, this step included, since its samples come from the current policy."""

    type = "compositional"

    def __init__(self, config: SignalConfig):
        super().__init__(config)
        self.outcomes: dict[str, list[list[int]]] = {}  # class -> [[step, solved 0/1], ...]

    def required_fields(self) -> tuple[str, ...]:
        return ("involved_classes",)

    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        for rollout in rollouts:
            classes = set(rollout["involved_classes"])
            if len(classes) == 1:
                self.outcomes.setdefault(classes.pop(), []).append(
                    [step, int(_solved(outcome(rollout), self.config))])
        oldest = step - self.config.compositional_window
        recent = {c: [o for o in seen if o[0] > oldest] for c, seen in self.outcomes.items()}
        self.outcomes = {c: seen for c, seen in recent.items() if seen}
        rates = {c: sum(solved for _, solved in seen) / len(seen) for c, seen in self.outcomes.items()}
        fired = []
        for rollout in rollouts:
            classes = sorted(set(rollout["involved_classes"]))
            if (len(classes) >= 2 and not _solved(outcome(rollout), self.config)
                    and all(rates.get(c, -1.0) >= self.config.compositional_min_rate for c in classes)):
                fired.append(self.fire(rollout, step, {"classes": classes, "score": outcome(rollout),
                                                       "single_class_rates": {c: rates[c] for c in classes}}))
        return fired

    def state_dict(self) -> dict:
        return {"outcomes": self.outcomes}

    def load_state_dict(self, state: dict) -> None:
        self.outcomes = {c: [list(o) for o in seen] for c, seen in state["outcomes"].items()}


def _problem(record: object, required: tuple[str, ...]) -> str | None:
    """Why a rollout cannot be used, or None when it can."""
    if not isinstance(record, dict):
        return f"not a mapping but {type(record).__name__}"
    if not isinstance(record.get("task_id"), str):
        return "no task_id"
    for name in ("score", "reward") if "reward" in record else ("score",):
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"no numeric {name} ({value!r})"
    steps = record.get("steps")
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("calls"), list) and all(isinstance(c, str) for c in s["calls"])
            for s in steps):
        return "malformed steps (expected [{'calls': [str, ...]}, ...])"
    if "group_id" in record and not isinstance(record["group_id"], str):
        return "malformed group_id"
    classes = record.get("involved_classes")
    if classes is not None and not (isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes)):
        return "malformed involved_classes"
    missing = [name for name in required if name not in record]
    if missing:
        return f"missing {missing}"
    return None


SIGNAL_FIELDS = ("signal_id", "rollout_id", "task_id")
"""What a fired record must hold, as strings, besides its `type`: a round selects and explores targets by them."""


class SignalExtractor:
    """Runs the enabled signal types over each training step's rollouts. Malformed rollouts are skipped and counted."""

    def __init__(self, config: SignalConfig):
        self.config = config
        # Keyed by each type's `type`, the name its records carry (a `module:Class` in `enabled` names its class).
        self.signals: dict[str, Signal] = {cls.type: cls(config) for cls in map(signal_class, config.enabled)}
        self.required = tuple(sorted({f for signal in self.signals.values() for f in signal.required_fields()}))
        self.skipped = 0  # rollouts skipped as malformed so far
        self.step_errors: dict[str, str] = {}
        """Signal types that raised, or fired malformed records, in the last step: what was wrong (`observe`)."""

    def observe(self, step: int, rollouts: list[dict]) -> list[dict]:
        """Every record fired in this step, grouped by signal type in `enabled` order. A signal type that raises, or
        fires a record without the fields a round reads (`SIGNAL_FIELDS`), gives none this step: logged in one line
        and named in `step_errors` (a plugin's fault never stops the run; the built-in types do neither)."""
        valid = []
        for record in rollouts:
            problem = _problem(record, self.required)
            if problem is None:
                valid.append(record)
                continue
            self.skipped += 1
            name = record.get("rollout_id", record.get("task_id")) if isinstance(record, dict) else None
            log.warning("step %s: skipping rollout %s: %s", step, name, problem)
        fired, self.step_errors = [], {}
        for name, signal in self.signals.items():
            try:
                records = signal.observe(step, valid)
                if not isinstance(records, list):
                    raise TypeError(f"returned a {type(records).__name__}, not a list of records")
                bad = next((r for r in records if not (isinstance(r, dict) and r.get("type") == name
                                                       and all(isinstance(r.get(f), str) for f in SIGNAL_FIELDS))),
                           None)
                if bad is not None:
                    raise ValueError(f"fired {reprlib.repr(bad)}, not a signal/v1 record of type {name!r} with "
                                     f"{', '.join(SIGNAL_FIELDS)}")
            except Exception as error:  # noqa: BLE001 - a signal type of any plugin may raise anything
                self.step_errors[name] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
                log.warning("step %s: signal type %s %s; its signals of this step are skipped (train/signal_errors)",
                            step, name, self.step_errors[name])
                continue
            fired += records
        return fired

    def state_dict(self) -> dict:
        return {"signals": {name: each.state_dict() for name, each in self.signals.items()}, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        saved = state["signals"]
        if set(saved) != set(self.signals):
            raise ValueError(f"state holds signal types {sorted(saved)}, this extractor runs {sorted(self.signals)}")
        for name, signal in self.signals.items():
            signal.load_state_dict(saved[name])
        self.skipped = state["skipped"]
