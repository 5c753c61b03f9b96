"""The proof that the environment seam is real: a third environment, a key-value store with four tools, written here in
a few dozen lines and registered from this file, runs D_0, a signal-guided round, two GRPO steps and an evaluation
through `core.environment.Environment` alone. No file of the library names it."""

import json
import random

from helpers import EveryFailure  # noqa: F401 (registers the every_failure signal: a random policy fails everything)

from coevolve_lib.core.cost import Cost
from coevolve_lib.core.environment import ENVIRONMENTS, Environment, RoundSteps, register
from coevolve_lib.core.records import config_hash
from coevolve_lib.core.results import validate_result, write_result
from coevolve_lib.core.safe_calls import CallParseError, parse_call
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.explore import Explorer, explore_target, run_ids, split_runs, stable_seed, triplet_record
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.engine.tasks import content_id, task_spec, verdict
from coevolve_lib.profiles import run_config
from coevolve_lib.rollout import toolcalls
from coevolve_lib.rollout.agent import ROLLOUT_SCHEMA, Conversation
from coevolve_lib.rollout.evaluation import task_outcomes
from coevolve_lib.training.loop import train

TOOLS = {"put": ("key", "value"), "get": ("key",), "delete": ("key",), "list_keys": ()}


def execute(store: dict, action: str) -> tuple[str, bool]:
    """(observation, ok) of one call on the store; model text is parsed, never evaluated."""
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


class Start:
    """A start state of the store (what D_0 explores), with the `id` held-out sets would key on."""

    def __init__(self, index: int):
        self.id, self.store = f"kv-{index}", {f"k{index}": "v0", "shared": str(index)}


class RandomCalls(Explorer):
    """R runs of S seeded random calls on a fresh copy of the start state."""

    name = "random"

    def explore(self, target, context, config):
        triplets = []
        for k, run_id in enumerate(run_ids(target, context, config.runs)):
            store, rng = dict(target.initial_config["store"]), random.Random(stable_seed(config.seed, target.task_id,
                                                                                         k))
            for step in range(config.calls_per_run):
                name = rng.choice(sorted(TOOLS))
                values = {"key": rng.choice(sorted(store) + ["new"]), "value": rng.choice(["a", "b"])}
                action = f"{name}(" + ", ".join(f"{p}={values[p]!r}" for p in TOOLS[name]) + ")"
                observation, ok = execute(store, action)
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
    return specs, Cost().as_dict()


def replay(store: dict, actions: list[str]) -> dict:
    store = dict(store)
    for action in actions:
        execute(store, action)
    return store


def validate(spec, config, model, known_task_ids):
    """Accept a spec whose every call succeeds from the start state (and that the pool does not hold yet)."""
    store, observations = dict(spec["initial_config"]["store"]), []
    for action in spec["action_sequence"]:
        observations.append(execute(store, action))
    task_id = content_id(spec["initial_config"], spec["query"], spec["action_sequence"])
    reasons = [] if all(ok for _, ok in observations) else ["execution_error"]
    reasons += ["duplicate"] if task_id in known_task_ids else []
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
        self.take_tokens(generation)
        if generation.error or self.terminated:
            self.messages.append({"role": "assistant", "content": generation.text})
            self.terminated = self.terminated or "model_error"
            return
        reply = toolcalls.parse_reply(self.tool_format, generation.text, generation.tool_calls)
        self.messages.append(toolcalls.assistant_message(self.tool_format, generation.text, reply))
        if reply.is_answer or len(self.steps) >= self.config.max_steps_per_episode:
            self.terminated = "completed" if reply.is_answer else "episode_step_cap"
            return
        observations = [execute(self.store, call.to_source())[0] for call in reply.calls]
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


class KeyValueStore(Environment):
    name = "kv"

    def sources(self, part):
        return [Start(i) for i in range(4)] if part == "pool" else []

    def target(self, source, signal=None, trajectory=None):
        return ExplorationTarget(source.id, self, "kv", {"store": source.store}, ["KV"], "A key-value store.",
                                 signal, trajectory)

    def round_steps(self):
        return RoundSteps(explore=lambda target, config, model: explore_target(target, config, model, RandomCalls()),
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

    def evaluate(self, model, settings, out, rollout, experiment, progress=False):
        tasks = [t for t in TaskPool(self.run_dir / "pool.jsonl").tasks if t["pool_version"] == 0][:settings.limit]
        outcomes = task_outcomes(model, tasks, rollout, self, progress=progress)
        correct = sum(o[0] for o in outcomes.values())
        row = {"benchmark": self.name, "eval_set": "kv/d0", "metric": "success", "n": len(outcomes),
               "correct": correct, "value": round(100.0 * correct / len(outcomes), 2)}
        return write_result(out, experiment=experiment, profile=settings.profile, model=model.name,
                            config_hash=config_hash({"split": settings.split}), metrics=[row])


SMALL = {"evaluation": {"benchmark": "kv", "split": "d0"},
         "rollout": {"max_steps_per_episode": 2, "max_new_tokens": 8},
         "data_engine": {"d0_size": 6, "max_targets": 2, "explore": {"runs": 2, "calls_per_run": 4},
                         "signals": {"enabled": ["every_failure"]}, "warm_start": {"enabled": False},
                         "heldout": {"new_tasks": {"size": 0}, "new_envs": {"size": 0}}},
         "training": {"max_steps": 2, "tasks_per_step": 2, "group_size": 2, "feedback_every": 2, "eval_every": 2,
                      "eval_pool_tasks": 3, "eval_limit": 3, "max_completion_tokens": 64, "save_every": 2}}


def test_a_third_environment_runs_the_whole_loop_through_the_seam(tmp_path):
    register("kv", KeyValueStore)
    try:
        run = run_config("tiny", SMALL)  # the profile check knows "kv" from the registry alone
        engine = DataEngine(run.data_engine, tmp_path, run.evaluation.benchmark)
        summary = train(run, tmp_path, progress=False, engine=engine)
    finally:
        del ENVIRONMENTS["kv"]
    d0 = json.loads((tmp_path / "round_000" / "report.json").read_text())
    d0_tasks = [t for t in engine.pool.tasks if t["pool_version"] == 0]
    assert d0["accepted"] == len(d0_tasks) == 6
    assert {t["provenance"]["origin_task"] for t in d0_tasks} <= {"kv-0", "kv-1", "kv-2", "kv-3"}
    signal_round = json.loads((tmp_path / "round_001" / "report.json").read_text())
    assert signal_round["signal_types"] == {"every_failure": 2} and signal_round["added_to_pool"] > 0
    assert {t["provenance"]["signal_type"] for t in engine.pool.tasks if t["pool_version"] == 1} == {"every_failure"}
    assert engine.pool.version == 1 and all(len(t["reference_actions"]) == 3 for t in engine.pool.tasks)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and metrics[-1]["feedback/tasks_added"] > 0
    final = json.loads((tmp_path / "eval" / "step_00002.json").read_text())
    assert final["eval/val_n"] == 3 and 0 <= final["eval/val_success"] <= 100
    assert validate_result(json.loads((tmp_path / "eval" / "val_step_00002.json").read_text())) == []
    assert summary["eval_before"]["step"] == 0 and summary["eval_after"]["step"] == 2
