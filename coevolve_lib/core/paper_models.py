"""The paper's three backbones as the hub describes them: the fields of each checkpoint's `config.json` and
`generation_config.json` that decide its memory (parameters, KV cache), its context and its stop tokens, plus its
chat template's family. Copied from the hub model cards (`Qwen/Qwen3-4B-Instruct-2507`, `Qwen/Qwen2.5-7B-Instruct`,
`Qwen/Qwen3-30B-A3B-Instruct-2507`), since no hub is reachable here.

Two users: the plan (`training.plan`: vLLM's context length and whether its weights and KV cache fit the GPU share a
recipe gives it) and the stand-ins (`engine.standins`: the same architecture at tiny dims, with the real
vocabulary, template and stop tokens). `parameter_count` is read off the config, and a test checks it against the
transformers class built on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 10**9
"""GPU memory is sold in decimal gigabytes (an H20: 96 GB)."""
QWEN_SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Qwen2/3's pre-tokenizer split pattern (digits one by one, words with a leading space or punctuation, ...): the
stand-ins' tokenizer (`engine.standins`) and the tiny model's (`envs.bfcl.tiny_model`)."""
STANDIN_ENVIRONMENTS = ("bfcl", "appworld")
"""The environments a backbone has a stand-in for, each format-warm-started on its environment (`engine.standins`,
`Environment.format_warm_start`)."""


@dataclass(frozen=True)
class PaperModel:
    """One paper backbone."""

    hub_id: str
    """The checkpoint a paper profile trains (`model:`)."""
    standin: str
    """The model spec of its stand-in (`.cache/models/<standin>`, built by `make standins`), format-warm-started on
    BFCL; `standin_for` names its AppWorld twin."""
    chat_template: str
    """TRL's bundled chat template of the family (`trl/chat_templates/<name>.jinja`), the hub tokenizer's own."""
    config: dict
    """The hub `config.json` (the fields the kit reads)."""
    generation_config: dict
    """The hub `generation_config.json` (stop tokens)."""
    last_added_token: int
    """The id of the family's last added token: 151664 (`<|file_sep|>`) for Qwen2.5, 151668 (`</think>`) for Qwen3."""

    @property
    def architecture(self) -> str:
        return self.config["architectures"][0]

    def standin_for(self, environment: str) -> str:
        """The model spec of the stand-in whose format warm start is `environment`'s (`STANDIN_ENVIRONMENTS`): BFCL's
        writes `<tool_call>` blocks, AppWorld's ```python blocks."""
        if environment not in STANDIN_ENVIRONMENTS:
            raise ValueError(f"no stand-in is warm-started on {environment!r}; known: {list(STANDIN_ENVIRONMENTS)}")
        return self.standin if environment == "bfcl" else f"{self.standin}-{environment}"

    @property
    def stop_ids(self) -> list[int]:
        """What ends a reply: the generation config's eos ids (vLLM stops at each of them too)."""
        eos = self.generation_config["eos_token_id"]
        return sorted(eos if isinstance(eos, list) else [eos])


_QWEN3_GENERATION = {"bos_token_id": 151643, "pad_token_id": 151643, "eos_token_id": [151645, 151643],
                     "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20}

PAPER_MODELS = {model.hub_id: model for model in (
    PaperModel(
        hub_id="Qwen/Qwen3-4B-Instruct-2507", standin="standin-qwen3-4b", chat_template="qwen3_instruct_2507",
        config={"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
                "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144, "rope_theta": 5000000,
                "rms_norm_eps": 1e-06, "attention_bias": False, "tie_word_embeddings": True,
                "bos_token_id": 151643, "eos_token_id": 151645},
        generation_config=_QWEN3_GENERATION, last_added_token=151668),
    PaperModel(
        hub_id="Qwen/Qwen2.5-7B-Instruct", standin="standin-qwen2.5-7b", chat_template="qwen2_5",
        config={"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 152064,
                "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
                "num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "use_sliding_window": False,
                "sliding_window": 131072, "max_window_layers": 28, "bos_token_id": 151643, "eos_token_id": 151645},
        generation_config={"bos_token_id": 151643, "pad_token_id": 151643, "eos_token_id": [151645, 151643],
                           "do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                           "repetition_penalty": 1.05},
        last_added_token=151664),
    PaperModel(
        hub_id="Qwen/Qwen3-30B-A3B-Instruct-2507", standin="standin-qwen3-30b-a3b",
        chat_template="qwen3_instruct_2507",
        config={"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": 151936,
                "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
                "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
                "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "output_router_logits": False,
                "max_position_embeddings": 262144, "rope_theta": 10000000, "rms_norm_eps": 1e-06,
                "attention_bias": False, "tie_word_embeddings": False, "bos_token_id": 151643,
                "eos_token_id": 151645},
        generation_config=_QWEN3_GENERATION, last_added_token=151668),
)}


def paper_model(hub_id: str) -> PaperModel | None:
    """The paper backbone `hub_id` names (None: not one of the three)."""
    return PAPER_MODELS.get(hub_id)


def head_dim(config: dict) -> int:
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def parameter_count(config: dict) -> int:
    """Parameters of a Qwen2 / Qwen3 / Qwen3-MoE decoder with this config (embeddings, attention with Qwen2's q/k/v
    biases or Qwen3's q/k norms, dense or routed MLPs, norms, an untied head)."""
    hidden, layers, dim = config["hidden_size"], config["num_hidden_layers"], head_dim(config)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    qwen2 = config["model_type"] == "qwen2"
    attention = hidden * heads * dim + 2 * hidden * kv_heads * dim + heads * dim * hidden
    attention += (heads * dim + 2 * kv_heads * dim) if qwen2 or config.get("attention_bias") else 0
    attention += 0 if qwen2 else 2 * dim  # Qwen3's RMS norms on queries and keys
    if "num_experts" in config:
        mlp = hidden * config["num_experts"] + config["num_experts"] * 3 * hidden * config["moe_intermediate_size"]
    else:
        mlp = 3 * hidden * config["intermediate_size"]
    embeddings = config["vocab_size"] * hidden * (1 if config["tie_word_embeddings"] else 2)
    return embeddings + layers * (attention + mlp + 2 * hidden) + hidden


def kv_bytes_per_token(config: dict, tensor_parallel: int = 1, dtype_bytes: int = 2) -> int:
    """KV cache bytes one token takes on one GPU: keys and values of every layer, the KV heads split over the tensor
    parallel group (a head is replicated when there are fewer heads than GPUs)."""
    kv_heads = max(1, config["num_key_value_heads"] // tensor_parallel)
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim(config) * dtype_bytes
