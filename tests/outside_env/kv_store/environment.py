"""A key-value store with four tools behind `coevolve_lib.core.environment.Environment`: its sources, explorer,
abstraction, validation, episodes and metric, in the contracts docs/architecture.md lists. Model text is parsed
(`core.safe_calls.parse_call`), never evaluated."""

import json
import os
import random
from pathlib import Path

from coevolve_lib.core.cost import Cost
from coevolve_lib.core.environment import Environment, RoundStages
from coevolve_lib.core.records import config_hash
from coevolve_lib.core.results import write_result
from coevolve_lib.core.safe_calls import CallParseError, parse_call
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import Explorer, explore_target, run_ids, split_runs, stable_seed, triplet_record
from coevolve_lib.engine.tasks import content_id, task_spec, verdict
from coevolve_lib.rollout import toolcalls
from coevolve_lib.rollout.agent import ROLLOUT_SCHEMA, Conversation
from coevolve_lib.rollout.evaluation import task_outcomes

TOOLS = {"put": ("key", "value"), "get": ("key",), "delete": ("key",), "list_keys": ()}
STARTS = 4
"""Start states kv-0 .. kv-3 (the pool's sources; held-out set (a) explores them with its own seed)."""
HUGE_OBSERVATION = 300_000


def faults() -> set[str]:
    """The faults `KV_STORE_FAULTS` asks for (see the package docstring)."""
    return {name.strip() for name in os.environ.get("KV_STORE_FAULTS", "").split(",") if name.strip()}


def execute(store: dict, action: str) -> tuple[str, bool]:
    """(observation, ok) of one call on the store."""
    try:
        call = parse_call(action, TOOLS)
        args = dict(zip(TOOLS[call.name], call.args)) | call.kwargs_dict
        if set(args) != set(TOOLS[call.name]):
            return f"Error: {call.name} takes {list(TOOLS[call.name])}", False
    except CallParseError as error:
        return f"Error: {error}", False
    key = str(args.get("key"))
    if call.name == "put":
        store[key] = str(args["value"])
        return "ok", True
    if call.name == "list_keys":
        return json.dumps(sorted(store)), True
    if key not in store:
        return f"Error: no key {key!r}", False
    return (store.pop(key) if call.name == "delete" else store[key]), True


def replay(store: dict, actions: list[str]) -> dict:
    store = dict(store)
    for action in actions:
        execute(store, action)
    return store


class Start:
    """A start state of the store, with the unique `id` D_0 and the held-out sets key on."""

    def __init__(self, index: int):
        self.id, self.store = f"kv-{index}", {f"k{index}": "v0", "shared": str(index)}


class RandomCalls(Explorer):
    """R runs of S random calls on a fresh copy of the start state, seeded by the run's exploration seed."""

    name = "random"

    def explore(self, target, context, config):
        if "explore" in faults() and target.task_id == "kv-1":
            raise RuntimeError("the store's backend is down (injected fault)")
        triplets = []
        for k, run_id in enumerate(run_ids(target, context, config.runs)):
            store = dict(target.initial_config["store"])
            rng = random.Random(stable_seed(config.seed, target.task_id, k))
            for step in range(config.calls_per_run):
                name = rng.choice(sorted(TOOLS))
                values = {"key": rng.choice(sorted(store) + ["new"]), "value": rng.choice(["a", "b"])}
                action = f"{name}(" + ", ".join(f"{p}={values[p]!r}" for p in TOOLS[name]) + ")"
                observation, ok = execute(store, action)
                if "observation" in faults() and target.task_id == "kv-2" and step == 0:
                    observation = "x" * HUGE_OBSERVATION
                triplets.append(triplet_record(target, context, run_id, step, action, observation, ok, self.name))
        return triplets


def abstract(group_key, triplets, source, config, model):
    """Each run's first `min_calls` valid calls become one task."""
    specs = []
    for run_id, run in split_runs(triplets).items():
        actions = [t["action"] for t in run if t["valid"]][:config.min_calls]
        if len(actions) == config.min_calls:
            draft = {"intent": "store", "query": "Do this: " + "; then ".join(actions), "action_sequence": actions,
                     "completion_criterion": "the store equals the reference's", "run_ids": [run_id]}
            specs.append(task_spec(draft, source, "kv"))
    if "empty_task" in faults() and specs:
        specs.append(task_spec({"intent": "", "query": "", "action_sequence": [], "completion_criterion": "",
                                "run_ids": []}, source, "kv"))
    return specs, Cost().as_dict()


def validate(spec, config, model, known_task_ids):
    """Accept a spec whose every call succeeds from the start state (and that the pool does not hold yet)."""
    store, observations = dict(spec["initial_config"]["store"]), []
    for action in spec["action_sequence"]:
        observations.append(execute(store, action))
    task_id = content_id(spec["initial_config"], spec["query"], spec["action_sequence"])
    reasons = [] if all(ok for _, ok in observations) else ["execution_error"]
    reasons += ["duplicate"] if task_id in known_task_ids else []
    if "observation" in faults() and observations:  # the huge observation again, where validation executes
        observations[0] = ("x" * HUGE_OBSERVATION, observations[0][1])
    return verdict(spec, task_id, spec["action_sequence"], reasons, "objective_met",
                   observations=[o for o, _ in observations])


class StoreEpisode(Conversation):
    """One user turn: the model's calls run on the task's store until a reply makes none; success = the store the
    reference actions leave."""

    def __init__(self, task, sample_index, tool_format, config):
        super().__init__(config)
        self.task, self.sample_index, self.tool_format = task, sample_index, tool_format
        self.store, self.steps = dict(task["initial_config"]["store"]), []
        self.messages.append({"role": "user", "content": task["query"]})

    def feed(self, generation):
        if "tool" in faults() and self.sample_index == 0:
            raise RuntimeError("a tool of the store raised (injected fault)")
        self.take_tokens(generation)
        if generation.error or self.terminated:
            self.messages.append({"role": "assistant", "content": generation.text})
            self.terminated = self.terminated or "model_error"
            return
        reply = toolcalls.parse_reply(self.tool_format, generation.text, generation.tool_calls)
        self.messages.append(toolcalls.assistant_message(self.tool_format, generation.text, reply))
        if reply.is_answer or len(self.steps) >= self.config.settings.max_steps_per_episode:
            self.terminated = "completed" if reply.is_answer else "episode_step_cap"
            return
        observations = self.kept_observations([execute(self.store, call.to_source())[0] for call in reply.calls])
        self.messages.extend(toolcalls.tool_messages(reply, observations))
        self.steps.append({"turn": 0, "step": len(self.steps), "raw": generation.text,
                           "calls": [c.to_source() for c in reply.calls], "observations": observations,
                           "rejected": reply.errors})

    def record(self, model_name):
        success = self.terminated == "completed" and self.store == replay(self.task["initial_config"]["store"],
                                                                          self.task["reference_actions"])
        return {"schema": ROLLOUT_SCHEMA, "task_id": self.task["task_id"], "sample_index": self.sample_index,
                "model": model_name, "messages": self.messages, "steps": self.steps, "score": float(success),
                "success": success, "error_type": None if success else "kv:wrong_store", "error_message": None,
                "terminated": self.terminated, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, **self.token_fields()}


def evaluation_tasks() -> list[dict]:
    """The store's benchmark split `val`: one fixed task per start state (put a new key, read it back, list)."""
    tasks = []
    for index in range(STARTS):
        store = Start(index).store
        actions = [f"put(key='n{index}', value='x{index}')", f"get(key='n{index}')", "list_keys()"]
        query = f"Store 'x{index}' under the key 'n{index}', read it back, then list the keys."
        tasks.append({"task_id": content_id({"store": store}, query, actions), "query": query,
                      "initial_config": {"store": store}, "reference_actions": actions, "involved_classes": ["KV"],
                      "pool_version": 0})
    return tasks


class KeyValueStore(Environment):
    name = "kv"

    def sources(self, part):
        return [Start(i) for i in range(STARTS)] if part == "pool" else []

    def target(self, source):
        return ExplorationTarget(source.id, self, "kv", {"store": source.store}, ["KV"], "A key-value store.")

    def round_stages(self):
        return RoundStages(explore=lambda target, config, model: explore_target(target, config, model, RandomCalls()),
                          abstract=abstract, validate=validate)

    def tool_docs(self, target):
        return [{"name": name, "description": f"{name} on the store",
                 "parameters": {"type": "dict", "properties": {p: {"type": "string"} for p in params}}}
                for name, params in TOOLS.items()]

    def is_error(self, observation):
        return observation.startswith("Error")

    def rollout_tasks(self, pool_tasks):
        return pool_tasks

    def new_episode(self, task, sample_index, tool_format, config):
        return StoreEpisode(task, sample_index, tool_format, config)

    def evaluate(self, model, evaluation, out, rollout, experiment, progress=False):
        tasks = evaluation_tasks()[:evaluation.limit]
        outcomes = task_outcomes(model, tasks, rollout, self, progress=progress,  # resumes from the episodes file
                                 records_path=Path(out).with_suffix(".rollouts.jsonl"))
        correct = sum(o[0] for o in outcomes.values())
        row = {"benchmark": self.name, "eval_set": "kv/val", "metric": "success", "n": len(outcomes),
               "correct": correct, "value": round(100.0 * correct / len(outcomes), 2),
               "temperature": rollout.generation.temperature}
        return write_result(out, experiment=experiment, profile=evaluation.profile, model=model.name,
                            config_hash=config_hash({"split": evaluation.split, "limit": evaluation.limit}),
                            metrics=[row])

    @classmethod
    def check(cls, run):
        problems = super().check(run)
        if run.evaluation.split != "val":
            problems.append(f"evaluation.split: the store has one split, val (got {run.evaluation.split!r})")
        return problems
