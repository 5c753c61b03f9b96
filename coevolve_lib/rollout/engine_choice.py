"""Which rollout engine (`rollout.engines`) a rollout phase generates with: `auto` picks by the model and its device."""

from __future__ import annotations

from coevolve_lib.core.models import GenerationConfig
from coevolve_lib.rollout.engines import (
    ENGINES,
    ContinuousBatchingEngine,
    GenerateEngine,
    KVCacheEngine,
    MessagesEngine,
)
from coevolve_lib.rollout.vllm import VLLMEngine


def resolve_engine(name: str, model, token_level: bool) -> str:
    """The engine `auto` picks: `messages` for message-level rollouts, `generate` for a model without a local
    transformers model behind it, `continuous_batching` on CUDA, else `kv_cache`."""
    if not token_level:
        return "messages"
    if name != "auto":
        return name
    backend = getattr(model, "model", None)
    if backend is None or not hasattr(backend, "forward"):
        return "generate"
    return "continuous_batching" if backend.device.type == "cuda" else "kv_cache"


def make_engine(name: str, model, generation: GenerationConfig, token_level: bool, trainer=None):
    """The engine for one rollout phase (`rollout.engines`); `trainer`: the GRPO trainer (`vllm` only)."""
    name = resolve_engine(name, model, token_level)
    if name == "messages":
        return MessagesEngine(model, generation)
    if name == "generate":
        return GenerateEngine(model, generation)
    if name == "kv_cache":
        return KVCacheEngine(model, generation)
    if name == "continuous_batching":
        return ContinuousBatchingEngine(model, generation)
    if name == "vllm":
        if trainer is None:
            raise ValueError("the vllm engine generates through the GRPO trainer's vLLM; it runs in training only")
        return VLLMEngine(model, generation, trainer)
    raise ValueError(f"unknown rollout engine {name!r}; choose one of {', '.join(ENGINES)}")
