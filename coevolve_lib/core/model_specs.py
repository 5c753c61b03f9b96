"""Model specs: the short strings a profile or a command line names a chat model by ("tiny", "smollm2-135m", a paper
backbone's stand-in, "openai:<model>", a folder or hub id), and `load_chat_model`, the model each names."""

from __future__ import annotations

from coevolve_lib.core.models import ChatModel, HFChatModel
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.paper_models import PAPER_MODELS, STANDIN_ENVIRONMENTS
from coevolve_lib.core.paths import MODELS_DIR

BUILT_MODELS = {"tiny": "tiny", "smollm2-135m": "smollm2-135m",
                **{model.standin_for(environment): model.standin_for(environment) for model in PAPER_MODELS.values()
                   for environment in STANDIN_ENVIRONMENTS}}
"""Spec -> folder under MODELS_DIR of the models `make setup` builds (`envs.bfcl.tiny_model`: tiny and SmolLM2;
`engine.standins`: the paper backbones' stand-ins, one per environment of their format warm start)."""


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
