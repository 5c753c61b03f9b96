"""The supervised warm start: its own synthetic tasks, conversations from real executions, a short SFT run that
changes the parameters, the learning-rate schedule, and the shipped copy (recipe key and file hashes)."""

import json
import random

import pytest
import torch
from helpers import BFCL
from safetensors.torch import load_file

import coevolve_lib.envs.bfcl.environment as environment_lib
from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.models import HFChatModel
from coevolve_lib.core.paths import MODELS_DIR
from coevolve_lib.core.records import config_hash
from coevolve_lib.engine import warm_start as warmstart
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.warm_start import learning_rate_at, length_grouped_batches, warm_start_tasks
from coevolve_lib.envs.bfcl.settings import BFCLWarmStartConfig
from coevolve_lib.envs.bfcl.tasks import load_tasks, restrict_classes, split_tasks
from coevolve_lib.envs.bfcl.warm_start import sft_conversation, warm_start
from coevolve_lib.profiles import data_engine_config
from coevolve_lib.rollout.agent import rollout_phase
from coevolve_lib.rollout.evaluation import task_outcomes
from coevolve_lib.training.policy_check import RL_GATE, check_policy


def _file_system_sources(count=3):
    return restrict_classes(split_tasks(load_tasks("v3", "base"), "train"), ["GorillaFileSystem"])[:count]


def test_conversation_holds_one_call_per_assistant_message_and_real_observations():
    task = split_tasks(load_tasks("v3", "base"), "train")[0]
    conversation = sft_conversation(task)
    messages = conversation["messages"]
    assistant_calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(assistant_calls) == sum(len(turn) for turn in task.ground_truth)
    assert all(len(m["tool_calls"]) == 1 for m in assistant_calls)
    assert all(isinstance(m["tool_calls"][0]["function"]["arguments"], dict) for m in assistant_calls)
    # Qwen3's template renders the mapping as the JSON text the shipped warm start was trained on (Qwen2.5's quotes
    # a string: the stand-ins need the mapping)
    from transformers.utils.chat_template_utils import render_jinja_template
    from trl.chat_template_utils import qwen3_chat_template

    as_text = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.dumps(
        c["function"]["arguments"], ensure_ascii=False)}} for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in messages]
    assert render_jinja_template([messages], chat_template=qwen3_chat_template)[0] == \
        render_jinja_template([as_text], chat_template=qwen3_chat_template)[0]
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    assert len(tool_results) == len(assistant_calls) and any("current_working_directory" in r or "{" in r
                                                             for r in tool_results)
    assert conversation["tools"] is None and sft_conversation(task, "compact")["tools"]


def test_warm_start_tasks_are_short_validated_tasks_of_the_given_environments(tmp_path):
    sources = _file_system_sources()
    config = BFCLWarmStartConfig(data_seeds=2, data_runs=3, data_min_calls=1, data_max_calls=2)
    tasks = warm_start_tasks(sources, tmp_path, config, SynthesisConfig(description_words=4), BFCL)
    assert tasks and all(1 <= len(t["reference_actions"]) <= 2 for t in tasks)
    assert {t["provenance"]["origin_task"] for t in tasks} <= {s.id for s in sources}
    assert all(t["involved_classes"] == ["GorillaFileSystem"] for t in tasks)
    assert (tmp_path / "seed_100").exists() and (tmp_path / "seed_101").exists()
    again = warm_start_tasks(sources, tmp_path, config, SynthesisConfig(description_words=4), BFCL)  # cached per seed
    assert [t["task_id"] for t in again] == [t["task_id"] for t in tasks]


def test_learning_rate_warms_up_then_ends_at_the_final_ratio_on_the_last_step():
    config = BFCLWarmStartConfig(max_steps=100, warmup_steps=10, learning_rate=1e-3, final_lr_ratio=0.1)
    assert learning_rate_at(0, config) == pytest.approx(1e-4)
    assert learning_rate_at(9, config) == pytest.approx(1e-3)
    assert learning_rate_at(100, config) == pytest.approx(1e-4)
    rates = [learning_rate_at(step, config) for step in range(10, 101)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))


def test_length_grouped_batches_cover_every_example_once_per_epoch_in_similar_lengths():
    lengths = [random.Random(i).randint(10, 500) for i in range(200)]
    batches = length_grouped_batches(lengths, 8, random.Random(0), window=5)
    epoch = [next(batches) for _ in range(25)]
    assert sorted(i for batch in epoch for i in batch) == list(range(200))
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in epoch) / len(epoch)
    assert spread < 150  # a random batch of 8 spans ~380 on average


def test_a_short_warm_start_changes_the_parameters(tmp_path):
    config = BFCLWarmStartConfig(enabled=True, max_steps=3, batch_size=2, warmup_steps=1, data_seeds=1, data_runs=2)
    summary = warm_start(MODELS_DIR / "tiny", _file_system_sources(2), tmp_path / "sft", config,
                         SynthesisConfig(), BFCL, progress=False)
    assert summary["steps"] == 3 and summary["tasks"] > 0 and summary["tokens"] > 0 and len(summary["loss"]) == 1
    before = load_file(MODELS_DIR / "tiny" / "model.safetensors")
    after = load_file(tmp_path / "sft" / "model.safetensors")
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) > len(before) // 2
    assert (tmp_path / "sft" / "tokenizer.json").exists()


def test_the_tiny_warm_start_is_shipped_for_the_tiny_recipe_and_its_files_are_checked(tmp_path, monkeypatch):
    engine = DataEngine(data_engine_config("tiny"), tmp_path / "run", "bfcl")
    key = config_hash(engine.environment.warm_start_recipe())
    shipped = warmstart.shipped_warm_start("tiny", key)
    assert shipped is not None, "the shipped tiny warm start was built from another recipe: rebuild and ship it"
    # a fresh clone: no cache, so neither stage may be built when the whole warm start is shipped
    monkeypatch.setattr(warmstart, "CACHE_DIR", tmp_path / "empty_cache")
    monkeypatch.setattr(environment_lib, "warm_start", lambda *a, **k: pytest.fail("stage 1 was built"))
    monkeypatch.setattr(environment_lib, "worlds_stage", lambda *a, **k: pytest.fail("the worlds stage was built"))
    assert engine.policy() == str(shipped)
    assert engine.environment.warm_start_recipe()["worlds_stage"]["count"] == 1200  # the shipped copy has both stages
    manifest = json.loads((shipped / "manifest.json").read_text())
    assert set(manifest["files"]) >= {"model.safetensors", "tokenizer.json", "config.json"}
    assert manifest["command"].startswith("python -m coevolve_lib warm-start --profile tiny")
    # another recipe is not served the shipped copy
    assert warmstart.shipped_warm_start("tiny", "another-key") is None
    # a damaged file is an error, not a silent load
    copy = tmp_path / "shipped" / "tiny"
    copy.mkdir(parents=True)
    for name in manifest["files"]:
        (copy / name).write_bytes((shipped / name).read_bytes())
    (copy / "manifest.json").write_text((shipped / "manifest.json").read_text())
    (copy / "config.json").write_text("{}")
    monkeypatch.setattr(warmstart, "SHIPPED_DIR", tmp_path / "shipped")
    with pytest.raises(RuntimeError, match="sha256 differs"):
        warmstart.shipped_warm_start("tiny", key)


def test_ship_writes_the_model_files_and_a_manifest_that_verifies(tmp_path, monkeypatch):
    monkeypatch.setattr(warmstart, "SHIPPED_DIR", tmp_path / "shipped")
    folder = warmstart.ship_warm_start(MODELS_DIR / "tiny", "demo", {"a": 1}, "k1", {"steps": 0}, "cmd")
    assert (folder / "model.safetensors").exists() and warmstart.shipped_warm_start("demo", "k1") == folder
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["recipe"] == {"a": 1} and manifest["command"] == "cmd"


def test_the_recipe_names_what_decides_the_weights_and_ignores_run_sizes(tmp_path):
    base = DataEngine(data_engine_config("tiny"), tmp_path / "a", "bfcl").environment.warm_start_recipe()
    bigger_pool = DataEngine(data_engine_config("tiny", d0_size=50, max_targets=4), tmp_path / "b", "bfcl")
    assert bigger_pool.environment.warm_start_recipe() == base
    other_steps = DataEngine(data_engine_config("tiny", {"environment": {"warm_start": {"max_steps": 10}}}),
                             tmp_path / "c", "bfcl")
    assert other_steps.environment.warm_start_recipe() != base
    other_world = DataEngine(data_engine_config("tiny", {"environment": {"classes": ["MathAPI"]}}),
                             tmp_path / "d", "bfcl")
    assert other_world.environment.warm_start_recipe() != base


def test_the_warm_start_and_the_pool_use_disjoint_train_environments(tmp_path):
    engine = DataEngine(data_engine_config("tiny", d0_size=20), tmp_path / "run", "bfcl")
    warm, pool = engine.environment.sources("warm_start"), engine.environment.sources("pool")
    train = {t.id for t in split_tasks(load_tasks("v3", "base"), "train")}
    assert warm and pool and not {t.id for t in warm} & {t.id for t in pool}
    assert {t.id for t in warm} | {t.id for t in pool} <= train
    engine.initial_pool(progress=False)
    assert {t["provenance"]["origin_task"] for t in engine.pool.tasks} <= {t.id for t in pool}
    without = DataEngine(data_engine_config("tiny", {"environment": {"warm_start": {"enabled": False}}}),
                         tmp_path / "other", "bfcl")
    assert without.environment.sources("warm_start") == []
    assert len(without.environment.sources("pool")) == len(warm) + len(pool)


def test_the_check_says_what_grpo_can_reach_from_the_shipped_start(tmp_path):
    """check_policy on the real shipped policy: D_0 sampled at K, and on each held-out set greedy success, pass@K and
    the greedy failures some sample solves, each recounted here from the same seeded episodes."""
    config = data_engine_config("tiny", d0_size=6, heldout={"new_tasks": {"size": 6}, "new_envs": {"size": 6}})
    engine = DataEngine(config, tmp_path, "bfcl")
    engine.initial_pool(progress=False)
    policy = engine.policy(progress=False)
    check = check_policy(engine, policy, samples=3, progress=False)
    assert check["d0_tasks"] == 6 and check["samples"] == 3 and check["temperature"] == config.rollout.temperature
    assert check["d0_tasks_mixed_%"] + check["d0_tasks_all_failed_%"] <= 100 and check["token_entropy"] > 0
    model = HFChatModel(policy)
    greedy = rollout_phase(config.rollout, temperature=0.0, token_level=True)
    sampled = rollout_phase(config.rollout, seed=0, token_level=True)
    for name, (key, tasks) in engine.heldout_sets().items():
        solved = {t: o[0] for t, o in task_outcomes(model, tasks, greedy, engine.environment).items()}
        drawn = task_outcomes(model, tasks, sampled, engine.environment, samples=3)
        assert check[f"{name}_set"] == key
        assert check[f"{name}_greedy_success_%"] == round(100 * sum(solved.values()) / 6, 2)
        assert check[f"{name}_pass@3_%"] == round(100 * sum(any(o) for o in drawn.values()) / 6, 2)
        reached = [t for t, o in drawn.items() if any(o) and not solved[t]]
        assert check[f"{name}_reached_%"] == round(100 * len(reached) / 6, 2)
        assert check[f"{name}_reached_%"] <= 100 - check[f"{name}_greedy_success_%"]
    assert set(check["rl_gate"]) == set(RL_GATE)
