"""The chat-model interface the kit runs agents with, and its local backend.

- `HFChatModel`: a local transformers causal LM (the tiny Qwen3, SmolLM2, or any local folder / cached hub id),
  batched, left-padded generation.

The other backend, any OpenAI-compatible endpoint, is `core.openai_model.OpenAIChatModel`; `load_chat_model(spec)`
(`core.model_specs`) picks one of the two from a short spec string.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.paths import shown_path


@dataclass
class GenerationConfig:
    """How to sample one completion per conversation."""

    max_new_tokens: int = 512
    """Most tokens to generate per completion (the completion ends with finish_reason "length" when reached)."""
    temperature: float = 0.0
    """Sampling temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling mass (1.0 = off); ignored when greedy."""
    seed: int | None = None
    """Seed for sampling, so a batch is reproducible; None leaves the RNG as it is."""


@dataclass
class Generation:
    """One completion and what it cost."""

    text: str
    """Raw assistant text (HF: decoded without special tokens; tool-call markup like <tool_call>...</tool_call>
    kept)."""
    tool_calls: list[dict] | None
    """Structured calls when the backend returns them (OpenAI endpoint): [{"name": str, "arguments": dict | str}]."""
    prompt_tokens: int
    """Tokens in the rendered prompt."""
    completion_tokens: int
    """Tokens generated, including the stop token when there is one."""
    seconds: float
    """Wall time of the call that produced this item (for a batch: the whole batch's time)."""
    finish_reason: str
    """"stop" (end of turn), "length" (hit max_new_tokens) or "error" (see `error`)."""
    error: str | None = None
    """Why the backend failed for this item after retries; None when it succeeded."""
    token_ids: list[int] | None = None
    """The generated token ids, stop token included (local backends only; RL trains on exactly these)."""


class ChatModel(ABC):
    """A chat model that completes a batch of conversations."""

    name: str
    native_tools: bool
    """True: the chat template renders `tools` and the model emits Qwen3-style <tool_call>{json}</tool_call>.
    False: the caller describes tools and the call syntax in the system prompt (BFCL prompt style)."""

    @abstractmethod
    def generate(self, conversations: list[list[dict]], tools: list[list[dict]] | None = None,
                 config: GenerationConfig = GenerationConfig()) -> list[Generation]:
        """One Generation per conversation. Messages are OpenAI chat format; `tools` holds, per conversation,
        a list of OpenAI function-tool dicts (or None)."""


_GLOBAL_RNG = threading.Lock()
"""Held by every `HFChatModel` generate: transformers samples from torch's process-wide generator, so a seeded call is
reproducible only while no other thread (an in-process server answering a request, say) draws from it meanwhile."""

GROUPED_SDPA = "sdpa_grouped_kv"
"""The attention implementation `generation_attention` switches a model's SDPA attention to on the CPU."""


def _grouped_sdpa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                            is_causal=None, **kwargs):
    """transformers' SDPA attention (`integrations.sdpa_attention`), with grouped-query heads read in place
    (`enable_gqa`) under a padding mask too. transformers does so only without a mask and otherwise copies every
    key/value head once per query head (`repeat_kv`): the whole KV cache at every decode step, 19% of a greedy tiny
    evaluation on one CPU thread. torch's CPU kernel gives the same bits either way (the same episodes, token for
    token: tests/test_rollout_engines.py)."""
    import torch

    if kwargs.get("position_bias") is not None:  # models with a learned bias: transformers' own path
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=query.shape[2] > 1 and attention_mask is None and causal,
        enable_gqa=getattr(module, "num_key_value_groups", 1) > 1)
    return output.transpose(1, 2).contiguous(), None


@contextlib.contextmanager
def generation_attention(model):
    """Context for generation with `model` (a transformers model): the attention kernels that suit its device.

    - CUDA: SDPA without the cuDNN backend. cuDNN attention (picked first by recent torch on Hopper) builds an
      execution plan for every new shape; in generation every decode step has a new key length and every rollout step
      a new prompt width, so plan building dominated: measured on an H200 (tiny policy, 64 multi-turn episodes,
      benchmarks/bench_rollout_tokens.py) 247 -> 1840 generated tokens/s without it. Flash / memory-efficient / math
      kernels need no per-shape plans.
    - CPU: a model on transformers' SDPA attention reads grouped-query heads in place (`_grouped_sdpa_attention`):
      a greedy evaluation of 600 tiny held-out tasks on one thread in 0.78 of the time (19.2 vs 24.6 s), the same
      outcomes."""
    if model.device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            yield
        return
    config = model.config
    if config._attn_implementation != "sdpa":  # eager, flex, ...: what the user chose
        yield
        return
    _register_grouped_sdpa()
    config._attn_implementation = GROUPED_SDPA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


def _register_grouped_sdpa() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    if GROUPED_SDPA not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(GROUPED_SDPA, _grouped_sdpa_attention)
        AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)  # the same masks as SDPA's


def _template_supports_tools(tokenizer) -> bool:
    """Whether the chat template renders tool docs, tool calls and tool results (TRL's check)."""
    if not tokenizer.chat_template:
        return False
    from trl.chat_template_utils import supports_tool_calling

    return supports_tool_calling(tokenizer)


def hub_offline() -> bool:
    """Whether models load from local files only (HF_HUB_OFFLINE, on unless set to 0). Read here, on every load:
    huggingface_hub reads it only once, when it is first imported."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False", "")


def missing_model_message(spec: str, local_only: bool, exc: Exception) -> str:
    """One line on why `spec` did not load (`exc`, transformers' OSError) and what to do."""
    # Hub ids are "name" or "owner/name"; anything else was meant as a folder.
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1:
        hint = ("there is no model folder there (config.json, weights, tokenizer); the kit's own models are built "
                "by `make setup` or `python -m coevolve_lib.envs.bfcl.tiny_model`")
    elif local_only:
        hint = ("it is not in the local hub cache and hub access is off (HF_HUB_OFFLINE=1); download it first with "
                f"`HF_HUB_OFFLINE=0 hf download {spec}`, or pass a local path")
    else:
        hint = "it is neither a local folder nor a hub model"
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return f"cannot load model {spec!r}: {hint} ({exc.__class__.__name__}: {detail})"


def set_torch_threads(threads: int | None = None) -> int:
    """Set torch's CPU threads: `threads`, else $COEVOLVE_TORCH_THREADS, else 1 (more threads are often slower on a
    shared machine), at most $COEVOLVE_MAX_TORCH_THREADS when set (`make test` sets 1: it runs two processes side by
    side on two cores). A given number is also written to $COEVOLVE_TORCH_THREADS, so that models loaded later in the
    process (evaluation inside a training run) keep it. Returns the number set."""
    import torch

    if threads:
        os.environ["COEVOLVE_TORCH_THREADS"] = str(threads)
    threads = int(os.environ.get("COEVOLVE_TORCH_THREADS", "1"))
    threads = min(threads, int(os.environ.get("COEVOLVE_MAX_TORCH_THREADS", threads)))
    torch.set_num_threads(threads)
    return threads


class HFChatModel(ChatModel):
    """A local transformers causal LM with a chat template; generates one left-padded batch at a time."""

    def __init__(self, path_or_id: str | Path, dtype=None, device: str = "auto", num_threads: int | None = None,
                 max_batch_size: int | None = None, name: str | None = None):
        """dtype: a torch dtype or its name; default float32 on CPU and bfloat16 on CUDA.
        num_threads: torch CPU threads; default $COEVOLVE_TORCH_THREADS or 1 (more threads are often slower on a
        shared machine). max_batch_size: split larger batches into chunks of this many conversations."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        set_torch_threads(num_threads)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if dtype is None:
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        local_only = hub_offline()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path_or_id, local_files_only=local_only)
            self.model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=dtype, local_files_only=local_only)
        except OSError as e:
            raise FileNotFoundError(missing_model_message(str(path_or_id), local_only, e)) from e
        self.model.to(device).eval()
        self._attach(self.model, self.tokenizer, name or shown_path(path_or_id), max_batch_size)

    @classmethod
    def from_loaded(cls, model, tokenizer, name: str, max_batch_size: int | None = None) -> "HFChatModel":
        """A chat model over an already loaded model (e.g. the policy a trainer is updating; no copy is made)."""
        self = cls.__new__(cls)
        self._attach(model, tokenizer, name, max_batch_size)
        return self

    def _attach(self, model, tokenizer, name: str, max_batch_size: int | None) -> None:
        self.model, self.tokenizer, self.name, self.max_batch_size = model, tokenizer, name, max_batch_size
        self.device = str(model.device)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.native_tools = _template_supports_tools(self.tokenizer)
        # Stop at the tokenizer's EOS, the ChatML end-of-turn token (whichever the template uses) and every EOS of the
        # model's generation config: Qwen's also name <|endoftext|>, where vLLM stops too, so a reply that ends there
        # is a finished turn, not one cut at the length limit.
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        stops = {self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>"),
                 *(eos if isinstance(eos, (list, tuple)) else [eos])}
        stops.discard(self.tokenizer.unk_token_id)
        self.stop_ids = sorted(i for i in stops if i is not None)
        self._continuation_template: str | None = None

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt text for one conversation (tools rendered only when the template supports them)."""
        return self.tokenizer.apply_chat_template(messages, tools=tools if self.native_tools else None,
                                                  add_generation_prompt=True, tokenize=False)

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        step = self.max_batch_size or max(len(conversations), 1)
        out = []
        for i in range(0, len(conversations), step):
            out += self._generate_batch(conversations[i:i + step], tools[i:i + step] if tools else None, config)
        return out

    def _generate_batch(self, conversations, tools, config):
        prompts = [self.render(m, tools[j] if tools else None) for j, m in enumerate(conversations)]
        # The templates already put in every special token (e.g. SmolLM2's would add nothing, Qwen has no BOS).
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        return self.generate_from_ids(ids, config)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """Token ids of a conversation's prompt, ready for the assistant's next message."""
        return self.tokenizer(self.render(messages, tools), add_special_tokens=False)["input_ids"]

    def continuation_ids(self, messages: list[dict], rendered: int, tools: list[dict] | None = None) -> list[int]:
        """Token ids that follow the first `rendered` messages (ending with the assistant's own tokens) up to the
        next assistant prompt: tool results and new user turns, as the chat template frames them.

        Token-level rollouts append these to the ids the model really generated instead of re-rendering the whole
        conversation, so RL trains on exactly the sampled tokens (as TRL's own tool loop does). Needs a
        prefix-preserving template: TRL's training variant is used when it has one (e.g. Qwen3 drops empty
        `<think>` blocks from earlier turns otherwise)."""
        if self._continuation_template is None:
            from trl.chat_template_utils import get_training_chat_template

            try:
                self._continuation_template = get_training_chat_template(self.tokenizer) or self.tokenizer.chat_template
            except ValueError:  # TRL cannot patch this template; it may still be prefix-preserving (checked below)
                self._continuation_template = self.tokenizer.chat_template
        tools = tools if self.native_tools else None
        render = lambda msgs, gen: self.tokenizer.apply_chat_template(  # noqa: E731
            msgs, tools=tools, add_generation_prompt=gen, tokenize=False, chat_template=self._continuation_template)
        prefix, full = render(messages[:rendered], False), render(messages, True)
        # The prefix ends "...<|im_end|>\n": cut after the end-of-turn token, which the model generated itself.
        ends = [prefix.rfind(text) + len(text) for text in map(self.tokenizer.decode, ([i] for i in self.stop_ids))
                if text in prefix]
        cut = max(ends, default=-1)
        if cut < 0 or not full.startswith(prefix[:cut]):
            raise ValueError(f"the chat template of {self.name} is not prefix-preserving, so token-level rollouts "
                             "cannot extend a conversation; use message-level rollouts or a training template")
        return self.tokenizer(full[cut:], add_special_tokens=False)["input_ids"]

    def generate_from_ids(self, prompts: list[list[int]], config: GenerationConfig = GenerationConfig()
                          ) -> list[Generation]:
        """One Generation (with `token_ids`) per prompt given as token ids, in batches of `max_batch_size`."""
        step = self.max_batch_size or max(len(prompts), 1)
        return [g for i in range(0, len(prompts), step) for g in self._generate_ids_batch(prompts[i:i + step], config)]

    def hf_generation_config(self, config: GenerationConfig):
        """transformers' GenerationConfig for `config`: greedy at temperature 0, else temperature and top-p with
        top_k=0 (which turns off transformers' default top-k of 50, as in OpenAI-compatible servers); stops at the
        model's stop ids."""
        from transformers import GenerationConfig as HFGenerationConfig

        greedy = config.temperature <= 0
        return HFGenerationConfig(
            max_new_tokens=config.max_new_tokens, do_sample=not greedy,
            temperature=None if greedy else config.temperature, top_p=None if greedy else config.top_p,
            top_k=None if greedy else 0, eos_token_id=self.stop_ids, pad_token_id=self.tokenizer.pad_token_id)

    def _generate_ids_batch(self, prompts: list[list[int]], config: GenerationConfig) -> list[Generation]:
        import torch

        if not prompts:
            return []
        start = time.perf_counter()
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.model.device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                                      device=self.model.device)
        hf_config = self.hf_generation_config(config)
        # A seeded call runs in a forked RNG so that it does not change the caller's global stream; an unseeded
        # call draws from (and advances) the global stream, so repeated calls give different samples.
        devices = [self.model.device] if self.model.device.type == "cuda" else []
        seeded = config.seed is not None
        with _GLOBAL_RNG, torch.inference_mode(), torch.random.fork_rng(devices=devices, enabled=seeded), \
                generation_attention(self.model):
            if seeded:
                torch.manual_seed(config.seed)
            sequences = self.model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                            generation_config=hf_config)
        new_tokens = sequences[:, width:].tolist()
        seconds = time.perf_counter() - start
        results = []
        for row, prompt in zip(new_tokens, prompts):
            # Cut at the first stop token (kept in the count); after it come only pad tokens.
            stop_at = next((k for k, t in enumerate(row) if t in self.stop_ids), None)
            completion = row if stop_at is None else row[:stop_at + 1]
            results.append(Generation(
                text=self.tokenizer.decode(completion, skip_special_tokens=True),
                tool_calls=None, prompt_tokens=len(prompt), completion_tokens=len(completion), seconds=seconds,
                finish_reason="length" if stop_at is None else "stop", token_ids=completion,
            ))
        return results

