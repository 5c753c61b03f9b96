"""The paper's backbones as the kit knows them without a hub (`core.paper_models`), and their stand-ins
(`engine.standins`, built by `make standins`): the sizes the plan's vLLM check reads are the transformers classes'
own, and a stand-in carries what the paper profiles' code paths touch: the architecture, the real Qwen vocabulary
with its added tokens at their real ids, the family's chat template and its stop tokens (issue 28)."""

import json

import pytest
import torch
import transformers

from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import Generation, HFChatModel
from coevolve_lib.core.paper_models import PAPER_MODELS, parameter_count
from coevolve_lib.core.paths import MODELS_DIR
from coevolve_lib.engine.standins import SETUP_STANDINS, build_standin
from coevolve_lib.rollout.agent import Conversation, RolloutPhase

BACKBONES = list(PAPER_MODELS.values())


@pytest.mark.parametrize("model", BACKBONES, ids=lambda m: m.hub_id)
def test_parameter_count_is_the_transformers_class_own(model):
    config = getattr(transformers, model.architecture).config_class(
        **{k: v for k, v in model.config.items() if k != "architectures"})
    with torch.device("meta"):
        network = getattr(transformers, model.architecture)(config)
    assert parameter_count(model.config) == sum(p.numel() for p in network.parameters())


@pytest.fixture(scope="module", params=[model if model.standin in SETUP_STANDINS else
                                         pytest.param(model, marks=pytest.mark.paper) for model in BACKBONES],
                ids=lambda m: m.standin)
def standin(request):
    """A built stand-in (`make standins` builds Qwen3-4B's; `make test-paper` builds the others here, ~6.5 min each)."""
    build_standin(request.param)
    return request.param, load_chat_model(request.param.standin)


def test_a_standin_is_its_backbone_at_tiny_dims(standin):
    model, chat = standin
    config = chat.model.config
    assert type(chat.model).__name__ == model.architecture
    for key in ("vocab_size", "tie_word_embeddings", "max_position_embeddings", "model_type"):
        assert getattr(config, key) == model.config[key], key
    assert config.rope_parameters["rope_theta"] == model.config["rope_theta"]
    assert config.hidden_size == 128 and config.num_hidden_layers == 2
    if "num_experts" in model.config:
        assert (config.num_experts, config.num_experts_per_tok, config.router_aux_loss_coef) == (8, 2, 0.001)
    manifest = json.loads((MODELS_DIR / model.standin / "standin.json").read_text())
    assert manifest["format_warm_start"]["steps"] > 0 and manifest["recipe"]["hub_id"] == model.hub_id


def test_the_vocabulary_is_qwens_with_the_added_tokens_at_their_ids(standin):
    model, chat = standin
    tokenizer = chat.tokenizer
    assert len(tokenizer) == model.last_added_token + 1
    ids = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<tool_call>": 151657,
           "</tool_call>": 151658}
    if model.last_added_token == 151668:
        ids.update({"<tool_response>": 151665, "</tool_response>": 151666, "<think>": 151667, "</think>": 151668})
    assert {token: tokenizer.convert_tokens_to_ids(token) for token in ids} == ids
    assert tokenizer("hello world")["input_ids"] == [14990, 1879]  # Qwen's ids for the two words
    # the tool and think tags are not special: a decoded reply keeps them, control tokens go
    text = "<think>\nplan</think>" if "<think>" in ids else ""
    text += '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
    decoded = tokenizer.decode(tokenizer(text + "<|im_end|>")["input_ids"], skip_special_tokens=True)
    assert decoded == text


def test_the_family_template_renders_native_tools(standin):
    model, chat = standin
    assert chat.native_tools
    tools = [{"type": "function", "function": {"name": "ls", "description": "List.", "parameters": {
        "type": "object", "properties": {}}}}]
    prompt = chat.render([{"role": "user", "content": "list"}], tools)
    assert "<tools>" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_a_reply_ending_in_endoftext_is_a_finished_turn(standin):
    """Qwen's generation configs stop at <|im_end|> and <|endoftext|> (vLLM stops at both): such a reply is not cut
    at the length limit, and the next turn gets no extra <|im_end|> in front of the tool results."""
    model, chat = standin
    assert chat.stop_ids == model.stop_ids == [151643, 151645]
    episode = Conversation(RolloutPhase(token_level=True))
    episode.messages = [{"role": "user", "content": "list"}]
    episode.next_prompt_ids(chat)
    reply = chat.tokenizer('<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>')["input_ids"] + [151643]
    episode.take_tokens(Generation(text="", tool_calls=None, prompt_tokens=0, completion_tokens=len(reply),
                                   seconds=0.0, finish_reason="stop", token_ids=reply))
    episode.messages += [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "ls", "arguments": {}}}]}, {"role": "tool", "content": "[]"}]
    episode.next_prompt_ids(chat)
    after = episode.completion_ids[len(reply):]
    assert 151645 not in after[:1] and chat.tokenizer.decode(after).startswith("\n<|im_start|>user")


def test_hf_chat_model_stops_at_every_eos_of_the_generation_config():
    """Not only the stand-ins: any local model whose generation config names several EOS ids."""
    chat = HFChatModel(MODELS_DIR / "tiny")
    assert chat.stop_ids == [chat.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    chat.model.generation_config.eos_token_id = [chat.stop_ids[0], 7]
    assert HFChatModel.from_loaded(chat.model, chat.tokenizer, "tiny").stop_ids == sorted([chat.stop_ids[0], 7])


def test_a_backbone_has_a_standin_per_environment_of_its_format_warm_start():
    """The AppWorld profile's rehearsal needs a stand-in that writes code, not `<tool_call>` blocks: each backbone has
    one per environment, each environment giving its warm start's schedule and data through the seam."""
    from coevolve_lib.core.model_specs import BUILT_MODELS
    from coevolve_lib.core.paper_models import STANDIN_ENVIRONMENTS
    from coevolve_lib.engine.standins import StandinDims, recipe

    model = PAPER_MODELS["Qwen/Qwen3-4B-Instruct-2507"]
    names = [model.standin_for(environment) for environment in STANDIN_ENVIRONMENTS]
    assert names == ["standin-qwen3-4b", "standin-qwen3-4b-appworld"] and set(names) <= set(BUILT_MODELS)
    with pytest.raises(ValueError, match="no stand-in is warm-started on 'kv'"):
        model.standin_for("kv")
    bfcl, appworld = (recipe(model, StandinDims(), environment) for environment in STANDIN_ENVIRONMENTS)
    dims = {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "num_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 128, "seed": 0}
    schedule = {"enabled": True, "max_steps": 300, "batch_size": 8, "learning_rate": 3e-3, "final_lr_ratio": 0.1,
                "warmup_steps": 20, "adam_beta2": 0.95, "max_grad_norm": 1.0, "seed": 0, "first_data_seed": 100}
    # the BFCL stand-in's recipe as every built one records it: a change here rebuilds every user's stand-in
    assert bfcl == {"recipe_version": 1, "hub_id": "Qwen/Qwen3-4B-Instruct-2507", "dims": dims,
                    "format_warm_start": {**schedule, "max_length": 2048, "data_seeds": 2, "data_runs": 6,
                                          "data_calls_per_run": 5, "data_min_calls": 1, "data_max_calls": 3},
                    "classes": ["GorillaFileSystem"], "tool_docs": "compact"}
    assert appworld["environment"] == "appworld" and appworld["dims"] == dims  # the same random init
    assert appworld["rollout"] == {"tool_docs": "none", "max_steps_per_episode": 2}
    assert appworld["data"]["data"] == "synthetic world" and appworld["data"]["builder_version"]
