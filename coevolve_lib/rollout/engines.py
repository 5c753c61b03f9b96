"""How rollouts get their replies: generation engines behind one small interface.

The rollout loop (`rollout.agent.run_rollouts`) submits a `Request` for every live episode and collects replies as they
come; between two requests of one episode it runs the reply's tool calls. An engine decides how the model
computes the replies:

- `generate`: one `model.generate_from_ids` call over all pending requests, each conversation fed whole, the batch
  waiting for its longest reply. The reference engine, and the one any object with `generate_from_ids` gets.
- `kv_cache` (local models on CPU): keeps each episode's KV cache between its turns, so a request feeds only its
  new tokens (tool results, the next user turn). K samples of one task prefill their shared first prompt once. A
  reply that ends leaves the decoding batch, so no row decodes past its own reply. The same token ids as `generate`
  under greedy decoding (tests/test_rollout_engines.py); sampling follows its own seeded generator.
- `continuous_batching` (local models on CUDA): transformers' continuous-batching manager (paged attention, block
  sharing). A request joins the running batch as soon as its tool results are back; one manager per rollout
  phase, stopped at its end, so no cache outlives a policy update.
- `vllm`: TRL's vLLM generation (`rollout.vllm.VLLMEngine`, paper profiles).
- `messages`: message-level rollouts (`ChatModel.generate` on the rendered conversation; OpenAI endpoints).

Synchronous engines (`generate`, `kv_cache`, `messages`) answer every pending request in one `collect()` call,
seeded `seed + call index`; `continuous_batching` answers them as they finish.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Hashable, get_args

from coevolve_lib.core.config import RolloutEngine
from coevolve_lib.core.models import Generation, GenerationConfig, generation_attention

ENGINES = get_args(RolloutEngine)


@dataclass
class Request:
    """One model call an episode waits for."""

    key: Hashable
    """The episode's key (its position in the rollout)."""
    max_new_tokens: int
    """Most tokens of this reply (the generation cap, or less when the episode's token budget is nearly spent)."""
    prompt_ids: list[int] | None = None
    """Token-level rollouts: the whole conversation so far, ready for the assistant's reply."""
    messages: list[dict] | None = None
    """Message-level rollouts: the conversation."""
    tools: list[dict] | None = None
    """Message-level rollouts: the tools in the chat template (native tool format), else None."""


class SynchronousEngine:
    """An engine that answers all pending requests at once; subclasses implement `_answer`."""

    def __init__(self, model, generation: GenerationConfig):
        self.model, self.generation = model, generation
        self.pending: list[Request] = []
        self.calls = 0

    def submit(self, request: Request) -> None:
        self.pending.append(request)

    def collect(self) -> list[tuple[Hashable, Generation]]:
        requests, self.pending = self.pending, []
        if not requests:
            return []
        generation = self.generation
        if generation.seed is not None:  # a different, reproducible seed for every call
            generation = replace(generation, seed=generation.seed + self.calls)
        self.calls += 1
        return list(zip((r.key for r in requests), self._answer(requests, generation)))

    def _answer(self, requests: list[Request], generation: GenerationConfig) -> list[Generation]:
        raise NotImplementedError

    def release(self, key: Hashable) -> None:
        """The episode ended: forget anything kept for it."""

    def close(self) -> None:
        """The rollout phase ended."""


class MessagesEngine(SynchronousEngine):
    """Message-level: `ChatModel.generate` over the pending conversations."""

    def _answer(self, requests, generation):
        tools = [r.tools for r in requests] if any(r.tools is not None for r in requests) else None
        return self.model.generate([r.messages for r in requests], tools, generation)


class GenerateEngine(SynchronousEngine):
    """Token-level, the reference: `generate_from_ids` over the pending prompts, fed whole, capped at the largest
    request's `max_new_tokens` (longer replies are cut by the episode)."""

    def _answer(self, requests, generation):
        generation = replace(generation, max_new_tokens=max(r.max_new_tokens for r in requests))
        return self.model.generate_from_ids([r.prompt_ids for r in requests], generation)


@dataclass
class _SavedCache:
    """What the KV cache holds for one episode between its requests."""

    ids: list[int]
    """The token ids whose keys and values are cached (the last generated token is never fed, so not among them)."""
    layers: list[tuple]
    """Per layer (keys, values), each [heads, len(ids), head_dim], padding removed."""


class KVCacheEngine(SynchronousEngine):
    """Token-level with each episode's KV cache kept between its requests (local transformers models).

    A call: (1) prefill every request's new tokens (the part of its prompt past its cached ids), in groups of
    similar length so that little padding is computed, identical first prompts once; (2) decode all rows in one
    batch, one token per step, moving rows whose reply ended out of the batch once they are `compact_share` of it.
    Rows are left-padded; positions come from each row's own token count, so padding never shifts them."""

    def __init__(self, model, generation: GenerationConfig, compact_share: float = 0.25, max_pad_share: float = 0.25):
        super().__init__(model, generation)
        self.compact_share, self.max_pad_share = compact_share, max_pad_share
        self.saved: dict[Hashable, _SavedCache] = {}
        self.stop_ids = set(model.stop_ids)

    def release(self, key):
        self.saved.pop(key, None)

    def close(self):
        self.saved.clear()

    def _answer(self, requests, generation):
        import torch

        start = time.perf_counter()
        device = self.model.model.device
        generator = None
        if generation.seed is not None and generation.temperature > 0:
            generator = torch.Generator(device=device).manual_seed(generation.seed)
        # Eval mode for the call: a training model with gradient checkpointing would not return its cache.
        training = self.model.model.training
        self.model.model.eval()
        try:
            with torch.inference_mode(), generation_attention(self.model.model):
                first_tokens, caches = self._prefill(requests, generation, generator)
                replies = self._decode(requests, first_tokens, caches, generation, generator)
        finally:
            self.model.model.train(training)
        seconds = time.perf_counter() - start
        out = []
        for request, completion in zip(requests, replies):
            stopped = completion[-1] in self.stop_ids
            out.append(Generation(
                text=self.model.tokenizer.decode(completion, skip_special_tokens=True), tool_calls=None,
                prompt_tokens=len(request.prompt_ids), completion_tokens=len(completion), seconds=seconds,
                finish_reason="stop" if stopped else "length", token_ids=completion))
        return out

    # -- prefill -------------------------------------------------------------------------------------------------

    def _cached(self, request: Request) -> _SavedCache | None:
        saved = self.saved.pop(request.key, None)
        if saved is None or len(saved.ids) >= len(request.prompt_ids) or \
                request.prompt_ids[:len(saved.ids)] != saved.ids:
            return None  # a prompt that does not extend the cached ids is prefilled from scratch
        return saved

    def _prefill(self, requests, generation, generator):
        """(first sampled token per request, compact cache per request) after feeding each request's new tokens."""
        import torch

        cached = [self._cached(r) for r in requests]
        # Identical prompts without a cache (a task's K samples on their first turn) are prefilled once.
        items, item_of = [], []
        first_seen: dict[tuple, int] = {}
        for request, saved in zip(requests, cached):
            key = None if saved is not None else tuple(request.prompt_ids)
            if key is not None and key in first_seen:
                item_of.append(first_seen[key])
                continue
            if key is not None:
                first_seen[key] = len(items)
            item_of.append(len(items))
            done = len(saved.ids) if saved else 0
            items.append((saved, request.prompt_ids[done:]))
        logits, layers = [None] * len(items), [None] * len(items)
        for group in self._length_groups([len(new) for _, new in items]):
            group_logits, group_layers = self._forward_new_tokens([items[i] for i in group])
            for i, row_logits, row_layers in zip(group, group_logits, group_layers):
                logits[i], layers[i] = row_logits, row_layers
        first = sample_tokens(torch.stack([logits[i] for i in item_of]), generation, generator).tolist()
        caches = []
        for request, i in zip(requests, item_of):
            caches.append(_SavedCache(list(request.prompt_ids), layers[i]))
        return first, caches

    def _length_groups(self, lengths: list[int]) -> list[list[int]]:
        """Indices grouped by new-token count, ascending, each group's padding at most `max_pad_share` of it."""
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        groups, group, total = [], [], 0
        for i in order:
            width = lengths[i]  # the longest so far, since the order is ascending
            if group and 1 - (total + width) / (width * (len(group) + 1)) > self.max_pad_share:
                groups.append(group)
                group, total = [], 0
            group.append(i)
            total += width
        return groups + [group] if group else groups

    def _forward_new_tokens(self, items):
        """Feed each item's new tokens after its cached ones; per item the last position's logits and the compact
        cache of all its tokens."""
        import torch

        from coevolve_lib.rollout.kv_caches import stack_caches, unstack_caches

        device = self.model.model.device
        pad = self.model.tokenizer.pad_token_id
        width = max(len(new) for _, new in items)
        cache, cache_mask = stack_caches([saved.layers if saved else None for saved, _ in items], device, room=width)
        ids = torch.tensor([[pad] * (width - len(new)) + new for _, new in items], device=device)
        new_mask = torch.tensor([[0] * (width - len(new)) + [1] * len(new) for _, new in items], device=device)
        mask = torch.cat([cache_mask, new_mask], dim=1)
        positions = (mask.cumsum(1) - 1).clamp(min=0)[:, -width:]
        output = self.model.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                                  use_cache=True, logits_to_keep=1)
        return output.logits[:, -1].float(), unstack_caches(output.past_key_values, mask)

    # -- decode --------------------------------------------------------------------------------------------------

    def _decode(self, requests, first_tokens, caches, generation, generator) -> list[list[int]]:
        import torch

        from coevolve_lib.rollout.kv_caches import stack_caches, unstack_caches

        device = self.model.model.device
        pad = self.model.tokenizer.pad_token_id
        replies = [[token] for token in first_tokens]
        ended = lambda row: replies[row][-1] in self.stop_ids or len(replies[row]) >= requests[row].max_new_tokens  # noqa: E731
        rows = [row for row in range(len(requests)) if not ended(row)]
        for row in range(len(requests)):
            if ended(row):
                self.saved[requests[row].key] = caches[row]
        while rows:
            room = max(requests[row].max_new_tokens - len(replies[row]) for row in rows)  # the most steps left
            cache, mask = stack_caches([caches[row].layers for row in rows], device, room=room)
            lengths = mask.sum(1)
            live = torch.ones(len(rows), dtype=torch.bool, device=device)
            while True:
                tokens = torch.tensor([[replies[row][-1] if alive else pad] for row, alive in
                                       zip(rows, live.tolist())], device=device)
                mask = torch.cat([mask, live[:, None].long()], dim=1)
                output = self.model.model(input_ids=tokens, attention_mask=mask, position_ids=lengths[:, None],
                                          past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = output.past_key_values
                lengths = lengths + live.long()
                sampled = sample_tokens(output.logits[:, -1].float(), generation, generator).tolist()
                for index, row in enumerate(rows):
                    if live[index]:
                        replies[row].append(sampled[index])
                        if ended(row):
                            live[index] = False
                if (~live).sum() >= max(1, self.compact_share * len(rows)):
                    break
            # Rows whose reply ended leave the batch with their cache; the others go on in a fresh, narrower batch.
            layers = unstack_caches(cache, mask)
            for index, row in enumerate(rows):
                fed = requests[row].prompt_ids + replies[row][:-1]
                caches[row] = _SavedCache(fed, layers[index])
                if not live[index]:
                    self.saved[requests[row].key] = caches[row]
            rows = [row for index, row in enumerate(rows) if live[index]]
        return replies


def sample_tokens(logits, generation: GenerationConfig, generator):
    """Next token per row: argmax when greedy, else temperature and nucleus (top-p) sampling as transformers does it
    (top-k off).

    A sample inverts each row's cumulative distribution at one uniform number: the distribution `torch.multinomial`
    samples, at a fraction of its cost on the CPU, where it draws an exponential number per vocabulary entry
    (docs/log.md). Seeded samples are not `torch.multinomial`'s."""
    import torch

    if generation.temperature <= 0:
        return logits.argmax(-1)
    logits = logits / generation.temperature
    if generation.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1)
        drop = sorted_logits.softmax(-1).cumsum(-1) <= 1 - generation.top_p
        drop[:, -1] = False
        logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    cumulative = logits.softmax(-1).cumsum(-1)
    uniform = torch.rand(len(cumulative), 1, generator=generator, dtype=cumulative.dtype, device=cumulative.device)
    # The first token whose cumulative mass passes u * total (the total is 1 up to rounding): never one of mass 0.
    chosen = torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True).squeeze(1)
    return chosen.clamp(max=cumulative.shape[-1] - 1)


class ContinuousBatchingEngine:
    """Token-level through transformers' continuous-batching manager (CUDA): requests join the running batch as
    they are submitted and come back as they finish. Seeded once per rollout phase (the manager's own seed); the
    order in which the manager schedules requests may vary, so samples are reproducible per seed only as far as
    that order is."""

    def __init__(self, model, generation: GenerationConfig):
        from transformers import ContinuousBatchingConfig

        self.model, self.generation = model, generation
        hf_config = model.hf_generation_config(generation)
        # On CUDA the manager sizes its paged cache from free GPU memory; on CPU (tests) that would be most of the
        # host's RAM, so a small cache is given.
        sizes = {} if model.model.device.type == "cuda" else {"block_size": 32, "num_blocks": 512,
                                                               "max_batch_tokens": 2048}
        self.manager = model.model.init_continuous_batching(
            generation_config=hf_config,
            continuous_batching_config=ContinuousBatchingConfig(seed=generation.seed, **sizes))
        self.manager.start()
        self.pending: dict[str, tuple[Hashable, Request, float]] = {}

    def submit(self, request: Request) -> None:
        request_id = self.manager.add_request(request.prompt_ids, request_id=f"{request.key}:{time.perf_counter_ns()}",
                                              max_new_tokens=request.max_new_tokens, eos_token_id=self.model.stop_ids)
        self.pending[request_id] = (request.key, request, time.perf_counter())

    def collect(self) -> list[tuple[Hashable, Generation]]:
        """At least one finished reply (waiting for it), with any others already finished."""
        out, timeout = [], None
        while self.pending:
            result = self.manager.get_result(timeout=timeout)
            if result is None:
                if timeout is None:
                    raise RuntimeError("the continuous-batching manager stopped with requests pending (see its log)")
                break
            if result.request_id not in self.pending:
                continue
            key, request, started = self.pending.pop(result.request_id)
            tokens = list(result.generated_tokens)
            out.append((key, Generation(
                text=self.model.tokenizer.decode(tokens, skip_special_tokens=True), tool_calls=None,
                prompt_tokens=len(request.prompt_ids), completion_tokens=len(tokens),
                seconds=time.perf_counter() - started,
                finish_reason="stop" if tokens and tokens[-1] in self.model.stop_ids else "length",
                error=result.error, token_ids=tokens)))
            timeout = 0.0
        return out

    def release(self, key: Hashable) -> None:
        """The manager keeps nothing per episode beyond its requests' blocks (freed as they finish)."""

    def close(self) -> None:
        self.manager.stop(block=True)
