"""Helpers shared by test modules (pytest puts this folder on sys.path)."""

import json

from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.paths import RUNS_DIR
from coevolve_lib.core.user_yaml import parse_overrides
from coevolve_lib.engine.pool_updates import PoolUpdate
from coevolve_lib.engine.signals import Signal, register
from coevolve_lib.envs.bfcl.benchmark import grade
from coevolve_lib.envs.bfcl.environment import BFCLEnvironment
from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
from coevolve_lib.profiles import data_engine_config, deep_merge, run_config

BFCL = BFCLEnvironment(data_engine_config("tiny"), RUNS_DIR / "tests")
"""BFCL behind the seam, for tests that make targets and run rounds without a data engine (it writes nothing)."""


def checker_accepts(task: dict, steps: list[list[str]]) -> bool:
    """The BFCL checker's verdict on an agent's steps (each a list of call strings) on a pool task: the RL reward."""
    return grade(pool_task_to_bfcl(task), [[call for calls in steps for call in calls]])


def small_run(base: dict, tmp_path, name: str, **extra):
    """(run config, run folder): the tiny profile with the `base` overrides (nested sections) and `extra` ones
    (`section.field=value` names, JSON values) merged in."""
    overrides = parse_overrides([f"{k}={json.dumps(v)}" for k, v in extra.items()])
    return run_config("tiny", deep_merge(base, overrides)), tmp_path / name


def check_scripted_token_records(records: list[dict], tasks: list, tokenizer) -> None:
    """Token-level records of a scripted model that replies with each task's reference calls, one per step, then
    "Done.": every episode succeeds, the generated tokens are exactly those replies, and the environment tokens hold
    one tool response per step."""
    from coevolve_lib.core.safe_calls import parse_call

    for record in records:
        assert record["success"], record["error_type"]
        ids, mask = record["completion_ids"], record["completion_mask"]
        assert len(ids) == len(mask) and mask[0] == 1 and mask[-1] == 1
        generated = tokenizer.decode([i for i, m in zip(ids, mask) if m])
        calls = [parse_call(c) for c in next(t for t in tasks if t.id == record["task_id"]).ground_truth[0]]
        assert generated == "".join("<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.kwargs_dict}) +
                                    "\n</tool_call><|im_end|>" for c in calls) + "Done.<|im_end|>"
        environment = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
        assert environment.count("<tool_response>") == len(record["steps"])


def scripted_reply_ids(tokenizer, tasks, prompt_ids: list[int]) -> list[int]:
    """The token ids of a scripted policy's next reply to a token-level prompt of one of `tasks`: the task's next
    reference call in the template's tool-call format, or "Done." once they are all made."""
    from coevolve_lib.core.safe_calls import parse_call

    text = tokenizer.decode(prompt_ids)
    task = next(t for t in tasks if t.turns[0][0]["content"] in text)
    step = text.count("<|im_start|>assistant") - 1
    calls = task.ground_truth[0]
    if step < len(calls):
        call = parse_call(calls[step])
        reply = "<tool_call>\n" + json.dumps({"name": call.name, "arguments": call.kwargs_dict}) + \
            "\n</tool_call><|im_end|>"
    else:
        reply = "Done.<|im_end|>"
    return tokenizer(reply, add_special_tokens=False)["input_ids"]


class CodeModel(ChatModel):
    """Replies to each task's n-th request with its n-th scripted reply (the last one repeated), by the task id whose
    instruction the user message holds; `before_reply(task_id, step)` runs first (the fault test kills the server
    there). Message-level, a unit-test stand-in."""

    def __init__(self, tasks, replies: dict[str, list[str]], before_reply=None):
        self.name, self.native_tools, self.calls = "scripted-code", False, 0
        self.task_of = {task.instruction: task.task_id for task in tasks}
        self.replies, self.before_reply = replies, before_reply

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        self.calls += 1
        return [self._reply(messages) for messages in conversations]

    def _reply(self, messages):
        instruction = messages[1]["content"].split("Task: ", 1)[1]
        task_id, step = self.task_of[instruction], sum(m["role"] == "assistant" for m in messages)
        if self.before_reply is not None:
            self.before_reply(task_id, step)
        replies = self.replies[task_id]
        return Generation(replies[min(step, len(replies) - 1)], None, 10, 5, 0.0, "stop")


@register
class EveryFailure(Signal):
    """Test-only signal type: every failed rollout (so that rounds have targets with a random-init policy)."""

    type = "every_failure"

    def observe(self, step, rollouts):
        return [self.fire(r, step, {"score": r["score"]}) for r in rollouts if r["score"] < 0.5]


class RaisingPoolUpdate(PoolUpdate):
    """A pool update of a plugin's that raises in every round (`training.pool_updates=helpers:RaisingPoolUpdate`)."""

    name = "raising_update"

    def round(self, inputs):
        raise RuntimeError("injected fault: the pool update raised")


def children_alive_after_kill(script_text: str, *args: str, folder) -> list:
    """Run `script_text` as a kit process (it prints "started" once its servers run), SIGKILL it (no `finally` runs),
    and return the processes under it still alive 10 s later (none: each died with its parent)."""
    import subprocess
    import sys

    import psutil

    from coevolve_lib.core.paths import REPO_ROOT

    script = folder / "kit.py"
    script.write_text(script_text)
    kit = subprocess.Popen([sys.executable, str(script), *args], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert kit.stdout.readline().strip() == "started"
        tree = psutil.Process(kit.pid).children(recursive=True)
        assert tree, "the server runs under the kit's process"
        kit.kill()
        kit.wait()
        return psutil.wait_procs(tree, timeout=10)[1]
    finally:
        kit.kill()
