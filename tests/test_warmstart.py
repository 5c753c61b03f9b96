"""The supervised warm start: conversations built from real executions, and a short TRL SFT run that changes
the model's parameters."""

import json

import torch
from safetensors.torch import load_file

from coevolve_lib.envs.bfcl import load_tasks, split_tasks
from coevolve_lib.paths import MODELS_DIR
from coevolve_lib.warmstart import WarmStartConfig, sft_conversation, warm_start


def test_conversation_holds_one_call_per_assistant_message_and_real_observations():
    task = split_tasks(load_tasks("v3", "base"), "train")[0]
    conversation = sft_conversation(task)
    messages = conversation["messages"]
    assistant_calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(assistant_calls) == sum(len(turn) for turn in task.ground_truth)
    assert all(len(m["tool_calls"]) == 1 for m in assistant_calls)
    assert all(isinstance(json.loads(m["tool_calls"][0]["function"]["arguments"]), dict) for m in assistant_calls)
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(tool_results) == len(assistant_calls) and any("current_working_directory" in r or "{" in r
                                                             for r in tool_results)
    assert conversation["tools"] is None and sft_conversation(task, "compact")["tools"]


def test_a_short_sft_run_changes_the_parameters(tmp_path):
    tasks = split_tasks(load_tasks("v3", "base"), "train")[:6]
    summary = warm_start(MODELS_DIR / "tiny", tasks, tmp_path / "sft",
                         WarmStartConfig(enabled=True, max_steps=3, batch_size=2, warmup_steps=0, max_length=256))
    assert summary["steps"] == 3 and summary["examples"] + summary["skipped"] == 6
    before = load_file(MODELS_DIR / "tiny" / "model.safetensors")
    after = load_file(tmp_path / "sft" / "model.safetensors")
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) > len(before) // 2


def test_tiny_profile_warm_start_settings_reach_the_trainer(tmp_path, monkeypatch):
    """The tiny profile keeps the paper's >= 3-action tasks, and its optimizer settings are what TRL receives."""
    import trl

    from coevolve_lib.config import data_engine_config

    config = data_engine_config("tiny")
    assert config.synthesis.min_steps >= 3 and config.warm_start.enabled
    seen = {}

    class Stop(Exception):
        pass

    def fake_trainer(model, args, train_dataset):
        seen.update(lr=args.learning_rate, beta2=args.adam_beta2, steps=args.max_steps, rows=len(train_dataset))
        raise Stop

    monkeypatch.setattr(trl, "SFTTrainer", fake_trainer)
    tasks = split_tasks(load_tasks("v3", "base"), "train")[:2]
    try:
        warm_start(MODELS_DIR / "tiny", tasks, tmp_path / "sft", config.warm_start)
    except Stop:
        pass
    assert seen["lr"] == config.warm_start.learning_rate and seen["beta2"] == config.warm_start.adam_beta2
    assert seen["steps"] == config.warm_start.max_steps and seen["rows"] > len(tasks) * config.warm_start.task_repeats
