"""Multi-turn agent rollouts on BFCL, following BFCL's inference protocol, batched across episodes.

Per user turn: the model replies; if the reply holds tool calls they run in the episode's own environment and
their results go back as `tool` messages, and the model is asked again; a reply without calls ends the turn.
Caps (the paper's Table 9: 30 interaction steps per episode; BFCL's runner: 20 steps per turn) end the episode
as a failure. Every model call of a step is batched with the other live episodes' calls.

A trajectory record (schema `rollout/v1`) holds the task, the full message list, every step's parsed calls,
observations and rejected calls, per-turn verdicts and the final score, token counts and seconds.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from tqdm.auto import tqdm

from coevolve_lib import toolcalls
from coevolve_lib.envs.bfcl import BFCLEnv, BFCLTask, tools_to_openai
from coevolve_lib.models import ChatModel, Generation, GenerationConfig

ROLLOUT_SCHEMA = "rollout/v1"


@dataclass
class RolloutConfig:
    """How episodes are run."""

    tool_format: str = "auto"
    """`native` (chat-template tools, `<tool_call>` JSON), `prompt` (BFCL's `[f(a=1)]`), or `auto`: native when
    the model's template supports tools."""
    tool_docs: str = "full"
    """`full` BFCL function docs, `compact` (names, parameter types, one-sentence descriptions) for small models, or
    `none` (no docs in the prompt: a model trained on the tools, such as the warm-started tiny profile)."""
    max_steps_per_turn: int = 20
    """Model steps with tool calls allowed in one user turn (BFCL's MAXIMUM_STEP_LIMIT); more fails the episode."""
    max_steps_per_episode: int = 30
    """Model steps with tool calls allowed in one episode (the paper's max interaction steps); more fails it."""
    max_batch_size: int = 16
    """Live episodes whose model calls are batched together."""
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    """Sampling settings of every model call (temperature 0 = greedy, as in the paper's evaluation)."""

    def resolved_tool_format(self, model: ChatModel) -> str:
        if self.tool_format == "auto":
            return "native" if model.native_tools else "prompt"
        if self.tool_format not in toolcalls.TOOL_FORMATS:
            raise ValueError(f"tool_format must be auto or one of {toolcalls.TOOL_FORMATS}, not {self.tool_format!r}")
        return self.tool_format


class Episode:
    """One rollout of one task: the conversation, the environment, and the record being built."""

    def __init__(self, task: BFCLTask, sample_index: int, tool_format: str, config: RolloutConfig):
        self.task, self.sample_index, self.tool_format, self.config = task, sample_index, tool_format, config
        self.env = BFCLEnv(task)
        self.messages: list[dict] = []
        self.turn = -1
        self.steps_in_turn = 0
        self.steps: list[dict] = []
        self.terminated: str | None = None
        self.model_error: str | None = None
        self.prompt_tokens = self.completion_tokens = 0
        self.model_seconds = self.env_seconds = 0.0
        self.tools: list[dict] | None = None
        if tool_format == "prompt":
            self.messages.append({"role": "system",
                                  "content": toolcalls.prompt_style_system_prompt(self._docs_at_turn(0))})
        self._start_next_turn()

    @property
    def done(self) -> bool:
        return self.terminated is not None

    def _docs_at_turn(self, turn: int) -> list[dict]:
        if self.config.tool_docs == "none":
            return []
        docs = self.task.tools_at_turn(turn)
        return toolcalls.compact_docs(docs) if self.config.tool_docs == "compact" else list(docs)

    def _start_next_turn(self) -> None:
        self.turn += 1
        self.steps_in_turn = 0
        if self.turn >= len(self.task.turns):
            self.terminated = "completed"
            return
        docs = self._docs_at_turn(self.turn)
        if self.tool_format == "native":
            self.tools = tools_to_openai(docs) or None
        user_messages = list(self.task.turns[self.turn])
        if self.turn in self.task.missed_functions:
            new_names = set(self.task.missed_functions[self.turn])
            new_docs = [d for d in docs if d["name"] in new_names]
            user_messages = [{"role": "user", "content": toolcalls.added_functions_message(self.tool_format, new_docs)}]
        self.messages.extend(user_messages)

    def feed(self, generation: Generation) -> None:
        """Take the model's reply: run its calls, or end the turn; close the episode on a cap or a model error."""
        self.prompt_tokens += generation.prompt_tokens
        self.completion_tokens += generation.completion_tokens
        self.model_seconds += generation.seconds
        if generation.error:
            self.messages.append({"role": "assistant", "content": ""})
            self.terminated = "model_error"
            self.model_error = generation.error
            return
        reply = toolcalls.parse_reply(self.tool_format, generation.text, generation.tool_calls)
        self.messages.append(toolcalls.assistant_message(self.tool_format, generation.text, reply))
        if reply.is_answer:
            self._end_turn()
            return
        start = time.perf_counter()
        observations = self.env.execute(reply.calls)
        self.env_seconds += time.perf_counter() - start
        self.messages.extend(toolcalls.tool_messages(reply, observations))
        # As in BFCL's runner, `calls` are the decoded calls, a call to a function the environment lacks included
        # (its observation is the error); `rejected` are attempts that did not decode to a literal-only call.
        self.steps.append({"turn": self.turn, "step": self.steps_in_turn, "raw": generation.text,
                           "calls": [c.to_source() for c in reply.calls], "observations": observations,
                           "rejected": reply.errors})
        self.steps_in_turn += 1
        if self.steps_in_turn >= self.config.max_steps_per_turn:
            self.terminated = "turn_step_cap"
        elif len(self.steps) >= self.config.max_steps_per_episode:
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
        }


def run_rollouts(
    model: ChatModel,
    tasks: Iterable[BFCLTask],
    config: RolloutConfig,
    samples_per_task: int = 1,
    on_record: Callable[[dict], None] | None = None,
    progress: bool = True,
) -> list[dict]:
    """Roll out every task `samples_per_task` times; returns the records in completion order.

    `on_record` sees each record as soon as its episode ends (e.g. to append it to a JSONL file), so an
    interrupted run keeps every finished episode.
    """
    tool_format = config.resolved_tool_format(model)
    queue = deque((task, index) for task in tasks for index in range(samples_per_task))
    live: list[Episode] = []
    records: list[dict] = []
    call_index = 0
    with tqdm(total=len(queue), desc=f"rollouts {model.name}", unit="episode", disable=not progress) as bar:
        while queue or live:
            while queue and len(live) < config.max_batch_size:
                live.append(Episode(*queue.popleft(), tool_format=tool_format, config=config))
            generation = config.generation
            if generation.seed is not None:  # a different, reproducible seed for every batched call
                generation = GenerationConfig(**{**asdict(generation), "seed": generation.seed + call_index})
            replies = model.generate([e.messages for e in live],
                                     [e.tools for e in live] if tool_format == "native" else None, generation)
            call_index += 1
            for episode, reply in zip(live, replies):
                episode.feed(reply)
            for episode in [e for e in live if e.done]:
                record = episode.record(model.name)
                records.append(record)
                if on_record is not None:
                    on_record(record)
                bar.update(1)
            live = [e for e in live if not e.done]
    return records
