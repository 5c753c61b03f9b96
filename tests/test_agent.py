"""Multi-turn rollouts: a scripted model replays ground truth (fast, exact), the real tiny model and the real
loopback OpenAI endpoint run the same loop."""

import json

import pytest
from helpers import BFCL, check_scripted_token_records, scripted_reply_ids

from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.core.user_yaml import parse_overrides
from coevolve_lib.envs.bfcl.episode import Episode
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.profiles import run_config
from coevolve_lib.rollout.agent import RolloutPhase, rollout_phase, run_rollouts


class ScriptedModel(ChatModel):
    """Answers each user turn with the ground-truth calls (one step), then a plain answer. Unit tests only."""

    def __init__(self, tasks, native_tools=True, wrong_turn=None):
        self.name, self.native_tools, self.calls = "scripted", native_tools, 0
        self.ground_truth = {t.turns[0][0]["content"] if t.turns[0] else t.id: t.ground_truth for t in tasks}
        self.wrong_turn = wrong_turn

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        self.calls += 1
        return [self._reply(messages) for messages in conversations]

    def _reply(self, messages):
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        turn = sum(m["role"] == "user" for m in messages) - 1
        calls = self.ground_truth[first_user][turn]
        if messages[-1]["role"] != "user" or not calls or turn == self.wrong_turn:
            return Generation("Done.", None, 10, 2, 0.0, "stop")
        if self.native_tools:
            text = "".join(f"<tool_call>{json.dumps(_as_json(c))}</tool_call>" for c in calls)
        else:
            text = "[" + ", ".join(calls) + "]"
        return Generation(text, None, 10, 5, 0.0, "stop")


def _as_json(call_text):
    call = parse_call(call_text)
    return {"name": call.name, "arguments": call.kwargs_dict}


def _keyword_only_tasks(n):
    """Tasks whose ground truth has keyword arguments only (native JSON calls cannot carry positional ones)."""
    return [t for t in load_tasks("v3", "base")
            if all(not parse_call(c).args for turn in t.ground_truth for c in turn)][:n]


@pytest.mark.parametrize("native", [True, False])
def test_ground_truth_policy_succeeds_and_records_everything(native):
    tasks = _keyword_only_tasks(6)
    model = ScriptedModel(tasks, native_tools=native)
    seen = []
    records = run_rollouts(model, tasks, RolloutPhase(RolloutConfig(batch_size=4)), on_record=seen.append,
                           progress=False, new_episode=Episode)
    assert len(records) == len(seen) == 6
    assert all(r["success"] and r["score"] == 1.0 and r["terminated"] == "completed" for r in records), \
        [(r["task_id"], r["error_type"], r["error_message"]) for r in records if not r["success"]]
    record = records[0]
    assert record["tool_format"] == ("native" if native else "prompt")
    assert record["steps"] and all(s["observations"] for s in record["steps"])
    assert sum(m["role"] == "tool" for m in record["messages"]) == sum(len(s["calls"]) for s in record["steps"])
    assert model.calls < 6 * 8  # episodes were batched, not run one by one


def test_a_missed_turn_fails_with_the_official_error_type():
    tasks = [t for t in _keyword_only_tasks(6) if len(t.turns) > 1][:2]
    records = run_rollouts(ScriptedModel(tasks, wrong_turn=1), tasks, RolloutPhase(), progress=False,
                           new_episode=Episode)
    assert [r["success"] for r in records] == [False, False]
    assert {r["error_type"] for r in records} == {"multi_turn:empty_turn_model_response"}


def test_samples_per_task_gives_independent_episodes():
    tasks = _keyword_only_tasks(2)
    records = run_rollouts(ScriptedModel(tasks), tasks, RolloutPhase(), samples_per_task=3, progress=False,
                           new_episode=Episode)
    assert sorted((r["task_id"], r["sample_index"]) for r in records) == sorted(
        (t.id, i) for t in tasks for i in range(3))
    assert all(r["success"] for r in records)  # no state leaked between the 3 envs of one task


def test_real_tiny_model_runs_the_loop():
    tasks = load_tasks("v3", "base")[:3]
    cfg = RolloutPhase(RolloutConfig(tool_docs="compact"), generation=GenerationConfig(max_new_tokens=16))
    records = run_rollouts(load_chat_model("tiny"), tasks, cfg, progress=False, new_episode=Episode)
    assert len(records) == 3
    for record in records:
        assert record["tool_format"] == "native" and record["prompt_tokens"] > 200 and record["completion_tokens"] > 0
        assert record["turn_valid"] and record["success"] is False  # a random-init model solves nothing


def test_endpoint_tool_calls_and_step_cap_through_the_real_server():
    """A scripted endpoint that always calls ls(): structured tool calls run, and the per-turn cap ends the episode."""
    tiny = load_chat_model("tiny")
    faults = FaultConfig(faults=["500"], scripted_reply='<tool_call>{"name": "ls", "arguments": {}}</tool_call>')
    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    with ChatServer(tiny, faults=faults) as server:
        model = OpenAIChatModel("tiny", base_url=server.base_url, timeout=10, backoff_s=0.01)
        [record] = run_rollouts(model, [task], RolloutPhase(RolloutConfig(max_steps_per_turn=3)), progress=False,
                                new_episode=Episode)
    assert record["terminated"] == "turn_step_cap" and record["success"] is False
    assert record["error_type"] == "agent:turn_step_cap"
    assert [s["calls"] for s in record["steps"]] == [["ls()"]] * 3
    assert "current_directory_content" in record["steps"][0]["observations"][0]
    assert model.num_retries == 1  # the injected HTTP 500 was retried


def test_endpoint_failure_ends_the_episode_as_a_counted_model_error():
    tiny = load_chat_model("tiny")
    task = load_tasks("v3", "base")[0]
    with ChatServer(tiny, faults=FaultConfig(always="500")) as server:
        model = OpenAIChatModel("tiny", base_url=server.base_url, timeout=5, backoff_s=0.01, max_retries=1)
        [record] = run_rollouts(model, [task], RolloutPhase(), progress=False, new_episode=Episode)
    assert record["terminated"] == "model_error" and record["error_message"] and not record["success"]


class OneReplyModel(ChatModel):
    """Replies `text` once, then answers. Unit tests only."""

    def __init__(self, text):
        self.name, self.native_tools, self.text, self.calls = "one-reply", False, text, 0

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        self.calls += 1
        return [Generation(self.text if self.calls == 1 else "Done.", None, 5, 5, 0.0, "stop") for _ in conversations]


def test_hallucinated_functions_are_recorded_with_their_error_and_never_run():
    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    [record] = run_rollouts(OneReplyModel("[teleport(to='x'), ls(), cd(folder=__import__('os'))]"), [task],
                            RolloutPhase(), progress=False, new_episode=Episode)
    [step] = record["steps"]
    assert step["calls"] == ["teleport(to='x')", "ls()"]  # decoded calls, as BFCL's runner records them
    assert (step["observations"][0].startswith("Error during execution")
            and "current_directory" in step["observations"][1])
    assert len(step["rejected"]) == 1  # the non-literal argument never decoded


class ScriptedTokenModel:
    """Token-level stand-in for the policy (unit tests only): the real tiny tokenizer and template, and replies that
    are the pool task's reference calls, one per step, in the template's own tool-call format, then "Done."."""

    def __init__(self, tasks):
        from coevolve_lib.core.models import HFChatModel

        real = load_chat_model("tiny")
        self.chat = HFChatModel.from_loaded(real.model, real.tokenizer, "scripted-tokens")
        self.tasks = tasks
        self.name, self.native_tools, self.tokenizer, self.stop_ids = "scripted-tokens", True, real.tokenizer, \
            self.chat.stop_ids
        self.prompt_ids, self.continuation_ids = self.chat.prompt_ids, self.chat.continuation_ids

    def generate_from_ids(self, prompts, config):
        out = []
        for ids in prompts:
            token_ids = scripted_reply_ids(self.tokenizer, self.tasks, ids)
            out.append(Generation(self.tokenizer.decode(token_ids, skip_special_tokens=True), None, len(ids),
                                  len(token_ids), 0.0, "stop", token_ids=token_ids))
        return out


def test_token_level_episodes_keep_generated_ids_and_mask_the_environment(tmp_path):
    from coevolve_lib.engine.feedback import FeedbackConfig, synthesize_initial
    from coevolve_lib.engine.pool import TaskPool
    from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
    from coevolve_lib.envs.bfcl.tasks import split_tasks

    pool = TaskPool(tmp_path / "pool.jsonl")
    synthesize_initial(split_tasks(load_tasks("v3", "base"), "train")[:6], pool, tmp_path / "d0", FeedbackConfig(),
                       BFCL.target, BFCL.round_stages(),
                       size=3, progress=False)
    tasks = [pool_task_to_bfcl(t) for t in pool.tasks]
    model = ScriptedTokenModel(tasks)
    records = run_rollouts(model, tasks, RolloutPhase(RolloutConfig(tool_docs="none"), token_level=True),
                           samples_per_task=2,
                           progress=False, new_episode=Episode)
    assert [r["task_id"] for r in records] == [t.id for t in tasks for _ in range(2)]  # input order
    tokenizer = model.tokenizer
    check_scripted_token_records(records, tasks, tokenizer)
    for record in records:
        ids = record["completion_ids"]
        environment = tokenizer.decode([i for i, m in zip(ids, record["completion_mask"]) if not m])
        for step in record["steps"]:
            assert step["observations"][0][:40] in environment
        # the ids are the conversation as the (prefix-preserving) training template renders it
        full = tokenizer.decode(record["prompt_ids"] + ids)
        assert full.startswith(tokenizer.decode(record["prompt_ids"])) and full.endswith("Done.<|im_end|>")


def test_token_level_caps_the_completion_length_and_fails_the_episode():
    tasks = load_tasks("v3", "base")[:1]
    model = load_chat_model("tiny")
    cfg = RolloutPhase(RolloutConfig(tool_docs="none"), token_level=True, max_completion_tokens=20,
                       generation=GenerationConfig(max_new_tokens=16, temperature=1.0, seed=0))
    [record] = run_rollouts(model, tasks, cfg, progress=False, new_episode=Episode)
    assert len(record["completion_ids"]) <= 20 and not record["success"]
    assert record["terminated"] in ("completion_cap", "completed")


class RepeatModel(ChatModel):
    """Replies `text` to every request. Unit tests only."""

    def __init__(self, text):
        self.name, self.native_tools, self.text = "repeat", False, text

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        return [Generation(self.text, None, 5, 5, 0.0, "stop") for _ in conversations]


@pytest.mark.parametrize("budget, reply, end, steps_run", [
    ({"max_reply_chars": 20}, "[ls(), ls(), ls(), ls()]", "reply_cap", 0),
    ({"max_calls_per_step": 3}, "[ls(), ls(), ls(), ls()]", "step_call_cap", 0),
    ({"max_calls_per_episode": 10}, "[ls(), ls(), ls(), ls()]", "episode_call_cap", 2),
    ({"max_observation_chars": 20}, "[ls()]", "observation_cap", 1),
    ({"max_episode_observation_chars": 150}, "[ls(), ls()]", "episode_observation_cap", 2),
    ({"max_record_chars": 500}, "[ls(), ls()]", "record_cap", 2),
])
def test_an_episode_budget_ends_the_episode_as_a_failure_that_names_it(budget, reply, end, steps_run, caplog):
    """Each budget of `rollout.budget`, set by a profile override: the episode ends as a failure with the budget's
    name, without running the reply that passed a call budget, and the text it keeps is within the budget."""
    [(field, value)] = budget.items()
    config = rollout_phase(run_config("tiny", parse_overrides([f"rollout.budget.{field}={value}"])).rollout)
    assert getattr(config.budget, field) == value
    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    [record] = run_rollouts(RepeatModel(reply), [task], config, progress=False, new_episode=Episode)
    assert record["terminated"] == end and record["error_type"] == f"agent:{end}" and not record["success"]
    assert len(record["steps"]) == steps_run
    assert [r.getMessage() for r in caplog.records if "budget" in r.getMessage()] == [
        f"an episode passed its budget: {end} (rollout.budget); it ends as a failure"]
    observations = [o for s in record["steps"] for o in s["observations"]]
    assert all(len(o) <= config.budget.max_observation_chars for o in observations)
    assert sum(map(len, observations)) <= config.budget.max_episode_observation_chars
    kept = 2 * (sum(len(s["raw"]) for s in record["steps"]) + sum(map(len, observations)))  # messages and steps
    assert kept <= config.budget.max_record_chars


def test_a_phase_holds_the_rollout_section_and_reads_it_through():
    """A `RolloutPhase` holds the profile's section (no copies); an episode written when the phase copied its fields
    (`config.max_steps_per_episode`) still reads them."""
    section = RolloutConfig(batch_size=3, tool_docs="none", engine="kv_cache")
    phase = RolloutPhase(section, token_level=True)
    assert phase.settings is section and phase.engine == "kv_cache"
    assert (phase.batch_size, phase.tool_docs, phase.budget) == (3, "none", section.budget)
    assert RolloutPhase(section, engine="vllm").engine == "vllm" and section.engine == "kv_cache"
    with pytest.raises(AttributeError):
        phase.temperature  # the section's sampling goes through `generation`, not the phase
