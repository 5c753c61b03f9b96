"""One episode of a BFCL task, following BFCL's inference protocol: per user turn the model replies; if the reply holds
tool calls they run in the episode's own `BFCLEnv` and their results go back as `tool` messages, and the model is asked
again; a reply without calls ends the turn. Caps (the paper's Table 9: 30 interaction steps per episode; BFCL's
runner: 20 steps per turn) and the episode budget (`core.config.EpisodeBudget`: reply length, calls, observation and
record sizes, the environment's state) end the episode as a failure. `rollout.agent.run_rollouts` drives it.
"""

from __future__ import annotations

import importlib
import json
import logging
import time

from coevolve_lib.core.models import Generation
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.tasks import BFCLTask
from coevolve_lib.rollout import toolcalls
from coevolve_lib.rollout.agent import ROLLOUT_SCHEMA, Conversation, RolloutPhase

log = logging.getLogger(__name__)


def _bfcl_prompt(name: str) -> str:
    """One of BFCL's own prompt strings, from the loaded bfcl-eval release."""
    return getattr(importlib.import_module("bfcl_eval.constants.default_prompts"), name)


def prompt_style_system_prompt(func_docs: list[dict]) -> str:
    """BFCL's system prompt for prompting models, listing the function docs as JSON."""
    functions = json.dumps(func_docs, ensure_ascii=False)
    return _bfcl_prompt("DEFAULT_SYSTEM_PROMPT").format(functions=functions)


def added_functions_message(tool_format: str, new_docs: list[dict]) -> str:
    """BFCL's user message for a miss_func turn, when held-out functions become available."""
    if tool_format == "native":
        return _bfcl_prompt("DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC")
    functions = json.dumps(new_docs, ensure_ascii=False)
    return _bfcl_prompt("DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING").format(functions=functions)


class Episode(Conversation):
    """One rollout of one BFCL task: the conversation, the environment, and the record being built."""

    def __init__(self, task: BFCLTask, sample_index: int, tool_format: str, config: RolloutPhase):
        super().__init__(config)
        self.task, self.sample_index, self.tool_format = task, sample_index, tool_format
        self.env = BFCLEnv(task, max_state_chars=config.settings.budget.max_state_chars)
        self.turn = -1
        self.steps_in_turn = 0
        self.steps: list[dict] = []
        self.model_error: str | None = None
        self.parser_failures = 0  # replies on which a parser raised (a kit bug, logged; the reply became an error)
        self.env_seconds = 0.0
        if tool_format == "prompt":
            self.messages.append({"role": "system",
                                  "content": prompt_style_system_prompt(self._docs_at_turn(0))})
        self._start_next_turn()

    def _docs_at_turn(self, turn: int) -> list[dict]:
        if self.config.settings.tool_docs == "none":
            return []
        docs = self.task.tools_at_turn(turn)
        return toolcalls.compact_docs(docs) if self.config.settings.tool_docs == "compact" else list(docs)

    def _start_next_turn(self) -> None:
        self.turn += 1
        self.steps_in_turn = 0
        if self.turn >= len(self.task.turns):
            self.terminated = "completed"
            return
        docs = self._docs_at_turn(self.turn)
        if self.tool_format == "native":
            self.tools = toolcalls.tools_to_openai(docs) or None
        user_messages = list(self.task.turns[self.turn])
        if self.turn in self.task.missed_functions:
            new_names = set(self.task.missed_functions[self.turn])
            new_docs = [d for d in docs if d["name"] in new_names]
            user_messages = [{"role": "user", "content": added_functions_message(self.tool_format, new_docs)}]
        self.messages.extend(user_messages)

    def feed(self, generation: Generation) -> None:
        """Take the model's reply: run its calls, or end the turn; close the episode on a cap or a model error."""
        self.take_tokens(generation)
        if generation.error:
            self.messages.append({"role": "assistant", "content": ""})
            self.terminated = "model_error"
            self.model_error = generation.error
            return
        text = self.kept_reply(generation.text, generation.tool_calls)
        if self.terminated:  # the completion or reply cap: the reply is kept in the ids and messages but not executed
            self.messages.append({"role": "assistant", "content": text})
            return
        try:
            reply = toolcalls.parse_reply(self.tool_format, text, generation.tool_calls)
        except Exception as error:  # the parsers never raise; if one ever does, only this reply fails, not the batch
            log.exception("task %s: the reply parser raised; the reply counts as one rejected call", self.task.id)
            self.parser_failures += 1
            reply = toolcalls.ParsedReply(errors=[f"the reply could not be parsed ({type(error).__name__})"])
        self.messages.append(toolcalls.assistant_message(self.tool_format, text, reply))
        if reply.is_answer:
            self._end_turn()
            return
        if not self.admit_calls(len(reply.calls) + len(reply.errors)):
            return
        sources = [call.to_source() for call in reply.calls]
        if not self.admit_recorded_calls(sources):
            return
        budget = self.config.settings.budget
        start = time.perf_counter()
        left = budget.max_episode_observation_chars - self.observation_chars  # what the episode can keep
        observations = self.kept_observations(self.env.execute(reply.calls, parsed=True, output_budget=left))
        self.env_seconds += time.perf_counter() - start
        if self.env.state_over:
            self._end("state_cap")
        self.messages.extend(toolcalls.tool_messages(reply, observations))
        # As in BFCL's runner, `calls` are the decoded calls, a call to a function the environment lacks included
        # (its observation is the error); `rejected` are attempts that did not decode to a literal-only call.
        self.steps.append({"turn": self.turn, "step": self.steps_in_turn, "raw": text,
                           "calls": sources, "observations": observations,
                           "rejected": reply.errors})
        self.steps_in_turn += 1
        if self.terminated:  # an episode budget
            return
        if self.steps_in_turn >= self.config.settings.max_steps_per_turn:
            self.terminated = "turn_step_cap"
        elif len(self.steps) >= self.config.settings.max_steps_per_episode:
            self.terminated = "episode_step_cap"

    def _end_turn(self) -> None:
        start = time.perf_counter()
        self.env.end_turn()
        self.env_seconds += time.perf_counter() - start
        self._start_next_turn()

    def record(self, model_name: str) -> dict:
        """Score the episode (caps and model errors fail it) and return its trajectory record."""
        verdict = self.env.score()
        self.env.close()
        success = bool(verdict["success"]) and self.terminated == "completed"
        return {
            "schema": ROLLOUT_SCHEMA,
            "task_id": self.task.id,
            "task_source": f"bfcl:{self.task.data_version}:{self.task.category}",
            "data_version": self.task.data_version,
            "category": self.task.category,
            "sample_index": self.sample_index,
            "model": model_name,
            "tool_format": self.tool_format,
            "messages": self.messages,
            "steps": self.steps,
            "turn_valid": verdict["turn_valid"],
            "score": 1.0 if success else 0.0,
            "success": success,
            "error_type": verdict["error_type"] if self.terminated == "completed" else f"agent:{self.terminated}",
            "error_message": self.model_error or verdict["error_message"],
            "terminated": self.terminated,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "model_seconds": round(self.model_seconds, 4),
            "env_seconds": round(self.env_seconds, 4),
            "parser_failures": self.parser_failures,
            **self.token_fields(),
        }


def pool_task_to_bfcl(task: dict) -> BFCLTask:
    """A one-turn BFCLTask whose ground truth is the reference actions: the checker grades the agent's own calls."""
    return BFCLTask(id=task["task_id"], category="synthetic", data_version=task.get("data_version", "v3"),
                    turns=[[{"role": "user", "content": task["query"]}]], initial_config=task["initial_config"],
                    involved_classes=list(task["involved_classes"]), ground_truth=[list(task["reference_actions"])])
