"""What a data-engine stage spent on LLM calls (calls, tokens) and what it had to skip, by reason: the one accounting
type of exploration, abstraction and validation, summed per stage in a round's report. A round's wall time is not in
its records: `timings.json` beside them holds it (`engine.feedback.write_round`), so that a round run again, or
replayed from its recorded LLM calls (`core.llm_calls`), writes the same records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig


@dataclass
class Cost:
    """LLM usage of one stage, and the steps or outputs it had to skip, by reason."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    skipped: Counter = field(default_factory=Counter)

    @classmethod
    def from_record(cls, record: dict) -> "Cost":
        """The cost stored in a record (missing fields count as zero; an older record's `seconds` is left out)."""
        return cls(record.get("calls", 0), record.get("prompt_tokens", 0), record.get("completion_tokens", 0),
                   Counter(record.get("skipped", {})))

    def generate(self, model: ChatModel, conversations: list[list[dict]], config: GenerationConfig) -> list[Generation]:
        """model.generate, with its calls and tokens added here."""
        generations = model.generate(conversations, None, config)
        self.calls += len(generations)
        self.prompt_tokens += sum(g.prompt_tokens for g in generations)
        self.completion_tokens += sum(g.completion_tokens for g in generations)
        return generations

    def ask(self, model: ChatModel, prompt: str, config: GenerationConfig) -> Generation:
        """One single-message conversation through `generate`."""
        return self.generate(model, [[{"role": "user", "content": prompt}]], config)[0]

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def merge(self, other: "Cost") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.skipped.update(other.skipped)

    def as_dict(self, skipped: bool = True) -> dict:
        """The record form: {calls, prompt_tokens, completion_tokens[, skipped: {reason: count}]}."""
        out = {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        return {**out, "skipped": dict(self.skipped)} if skipped else out
