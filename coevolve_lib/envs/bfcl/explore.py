"""Signal-guided re-exploration (paper section 3.2), the stage's entry point: a weakness-signal trajectory becomes a
structured exploration context (Fig. 11, `contexts`), then R independent runs of up to S steps explore the real
environment from it (Figs. 9-10), each step recorded as an (action, observation, run id) triplet (`engine.explore`).

Explorers: `LLMExplorer` (the paper's, `explore_llm`) or `SchemaExplorer` (the offline stand-in, `explore_schema`).
Unguided exploration (D_0, and the paper's "random exploration" baseline) has no context.

Records: context/v1 and triplet/v1 (docs/records.md).
"""

from __future__ import annotations

from coevolve_lib.core.config import ExploreConfig
from coevolve_lib.core.models import ChatModel
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import Explorer, explore_target
from coevolve_lib.envs.bfcl.explore_llm import LLMExplorer
from coevolve_lib.envs.bfcl.explore_schema import SchemaExplorer


def make_explorer(config: ExploreConfig, model: ChatModel | None = None) -> Explorer:
    if config.explorer == "llm":
        if model is None:
            raise ValueError("explorer='llm' needs a model")
        return LLMExplorer(model)
    return SchemaExplorer()


def explore(target: ExplorationTarget, config: ExploreConfig,
            model: ChatModel | None = None) -> tuple[dict | None, list[dict], dict]:
    """(context/v1 or None when unguided, triplet/v1 records of all runs, cost of the whole stage).

    cost = {calls, prompt_tokens, completion_tokens, skipped: {reason: count}}, over the context
    builder's and the explorer's LLM calls."""
    return explore_target(target, config, model, make_explorer(config, model))
