"""The `vllm` rollout engine: GRPO training's replies from TRL's vLLM generation (`trainer.vllm_generation`).

A thin call into TRL: every collect sends the pending requests' prompt ids to `VLLMGeneration.generate` (server
mode: `trl vllm-serve` on GPUs of its own; colocate mode: a vLLM engine inside each training process) and turns the
completion ids into `Generation`s. TRL pushes the policy's weights to vLLM before each `rollout_func` call, so
every rollout phase samples from the current policy.

Sampling settings are the trainer's, not the rollout config's: TRL's `VLLMGeneration` samples with GRPOConfig's
`temperature` and `top_p` and caps every reply at its `generation_kwargs["max_tokens"]`, which `trl_args` sets from
the profile's rollout section (`temperature`, `top_p`, `max_new_tokens`). A request's own, smaller cap (when the
episode's token budget is nearly spent) is applied by cutting the completion there, and a completion is cut after
its first stop id (vLLM stops at the model's EOS; the kit also stops at `<|im_end|>`). The rollout config's seed is
unused: TRL seeds vLLM.

Lockstep. In server mode, and in colocate mode with tensor parallelism, `generate` is a collective: TRL gathers the
prompts of all processes (of the TP group), generates once, and hands process i the replies
[i * len(prompts), (i + 1) * len(prompts)). So every process must make the same number of calls, each with the same
number of prompts, although multi-turn episodes end at different steps on different processes. Before each call
the processes exchange their pending counts (`accelerator.gather`); each pads its prompts to the largest count with
copies of a prompt it sent before (their replies are dropped; a copy's reply is about as long as a real one, where
an arbitrary prompt could decode to the cap and hold up the whole call); and a process whose episodes have all
ended keeps taking part from `close()` until no process has requests left. One process, or colocate mode without
tensor parallelism: no exchange, no padding, no extra calls.

Run with vLLM's CPU build (`make test-vllm`: a paper profile's rehearsal with colocated vLLM, and `trl vllm-serve`
answering these rollouts; on the CPU, `rollout.vllm_cpu` keeps TRL's weight sync working); the lockstep is tested with
a scripted client (tests/test_vllm_engine.py: several processes need server mode or TP > 1, which train on GPUs only).
"""

from __future__ import annotations

import time

from coevolve_lib.core.models import Generation
from coevolve_lib.rollout.engines import Request, SynchronousEngine


class VLLMEngine(SynchronousEngine):
    """Token-level rollouts through the GRPO trainer's vLLM (see the module docstring)."""

    def __init__(self, model, generation, trainer):
        super().__init__(model, generation)
        self.vllm, self.accelerator = trainer.vllm_generation, trainer.accelerator
        self.stop_ids = set(model.stop_ids)
        self.collective = self.accelerator.num_processes > 1 and (
            self.vllm.mode == "server" or self.vllm.tensor_parallel_size > 1)
        """Whether `generate` is a collective, so that calls go in lockstep across processes."""
        self.filler: list[int] | None = None
        """A prompt this process sent, to pad its calls with."""
        self.in_collective = False
        """True while a collective runs: one that raised leaves it True, and `close` then does not drain (the
        processes are no longer in step)."""

    def collect(self):
        """Every pending request's reply; in lockstep (a call while any process has requests) when collective."""
        if not self.collective:
            return super().collect()
        requests, self.pending = self.pending, []
        width = self._widest(len(requests))
        if not width:
            return []
        return list(zip((r.key for r in requests), self._generate(requests, width)))

    def _answer(self, requests, generation):
        """Not collective: one call with this process's own prompts (TRL seeds vLLM; `generation` is unused)."""
        return self._generate(requests, len(requests))

    def close(self):
        """The rollout phase ended here: take part in the other processes' calls until none has requests."""
        if not self.collective or self.in_collective:
            return
        while width := self._widest(0):
            self._generate([], width)

    def _widest(self, count: int) -> int:
        """The most pending requests of any process (this process's `count` sent to all of them)."""
        import torch

        self.in_collective = True
        counts = self.accelerator.gather(torch.tensor([count], device=self.accelerator.device))
        self.in_collective = False
        return int(counts.max())

    def _generate(self, requests: list[Request], width: int) -> list[Generation]:
        """One `generate` call with the requests' prompts, padded to `width` prompts; the requests' replies."""
        prompts = [r.prompt_ids for r in requests]
        if prompts:
            self.filler = prompts[0]
        if self.filler is None:
            raise RuntimeError("vllm engine: this process has no prompt to pad its calls with (a rollout phase with "
                               "no episode on this process)")
        prompts += [self.filler] * (width - len(prompts))
        start = time.perf_counter()
        self.in_collective = True
        _, completions, _, _ = self.vllm.generate(prompts=prompts, images=None, num_generations=1)
        self.in_collective = False
        seconds = time.perf_counter() - start
        return [self._reply(request, list(ids), seconds) for request, ids in zip(requests, completions)]

    def _reply(self, request: Request, ids: list[int], seconds: float) -> Generation:
        """The completion cut at the request's cap and after its first stop id."""
        ids = ids[:request.max_new_tokens]
        stop = next((i for i, token in enumerate(ids) if token in self.stop_ids), None)
        if stop is not None:
            ids = ids[:stop + 1]
        return Generation(
            text=self.model.tokenizer.decode(ids, skip_special_tokens=True), tool_calls=None,
            prompt_tokens=len(request.prompt_ids), completion_tokens=len(ids), seconds=seconds,
            finish_reason="length" if stop is None else "stop", token_ids=ids)
