"""The chat-model interface the kit runs agents with, and its two backends.

- `HFChatModel`: a local transformers causal LM (the tiny Qwen3, SmolLM2, or any local folder / cached hub id),
  batched, left-padded generation.
- `OpenAIChatModel`: any OpenAI-compatible endpoint (vLLM, a hosted API, or `coevolve_lib.cli.openai_server`), with
  retries, backoff and a retry budget; a request that still fails gives a `Generation` with `error` set.

`load_chat_model(spec)` picks one from a short spec string ("tiny", "smollm2-135m", "openai:<model>", a path/hub id).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.config import ConfigError
from coevolve_lib.core.paper_models import PAPER_MODELS
from coevolve_lib.core.paths import MODELS_DIR, shown_path
from coevolve_lib.core.safe_calls import MAX_SOURCE_CHARS

log = logging.getLogger(__name__)

BUILT_MODELS = {"tiny": "tiny", "smollm2-135m": "smollm2-135m",
                **{model.standin: model.standin for model in PAPER_MODELS.values()}}
"""Spec -> folder under MODELS_DIR of the models `make setup` builds (`envs.bfcl.tiny_model`: tiny and SmolLM2;
`envs.bfcl.standins`: the paper backbones' stand-ins)."""


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
        with torch.inference_mode(), torch.random.fork_rng(devices=devices, enabled=config.seed is not None), \
                generation_attention(self.model):
            if config.seed is not None:
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


def _retryable(exc: Exception) -> bool:
    """Timeouts, connection errors, 5xx, 408/409/429 and malformed responses are worth another try; other 4xx not."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code in (408, 409, 429)
    return True


def _error_text(exc: Exception) -> str:
    """What an item's error says: the exception, and what caused it when its own text is generic (the openai client
    says "Connection error." for every transport failure)."""
    text, cause = str(exc), exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text = f"{text} ({type(cause).__name__}: {cause})"
    return f"{exc.__class__.__name__}: {text[:500]}"


SAME_SERVER_ERROR_TRIES = 3
"""Tries after which the same HTTP 5xx answer to the same request ends its retries (a server that cannot make this
reply, not an overloaded one; two in a row still happen to transient faults)."""


def _server_error(exc: Exception) -> bool:
    """An HTTP 5xx answer (a server that answered, unlike a timeout or a dropped connection)."""
    import openai

    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


CALL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""An endpoint's tool-call id the conversation keeps: short and plain (OpenAI's are `call_` and 24 characters)."""


def kept_call_ids(ids: list) -> list[str | None]:
    """An endpoint's call ids as the conversation keeps them: each that is a short plain string (`CALL_ID`) and new
    in the reply, else None, for which the request makes one (`_openai_messages`). A giant id made a
    544 MB record; one id repeated for every call was sent back on every tool message."""
    kept, seen = [], set()
    for call_id in ids:
        sane = isinstance(call_id, str) and CALL_ID.fullmatch(call_id) is not None and call_id not in seen
        kept.append(call_id if sane else None)
        if sane:
            seen.add(call_id)
    return kept


def _openai_messages(messages: list[dict]) -> list[dict]:
    """The conversation as strict endpoints take it: every assistant tool call with an id unique in the conversation
    (the endpoint's own, else, or when an earlier call had it, one made here) and string arguments, every `tool`
    message answering a call of the assistant turn before it (by its id, else the next unanswered call in order). A tool
    message that answers no call (the error for a call the kit parsed from text and refused: it never was a call) goes
    as a user message, never under an invented id."""
    out, pending, used, counter = [], [], set(), 0
    for message in messages:
        message = dict(message)
        tool_calls = message.pop("tool_calls", None)  # dropped when empty: strict endpoints reject `[]`
        if tool_calls:
            calls, pending = [], []  # the tool messages that follow answer these calls: (id kept, id sent)
            for call in tool_calls:
                function = dict(call["function"])
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments", {}))
                call_id = call.get("id")
                sent = call_id if call_id and call_id not in used else None  # unique in the conversation
                while sent is None or sent in used:
                    sent, counter = f"call_{counter}", counter + 1
                used.add(sent)
                pending.append((call_id, sent))
                calls.append({"id": sent, "type": "function", "function": function})
            message["tool_calls"] = calls
        elif message.get("role") == "tool":
            answered = next((entry for entry in pending if entry[0] == message.get("tool_call_id")), None) \
                or (pending[0] if pending else None)
            if answered is not None:
                pending.remove(answered)
                message["tool_call_id"] = answered[1]
            else:
                message = {"role": "user", "content": message.get("content", "")}
        else:
            pending = []
        out.append(message)
    return out


def _parse_arguments(arguments: str):
    """JSON-decoded arguments when they are a JSON object; otherwise the raw string (the caller validates and refuses
    it). Never raises: text too long to be a call is not decoded, and a huge integer or deep nesting is not JSON."""
    if not isinstance(arguments, str) or len(arguments) > MAX_SOURCE_CHARS:
        return arguments
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):  # JSONDecodeError, an int over Python's digit limit, too-deep nesting
        return arguments
    return value if isinstance(value, dict) else arguments


class OpenAIChatModel(ChatModel):
    """A model behind an OpenAI-compatible /v1/chat/completions endpoint."""

    native_tools = True

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0,
                 max_retries: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0, max_workers: int = 8,
                 deadline_s: float | None = None, batch_deadline_s: float | None = None, min_interval_s: float = 0.0):
        """timeout: seconds per request. max_retries: extra attempts per item after the first fails.
        backoff_s / max_backoff_s: retry k waits min(max_backoff_s, backoff_s * 2**k) times a random jitter in [0.5, 1].
        max_workers: requests of one batch in flight at once. deadline_s: most seconds per item, its retries and
        waits included (each request's timeout shrinks to what is left); batch_deadline_s: most seconds per
        `generate` call, all its items together (an item not answered by then is an error); None: only the tries
        bound them. A batch still waiting after `WAIT_NOTICE_S` says so on stderr, with both deadlines.
        min_interval_s: fewest seconds between two requests' starts, over all threads (a rate limit's share)."""
        import openai

        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:  # the openai client would call api.openai.com: never without being told
            raise ConfigError(f"openai:{model} has no endpoint: set OPENAI_BASE_URL to its OpenAI-compatible server "
                              "(https://api.openai.com/v1 for OpenAI's own), or give base_url")
        self.name = model
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_workers = max_workers
        self.timeout, self.deadline_s, self.batch_deadline_s = timeout, deadline_s, batch_deadline_s
        # The client's own retries are off: this class retries, so every failure is counted and budgeted here.
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=timeout, max_retries=0, http_client=_bounded_http_client(),
        )
        self.num_retries = 0
        """Retries made so far over all calls (for tests and run logs)."""
        self.min_interval_s = min_interval_s
        self._next_start = 0.0  # the earliest `time.perf_counter` a request may start (`min_interval_s`)
        self.not_after = float("inf")
        """A `time.perf_counter` time no call outlasts (a round's deadline: `core.llm_calls.calls_cut_at`)."""
        self._lock = threading.Lock()

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        items = [(m, tools[j] if tools else None) for j, m in enumerate(conversations)]
        if not items:
            return []
        batch_deadline = min(time.perf_counter() + self.batch_deadline_s if self.batch_deadline_s else float("inf"),
                             self.not_after)
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(items))) as pool:
            futures = [pool.submit(self._generate_one, m, t, config, batch_deadline) for m, t in items]
            _, pending = wait(futures, timeout=WAIT_NOTICE_S)
            if pending:  # a slow or silent endpoint: say what the command waits for, and for how long at most
                log.warning("waiting for %d of %d replies from openai:%s at %s (each at most %s, the batch at most %s)",
                            len(pending), len(items), self.model, str(self.client.base_url).rstrip("/"),
                            _seconds(self.deadline_s), _seconds(self.batch_deadline_s))
            return [future.result() for future in futures]

    def _request(self, messages, tools, config, deadline: float):
        kwargs = dict(model=self.model, messages=_openai_messages(messages), max_tokens=config.max_new_tokens,
                      temperature=config.temperature, top_p=config.top_p,
                      timeout=min(self.timeout, deadline - time.perf_counter()))
        if config.seed is not None:
            kwargs["seed"] = config.seed
        if tools:
            kwargs["tools"] = tools
        with request_bounds(deadline):
            response = self.client.chat.completions.create(**kwargs)
        if not getattr(response, "choices", None):
            raise ValueError(f"malformed response without choices: {str(response)[:200]!r}")
        return response

    def _generate_one(self, messages, tools, config, batch_deadline: float = float("inf")) -> Generation:
        start = time.perf_counter()
        deadline = min(start + self.deadline_s if self.deadline_s else float("inf"), batch_deadline)
        limits = f"deadline {_seconds(self.deadline_s)}, batch deadline {_seconds(self.batch_deadline_s)}" + (
            ", the round's deadline" if self.not_after < float("inf") else "")
        if start >= batch_deadline:  # the batch's other items took its time, or the round's is up
            return _failed(start, f"not sent: the batch's time was up ({limits})")
        error, repeats = None, 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                pause = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
                if time.perf_counter() + pause >= deadline:
                    error = f"{error}; no time left for another try ({limits})"
                    break
                with self._lock:
                    self.num_retries += 1
                time.sleep(pause)
            if not self._paced(deadline):
                error = f"{error}; no time left to start a request at its pace ({limits})"
                break
            try:
                response = self._request(messages, tools, config, deadline)
                return _generation(response, seconds=time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - any failure of one item becomes its error, never the batch's
                previous, error = error, _error_text(exc)
                if not _retryable(exc):
                    break
                repeats = repeats + 1 if error == previous and _server_error(exc) else 0
                if repeats == SAME_SERVER_ERROR_TRIES - 1:  # the same 5xx for the same request: it will not pass
                    error = f"{error} (the same server error {SAME_SERVER_ERROR_TRIES} times: not retried again)"
                    break
        return _failed(start, f"failed after {attempt + 1} attempt(s): {error}")


    def _paced(self, deadline: float) -> bool:
        """Wait for this request's turn under `min_interval_s` (each thread takes the next free slot); False, without
        waiting, when the slot falls after `deadline`."""
        if not self.min_interval_s:
            return True
        with self._lock:
            slot = max(time.perf_counter(), self._next_start)
            if slot >= deadline:
                return False
            self._next_start = slot + self.min_interval_s
        time.sleep(max(0.0, slot - time.perf_counter()))
        return True


MAX_RESPONSE_BYTES = 16 * 2**20
"""Most bytes an endpoint's answer to one request may take, headers and body (a reply's text is bounded far below:
`max_new_tokens`); more is a read error of that request, never held whole."""
_bounds = threading.local()
"""The deadline (`time.perf_counter`) and the bytes read so far of the request this thread is making."""


@contextlib.contextmanager
def request_bounds(deadline: float):
    """Inside the block, every read and write of this thread's requests (through `_bounded_http_client`) ends by
    `deadline`, and their answers stop at `MAX_RESPONSE_BYTES`: a total bound, where the client's timeout starts
    again at every byte a trickling server sends."""
    _bounds.deadline, _bounds.read = deadline, 0
    try:
        yield
    finally:
        _bounds.deadline = None


def _left(timeout: float | None) -> float | None:
    """`timeout`, cut to what is left of this thread's request deadline (a timeout error when nothing is)."""
    import httpcore2

    deadline = getattr(_bounds, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.perf_counter()
    if left <= 0:
        raise httpcore2.ReadTimeout("the request's deadline passed (the server answers too slowly)")
    return left if timeout is None else min(timeout, left)


def _bounded_http_client():
    """The openai client's HTTP client, with httpcore's own network streams wrapped so that `request_bounds` holds
    for every read and write (the connection pool's backend is the one place httpx lets them be reached)."""
    import httpcore2
    import httpx2
    import openai

    class BoundedStream(httpcore2.NetworkStream):
        def __init__(self, stream):
            self.stream = stream

        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            data = self.stream.read(max_bytes, _left(timeout))
            if getattr(_bounds, "deadline", None) is not None:
                _bounds.read += len(data)
                if _bounds.read > MAX_RESPONSE_BYTES:
                    raise httpcore2.ReadError(f"the answer is over {MAX_RESPONSE_BYTES // 2**20} MiB: not read further")
            return data

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            self.stream.write(buffer, _left(timeout))

        def close(self) -> None:
            self.stream.close()

        def start_tls(self, ssl_context, server_hostname=None, timeout=None):
            return BoundedStream(self.stream.start_tls(ssl_context, server_hostname, _left(timeout)))

        def get_extra_info(self, info: str):
            return self.stream.get_extra_info(info)

    class BoundedBackend(httpcore2.NetworkBackend):
        def __init__(self):
            self.backend = httpcore2.SyncBackend()

        def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
            return BoundedStream(self.backend.connect_tcp(host, port, _left(timeout), local_address, socket_options))

        def connect_unix_socket(self, path, timeout=None, socket_options=None):
            return BoundedStream(self.backend.connect_unix_socket(path, _left(timeout), socket_options))

        def sleep(self, seconds: float) -> None:
            self.backend.sleep(seconds)

    transport = httpx2.HTTPTransport()
    transport._pool._network_backend = BoundedBackend()
    return openai.DefaultHttpx2Client(transport=transport)


def _failed(start: float, error: str) -> Generation:
    return Generation(text="", tool_calls=None, prompt_tokens=0, completion_tokens=0,
                      seconds=time.perf_counter() - start, finish_reason="error", error=error)


WAIT_NOTICE_S = 10.0
"""Seconds a batch of endpoint calls waits before the model says on stderr what it is waiting for."""


def _seconds(limit: float | None) -> str:
    return "unbounded" if limit is None else f"{limit:g} s"


class MalformedResponse(ValueError):
    """An endpoint's HTTP 200 whose fields are not what the OpenAI API returns (retried, then the item's error)."""


def _generation(response, seconds: float) -> Generation:
    """The Generation of one chat-completions response; a MalformedResponse naming the field that is missing or of
    the wrong type (a `usage` that is no object, token counts that are no integers, content that is no string)."""
    try:
        choice = response.choices[0]
        message = choice.message
        text = message.content or ""
        if not isinstance(text, str):
            raise TypeError(f"message.content is a {type(text).__name__}")
        structured = [c for c in (message.tool_calls or []) if getattr(c, "function", None)]
        calls = [{"id": call_id, "name": c.function.name, "arguments": _parse_arguments(c.function.arguments)}
                 for c, call_id in zip(structured, kept_call_ids([getattr(c, "id", None) for c in structured]))]
        usage = response.usage
        tokens = [getattr(usage, name) if usage is not None else 0 for name in ("prompt_tokens", "completion_tokens")]
        if any(type(count) is not int or count < 0 for count in tokens):
            raise TypeError(f"usage token counts {str(tokens)[:80]} are not non-negative integers")
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        raise MalformedResponse(f"malformed response: {type(exc).__name__}: {str(exc)[:200]}") from None
    return Generation(text=text, tool_calls=calls or None, prompt_tokens=tokens[0], completion_tokens=tokens[1],
                      seconds=seconds, finish_reason="length" if choice.finish_reason == "length" else "stop")


def load_chat_model(spec: str, **options) -> ChatModel:
    """"tiny" / "smollm2-135m" (built by `make setup`), "openai:<model>" (OpenAIChatModel; options: base_url,
    api_key, timeout, max_retries, ...), or a local folder / hub id for HFChatModel (options: dtype, device, ...)."""
    if spec.startswith("openai:"):
        return OpenAIChatModel(spec.removeprefix("openai:"), **options)
    if spec in BUILT_MODELS:
        return HFChatModel(local_model(spec), name=spec, **options)
    return HFChatModel(spec, **options)


def local_model(spec: str) -> str:
    """The folder of a model `make setup` builds (`BUILT_MODELS`; a FileNotFoundError naming the command that builds
    it when it is missing), else `spec` as given (a folder or a hub id)."""
    if spec not in BUILT_MODELS:
        return spec
    path = MODELS_DIR / BUILT_MODELS[spec]
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model {spec!r} is not built (expected {path}); run `make setup` (or `python -m "
                                "coevolve_lib setup`) to build it")
    return str(path)
