"""The chat-model backends on the built offline models (the tiny Qwen3 is built here if missing, in ~5 s)."""

import threading

import pytest

from coevolve_lib.core import model_specs
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import GenerationConfig, HFChatModel
from coevolve_lib.core.openai_model import OpenAIChatModel
from coevolve_lib.core.paths import MODELS_DIR
from coevolve_lib.envs.bfcl.tiny_model import build_tiny

CD_TOOL = {"type": "function", "function": {
    "name": "cd", "description": "Change directory.",
    "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}}
LS_TOOL = {"type": "function", "function": {
    "name": "ls", "description": "List the files.", "parameters": {"type": "object", "properties": {}}}}
CONVERSATIONS = [
    [{"role": "user", "content": "Go to the folder x."}],
    [{"role": "system", "content": "You are a file-system agent."},
     {"role": "user", "content": "List every file in the current directory, then move report.pdf into temp."}],
    [{"role": "user", "content": "cd"},
     {"role": "assistant", "content": "", "tool_calls": [
         {"type": "function", "function": {"name": "cd", "arguments": {"folder": "x"}}}]},
     {"role": "tool", "content": '{"current_working_directory": "x"}'},
     {"role": "user", "content": "Now list it."}],
]
SHORT = GenerationConfig(max_new_tokens=8)


@pytest.fixture(scope="session")
def tiny():
    build_tiny()  # no-op when `make setup` already built it
    return load_chat_model("tiny")


def test_tiny_loads_offline_with_native_tools(tiny):
    assert isinstance(tiny, HFChatModel) and tiny.name == "tiny"
    assert tiny.native_tools
    assert tiny.tokenizer.padding_side == "left"
    assert tiny.tokenizer.convert_ids_to_tokens(tiny.stop_ids) == ["<|im_end|>"]


def test_generate_batch_of_different_lengths(tiny):
    tools = [[CD_TOOL], None, [CD_TOOL, LS_TOOL]]
    out = tiny.generate(CONVERSATIONS, tools, SHORT)
    assert len(out) == len(CONVERSATIONS)
    for generation, messages, conv_tools in zip(out, CONVERSATIONS, tools):
        # The count is of the real prompt, without the left padding of the batch.
        expected = len(tiny.tokenizer(tiny.render(messages, conv_tools), add_special_tokens=False)["input_ids"])
        assert generation.prompt_tokens == expected
        assert 1 <= generation.completion_tokens <= SHORT.max_new_tokens
        assert generation.finish_reason in ("stop", "length") and generation.error is None
        assert generation.tool_calls is None and isinstance(generation.text, str) and generation.seconds > 0
    assert len({g.prompt_tokens for g in out}) == 3


def test_greedy_is_deterministic_and_batching_is_optional(tiny):
    first = [g.text for g in tiny.generate(CONVERSATIONS, config=SHORT)]
    assert [g.text for g in tiny.generate(CONVERSATIONS, config=SHORT)] == first
    split = HFChatModel(MODELS_DIR / "tiny", max_batch_size=2)
    assert len(split.generate(CONVERSATIONS, config=SHORT)) == len(CONVERSATIONS)


def test_sampling_is_reproducible_with_a_seed(tiny):
    def sample(seed):
        config = GenerationConfig(max_new_tokens=16, temperature=1.0, top_p=0.95, seed=seed)
        return [g.text for g in tiny.generate(CONVERSATIONS, config=config)]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)  # a random-init model samples near-uniformly over 4k tokens


def test_a_seeded_sample_is_the_same_while_another_model_samples_in_a_thread(tiny):
    """torch's generator is one per process: an unseeded generate in another thread (as an in-process test server
    still answering a request its client gave up on, seen once in CI) must not change a seeded call's samples."""
    config = GenerationConfig(max_new_tokens=16, temperature=1.0, top_p=0.95, seed=1)
    alone = [g.text for g in tiny.generate(CONVERSATIONS, config=config)]
    other, stop = HFChatModel(MODELS_DIR / "tiny"), threading.Event()

    def sample_unseeded():
        while not stop.is_set():
            other.generate(CONVERSATIONS[:1], config=GenerationConfig(max_new_tokens=4, temperature=1.0))

    thread = threading.Thread(target=sample_unseeded, daemon=True)
    thread.start()
    try:
        beside = [[g.text for g in tiny.generate(CONVERSATIONS, config=config)] for _ in range(3)]
    finally:
        stop.set()
        thread.join()
    assert beside == [alone] * 3


def test_rendered_prompt_shows_tools(tiny):
    prompt = tiny.render(CONVERSATIONS[0], [CD_TOOL, LS_TOOL])
    assert '"name": "cd"' in prompt and '"name": "ls"' in prompt and "<tool_call>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert '"cd"' not in tiny.render(CONVERSATIONS[0])


def test_tokenizer_round_trips_tool_call_markup(tiny):
    text = '<tool_call>{"name": "cd", "arguments": {"folder": "x"}}</tool_call>'
    ids = tiny.tokenizer.encode(text, add_special_tokens=False)
    tokens = tiny.tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "<tool_call>" and tokens[-1] == "</tool_call>"
    assert len(ids) < 25  # the BPE was trained on BFCL tool-call text, so the scaffolding is compact
    assert tiny.tokenizer.decode(ids, skip_special_tokens=True) == text


def test_bfcl_prompt_with_two_classes_fits_context(tiny):
    from coevolve_lib.envs.bfcl.tiny_model import bfcl_openai_tools

    tools = bfcl_openai_tools("v3", "GorillaFileSystem") + bfcl_openai_tools("v3", "TwitterAPI")
    prompt = tiny.render([{"role": "user", "content": "Move final_report.pdf to temp."}], tools)
    n_tokens = len(tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert n_tokens * 2 < tiny.model.config.max_position_embeddings


@pytest.mark.skipif(not (MODELS_DIR / "smollm2-135m" / "config.json").exists(),
                    reason="smollm2-135m is not built (run `make setup`)")
def test_smollm2_answers_paris():
    model = load_chat_model("smollm2-135m")
    assert not model.native_tools
    [generation] = model.generate([[{"role": "user", "content": "What is the capital of France?"}]],
                                  config=GenerationConfig(max_new_tokens=24))
    assert "Paris" in generation.text
    assert generation.finish_reason == "stop" and "<|im_end|>" not in generation.text


def test_unbuilt_model_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(model_specs, "MODELS_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match="make setup"):
        load_chat_model("tiny")


def test_unknown_model_names_the_fix():
    with pytest.raises(FileNotFoundError, match="no model folder there.*make setup"):
        load_chat_model(str(MODELS_DIR / "no-such-model"))
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE"):
        load_chat_model("no-such-owner/no-such-model")


def test_openai_spec_builds_a_client_without_connecting(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = load_chat_model("openai:some-model", timeout=3, max_retries=1)
    assert isinstance(model, OpenAIChatModel) and model.native_tools
    assert model.name == "some-model" and str(model.client.base_url).startswith("http://127.0.0.1:9/v1")
    assert model.client.api_key == "EMPTY"


def test_unseeded_sampling_differs_between_calls():
    """Without a seed, two sampled calls must not replay the same random stream (a server's requests carry none)."""
    model = load_chat_model("tiny")
    config = GenerationConfig(max_new_tokens=12, temperature=1.0)
    conversation = [{"role": "user", "content": "List the files."}]
    texts = {model.generate([conversation], config=config)[0].text for _ in range(3)}
    assert len(texts) > 1


def test_a_run_thread_count_survives_models_loaded_later(tiny, monkeypatch):
    import torch

    from coevolve_lib.core.models import set_torch_threads

    monkeypatch.setenv("COEVOLVE_TORCH_THREADS", "1")  # restored afterwards, whatever set_torch_threads writes
    monkeypatch.delenv("COEVOLVE_MAX_TORCH_THREADS", raising=False)  # `make test` caps threads at 1
    before = torch.get_num_threads()
    try:
        assert set_torch_threads(2) == 2
        HFChatModel(MODELS_DIR / "tiny")  # evaluation inside a training run loads a model: it must not reset threads
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("COEVOLVE_MAX_TORCH_THREADS", "1")  # two processes side by side on two cores
        assert set_torch_threads(2) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
