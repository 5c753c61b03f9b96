"""The schema explorer: the offline stand-in for the paper's LLM explorer (section 3.2, Figs. 9-10), no model.

Each step is a valid call drawn from the tools' schemas, with argument values taken from what the run has observed so
far (`ValuePool`, `ArgumentSampler`). Guided by a context, a share of steps focuses on its focus_pattern and no call in
do_not_repeat is made; unguided (D_0, the paper's "random exploration" baseline), tools are drawn uniformly.
"""

from __future__ import annotations

import json
import random
import re

from coevolve_lib.core.safe_calls import Call, CallParseError, parse_call
from coevolve_lib.engine.explore import WORDS, Explorer, run_ids, stable_seed, triplet_record
from coevolve_lib.envs.bfcl.benchmark import is_error_observation, start_env

_STOPWORDS = {"get", "set", "to", "of", "the", "a", "an", "by", "for", "from", "is", "in", "on", "num", "current",
              "new", "all", "list", "and", "or", "with", "at", "this", "that", "be", "it"}
_SYNONYMS = {"folder": "dir", "directory": "dir", "stock": "symbol", "username": "user", "receiver": "user",
             "mentioned": "user", "mention": "user", "follow": "user", "following": "user", "contact": "user",
             "source": "name"}
_FILE_LIKE = re.compile(r"^[\w\-. ]{1,60}\.[A-Za-z][A-Za-z0-9]{0,4}$")
_CREATORS = ("mkdir", "touch", "create", "register", "add", "post", "echo")
_EXTENSIONS = ("txt", "md", "csv", "json", "log", "pdf")


def name_tags(name: str) -> frozenset[str]:
    """Semantic tokens of a field or parameter name: file_name -> {file, name}, tweetIds -> {tweet, id}."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
    tags = set()
    for word in re.split(r"[^a-z0-9]+", words):
        word = word.rstrip("0123456789")  # file_name1 -> file, name
        if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
            word = word[:-1]  # tweets -> tweet, stocks -> stock
        if word and not word.isdigit() and word not in _STOPWORDS:
            tags.add(_SYNONYMS.get(word, word))
    return frozenset(tags)


def _is_field_key(key: str) -> bool:
    """snake_case / camelCase keys are field names; '12345', 'AAPL', 'Alice', 'notes.txt' are data."""
    return bool(re.fullmatch(r"[a-z][A-Za-z0-9_]*", key)) and not _FILE_LIKE.match(key)


class ValuePool:
    """Argument values known to one run, each with the tags of where it was seen and a weight.

    Values from the task (initial_config, quoted names in its text) weigh GIVEN; each observation weighs twice
    the one before, so the latest state (the folder just listed, the id just created) dominates the draws."""

    GIVEN = 1.0
    DEEP = 0.2
    """Weight of names that may not exist where the run is: file-tree names below the starting folder, and
    names quoted in the task text (often ones the task asks to create)."""

    def __init__(self):
        self.values: dict[tuple, tuple[frozenset, float]] = {}  # (type name, value) -> (tags, weight)
        self.observations = 0

    def add(self, value, tags: frozenset, weight: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return
        if isinstance(value, str):
            value = value.strip()
            if not value or len(value) > 80 or "\n" in value:
                return
            if "/" in value.strip("/") and " " not in value:  # a path: its last part is a name too
                self.add(value.rstrip("/").rsplit("/", 1)[-1], tags, weight)
            if value.count(" ") >= 3:  # a sentence is text to reuse, never a name or an id
                tags = frozenset({"text", "content", "message"})
            elif _FILE_LIKE.match(value):
                tags = (tags - {"dir"}) | {"file", "name"}
        key = (type(value).__name__, value)
        old_tags, old_weight = self.values.get(key, (frozenset(), 0.0))
        self.values[key] = (old_tags | tags, max(old_weight, weight))

    def harvest(self, obj, tags: frozenset, weight: float, depth: int = 0) -> None:
        """Walk a JSON-like value; values are tagged by their field names, dict keys that are data become values."""
        if depth > 12:
            return
        if isinstance(obj, dict):
            for key, value in obj.items():
                key = str(key)
                if isinstance(value, dict) and value.get("type") in ("file", "directory"):  # a file-tree node
                    kind = {"file", "name"} if value["type"] == "file" else {"dir", "name"}
                    # The root is the starting folder and its children are its entries; deeper names exist but
                    # are not reachable from there as they are.
                    is_root = "root" in tags
                    self.add(key, frozenset(kind), self.DEEP if is_root else weight)
                    inner = weight if is_root else min(weight, self.DEEP)
                    self.harvest(value.get("contents", {}), frozenset({"dir"}), inner, depth + 1)
                elif _is_field_key(key):
                    self.harvest(value, name_tags(key) | (tags - {"name"}), weight, depth + 1)
                else:  # a data key ("12345", "AAPL", "Alice"): a value of its container's kind
                    if re.fullmatch(r"[\w\-.@# ]+", key):  # not "MA(5)"-style labels
                        self.add(int(key) if key.isdigit() and len(key) < 10 else key, tags | {"id", "name"}, weight)
                    self.harvest(value, tags, weight, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for item in obj[:50]:
                self.harvest(item, tags, weight, depth + 1)
        else:
            self.add(obj, tags, weight)

    def penalize(self, call: Call) -> None:
        """A call that failed: its argument values are probably wrong here (a missing file, an unknown id)."""
        for _, value in call.kwargs:
            key = (type(value).__name__, value) if isinstance(value, (str, int, float)) else None
            if key in self.values:
                tags, weight = self.values[key]
                self.values[key] = (tags, weight * 0.1)

    def harvest_observation(self, function: str, observation: str) -> None:
        if is_error_observation(observation):
            return
        self.observations += 1
        weight = 2.0 ** min(self.observations, 30)
        tags = name_tags(function)
        try:
            value = json.loads(observation)
        except ValueError:
            value = None
        if isinstance(value, (dict, list)):
            self.harvest(value, tags, weight)
            return
        for quoted in re.findall(r"'([^'\n]{1,60})'|\"([^\"\n]{1,60})\"", observation):
            self.add(quoted[0] or quoted[1], tags | {"name"}, weight)

    def candidates(self, param_tags: frozenset, kind: str) -> list[tuple[object, float]]:
        """(value converted to `kind`, weight) for values sharing tags with the parameter, best matches only."""
        scored = []
        for (_, value), (tags, weight) in self.values.items():
            converted = _convert(value, kind)
            overlap = len(param_tags & tags)
            if converted is None or overlap == 0:
                continue
            if "id" in param_tags and isinstance(value, str) and any(ch.isdigit() for ch in value):
                overlap += 0.5  # an id parameter prefers id-looking values ("USR002" over "Alice")
            scored.append((converted, overlap, weight))
        if not scored:
            return []
        best = max(s for _, s, _ in scored)
        return [(value, weight) for value, s, weight in scored if s >= best - 0.5]


def _convert(value, kind: str):
    """`value` as a JSON-schema `kind`, or None when it does not fit."""
    if kind == "string":
        return str(value) if not isinstance(value, float) else None
    if kind == "integer":
        if isinstance(value, int):
            return value
        return int(value) if isinstance(value, str) and value.isdigit() and len(value) < 10 else None
    if kind in ("float", "number"):
        return float(value) if isinstance(value, (int, float)) else None
    return None


def enum_values(schema: dict) -> list:
    """Allowed values from `enum`, or from the description ("[Enum]: [...]", "Options are: a, b", "(Buy/Sell)")."""
    if schema.get("enum"):
        return list(schema["enum"])
    text = schema.get("description", "")
    match = re.search(r"\[Enum\]:\s*(\[[^\]]*\])", text)
    if match:
        try:
            return [v for v in json.loads(match.group(1)) if isinstance(v, str)]
        except ValueError:
            pass
    match = re.search(r"(?:\[Enum\]|[Oo]ptions(?: are)?):\s*([^.\n]+)", text)
    if match:
        return [v.strip() for v in match.group(1).split(",") if v.strip()]
    match = re.search(r"\((\w+)/(\w+)\)|\((\w+) or (\w+)\)", text)
    if match:
        return [v for v in match.groups() if v]
    return re.findall(r"'(\w+)' for", text)


class ArgumentSampler:
    """Draws one value per parameter: an enum member, a value the run has seen, or a small typed default."""

    def __init__(self, rng: random.Random, pool: ValuePool, description: str):
        self.rng, self.pool = rng, pool
        self.words = [w for w in re.findall(r"[A-Za-z]{4,}", description) if w.lower() not in _STOPWORDS] or ["test"]

    def call(self, doc: dict) -> Call:
        parameters = (doc.get("parameters") or {}).get("properties", {})
        required = set((doc.get("parameters") or {}).get("required", []))
        creates = doc["name"].lower().startswith(_CREATORS)
        kwargs = []
        for name, schema in parameters.items():
            if name in required or self.rng.random() < 0.3:  # optional ones mostly keep their defaults
                kwargs.append((name, self.value(name, schema, creates)))
        return Call(doc["name"], (), tuple(kwargs))

    def value(self, name: str, schema: dict, creates: bool = False):
        kind = _kind(schema)
        options = enum_values(schema)
        tags = name_tags(name)
        if kind == "array":
            item = schema.get("items") or {"type": "string"}
            if options:
                return self.rng.sample(options, k=self.rng.randint(1, min(2, len(options))))
            longest = 2 if item.get("type") == "string" else 3
            return [self.value(name, item) for _ in range(self.rng.randint(1, longest))]
        if kind == "dict":
            keys = re.findall(r"-\s*(\w+)\s*\((str|int|float)\)", schema.get("description", ""))
            return {key: self.value(key, {"type": {"str": "string"}.get(t, t)}) for key, t in keys[:1]}
        if kind == "boolean":
            return self.rng.random() < 0.5
        if options:
            return self.rng.choice(options)
        # New names where something is created or renamed; elsewhere a made-up name would only miss.
        fresh = 0.7 if creates else 0.5 if "destination" in tags else 0.0
        if kind == "string" and tags & {"file", "dir", "name", "destination"} and self.rng.random() < fresh:
            return self.fresh_name(tags)
        found = self.pool.candidates(tags, kind)
        if found:
            values, weights = zip(*found)
            return self.rng.choices(values, weights=weights)[0]
        return self.default(tags, kind)

    def fresh_name(self, tags: frozenset) -> str:
        """A new name made of two random words: a file name with an extension, a folder or an item name."""
        stem = "_".join(self.rng.sample(WORDS, 2))
        if "file" in tags:
            return f"{stem}.{self.rng.choice(_EXTENSIONS)}"
        return stem

    def fresh_text(self) -> str:
        """A short new text of three random words, e.g. "Budget review trial"."""
        return " ".join(self.rng.sample(WORDS, 3)).capitalize()

    def default(self, tags: frozenset, kind: str):
        if kind == "integer":
            return self.rng.choice([1, 2, 3, 5, 10])
        if kind in ("float", "number"):
            return self.rng.choice([1.0, 2.5, 10.0, 50.0, 100.0])
        if "date" in tags:
            return self.rng.choice(["2024-11-15", "2024-12-01"])
        if "time" in tags:
            return self.rng.choice(["10:30 AM", "03:45 PM"])
        if tags & {"file", "dir", "name", "destination"}:
            return self.fresh_name(tags)
        if tags & {"content", "message", "comment", "description", "resolution", "title", "text"}:
            return self.fresh_text()
        return self.rng.choice(self.words)


def _kind(schema: dict) -> str:
    """Gorilla type names folded onto the few kinds the sampler knows."""
    kind = schema.get("type", "string")
    return {"list": "array", "tuple": "array", "object": "dict", "bool": "boolean", "int": "integer",
            "double": "float"}.get(kind, kind)


class SchemaExplorer(Explorer):
    """Valid calls drawn from the tool schemas, with arguments from what the run has observed.

    Guided: a `focus_ratio` share of steps draws its tool from the context's focus_pattern, and no call in
    do_not_repeat is ever made. Unguided: tools are drawn uniformly (the "random exploration" baseline).
    Every (target, run) has its own seeded RNG, so the same inputs give the same triplets."""

    name = "schema"
    MAX_DRAWS = 20
    """Draws per step before a run gives up finding a call it has not made (and that is allowed)."""
    LOGIN_ERROR = re.compile(r"log(?:ged)?[ -]?in|authenticat", re.IGNORECASE)

    def explore(self, target, context, config):
        docs = target.tool_docs()
        focus = [doc for doc in docs if doc["name"] in _focus_tools(context)]
        banned = {_canonical(c) for c in (context or {}).get("do_not_repeat", [])}
        login = [doc for doc in docs if re.search(r"login|authenticate", doc["name"])]
        triplets = []
        for k, run_id in enumerate(run_ids(target, context, config.runs)):
            rng = random.Random(stable_seed(config.seed, target.task_id, target.signal_id, k))
            pool = ValuePool()
            for state in target.initial_config.values():  # keyed by class name, which is no argument value
                pool.harvest(state, frozenset(), ValuePool.GIVEN)
            for quoted in re.findall(r"'([^'\n]{1,60})'", target.description):  # often names still to be made
                pool.add(quoted, frozenset({"name"}), ValuePool.DEEP)
            sampler = ArgumentSampler(rng, pool, target.description)
            env, made, observation = start_env(target.source()), set(), ""
            for step in range(config.calls_per_run):
                # An error that asks for a login is answered by a login call: the state says what is missing.
                prefer = login if is_error_observation(observation) and self.LOGIN_ERROR.search(observation) else []
                call = self._draw(rng, sampler, docs, focus, config.focus_ratio, banned | made, prefer)
                if call is None:
                    self.cost.skip("no_new_call")
                    break
                source = call.to_source()
                made.add(source)
                [observation] = env.execute([call])
                if is_error_observation(observation):
                    pool.penalize(call)
                pool.harvest_observation(call.name, observation)
                triplets.append(triplet_record(target, context, run_id, step, source, observation,
                                         not is_error_observation(observation), self.name))
            env.close()
        return triplets

    def _draw(self, rng, sampler, docs, focus, focus_ratio, avoid, prefer) -> Call | None:
        for attempt in range(self.MAX_DRAWS):
            if prefer and attempt < 3:
                doc = rng.choice(prefer)
            else:
                doc = rng.choice(focus if focus and rng.random() < focus_ratio else docs)
            call = sampler.call(doc)
            if call.to_source() not in avoid:
                return call
        return None


def _focus_tools(context: dict | None) -> set[str]:
    """Identifiers named in focus_pattern entries (plain names, call strings or "cd>mv" patterns)."""
    return {name for entry in (context or {}).get("focus_pattern", []) for name in re.findall(r"[A-Za-z_]\w*", entry)}


def _canonical(call_text: str) -> str:
    try:
        return parse_call(call_text).to_source()
    except CallParseError:
        return call_text.strip()
