"""The rollout engines on the real warm-started tiny policy: the KV-cache engine gives token for token what the
re-feeding `generate` engine gives under greedy decoding, and its own pieces (prefix reuse, length groups, caps,
seeded sampling) do what they say."""

import pytest

from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import GenerationConfig
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.envs.bfcl.episode import Episode
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.rollout.engine_choice import make_engine, resolve_engine
from coevolve_lib.rollout.engines import GenerateEngine, KVCacheEngine, Request, sample_tokens

POLICY = REPO_ROOT / "coevolve_lib" / "data" / "warm_start" / "tiny"  # makes tool calls: multi-turn episodes


@pytest.fixture(scope="module")
def policy():
    return load_chat_model(str(POLICY))


@pytest.fixture(scope="module")
def pool_tasks(tmp_path_factory):
    from coevolve_lib.engine.data_engine import DataEngine
    from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
    from coevolve_lib.profiles import data_engine_config

    engine = DataEngine(data_engine_config("tiny", d0_size=8), tmp_path_factory.mktemp("d0"), "bfcl")
    engine.initial_pool(progress=False)
    return [pool_task_to_bfcl(t) for t in engine.pool.tasks[:8]]


def rollouts(model, tasks, engine, temperature=0.0, samples=2, seed=0, batch=64, cap=4096):
    config = RolloutPhase(RolloutConfig(tool_docs="none", batch_size=batch), token_level=True, engine=engine,
                          max_completion_tokens=cap,
                          generation=GenerationConfig(max_new_tokens=48, temperature=temperature, seed=seed))
    return run_rollouts(model, tasks, config, samples_per_task=samples, progress=False, new_episode=Episode)


def test_kv_cache_greedy_ids_and_masks_equal_the_generate_engine(policy, pool_tasks):
    reference = rollouts(policy, pool_tasks, "generate")
    cached = rollouts(policy, pool_tasks, "kv_cache")
    assert sum(len(r["steps"]) for r in reference) > len(reference), "the episodes should be multi-turn"
    for a, b in zip(reference, cached):
        assert (a["prompt_ids"], a["completion_ids"], a["completion_mask"]) == \
            (b["prompt_ids"], b["completion_ids"], b["completion_mask"])
        assert a["messages"] == b["messages"] and a["success"] == b["success"]


def test_kv_cache_greedy_equal_with_episodes_joining_a_running_batch(policy, pool_tasks):
    """A batch of 3 live episodes for 8 tasks: episodes start while others are mid-conversation, and a completion
    cap ends some early (`completion_cap`)."""
    reference = rollouts(policy, pool_tasks, "generate", samples=1, batch=3, cap=120)
    cached = rollouts(policy, pool_tasks, "kv_cache", samples=1, batch=3, cap=120)
    assert any(r["terminated"] == "completion_cap" for r in reference)
    assert [r["completion_ids"] for r in reference] == [r["completion_ids"] for r in cached]
    assert [r["completion_mask"] for r in reference] == [r["completion_mask"] for r in cached]


def test_kv_cache_sampling_is_reproducible_per_seed(policy, pool_tasks):
    first = rollouts(policy, pool_tasks[:4], "kv_cache", temperature=0.9, seed=3)
    again = rollouts(policy, pool_tasks[:4], "kv_cache", temperature=0.9, seed=3)
    other = rollouts(policy, pool_tasks[:4], "kv_cache", temperature=0.9, seed=4)
    ids = lambda records: [r["completion_ids"] for r in records]  # noqa: E731
    assert ids(first) == ids(again) and ids(first) != ids(other)


def test_kv_cache_reuses_the_cache_and_recovers_from_a_prompt_that_does_not_extend_it(policy):
    prompt = policy.prompt_ids([{"role": "user", "content": "List the files here."}])
    greedy = GenerationConfig(max_new_tokens=12, temperature=0.0)
    engine, reference = KVCacheEngine(policy, greedy), GenerateEngine(policy, greedy)
    engine.submit(Request("a", 12, prompt_ids=prompt))
    [(_, reply)] = engine.collect()
    cached = engine.saved["a"]
    assert cached.ids == prompt + reply.token_ids[:-1]
    assert all(keys.shape[1] == len(cached.ids) for keys, _ in cached.layers)
    follow = prompt + reply.token_ids + policy.tokenizer("<|im_start|>user\nAnd now?<|im_end|>\n"
                                                         "<|im_start|>assistant\n",
                                                         add_special_tokens=False)["input_ids"]
    unrelated = policy.prompt_ids([{"role": "user", "content": "Make a folder called docs."}])
    for key, prompt_ids in (("a", follow), ("b", unrelated)):
        engine.submit(Request(key, 12, prompt_ids=prompt_ids))
        reference.submit(Request(key, 12, prompt_ids=prompt_ids))
    assert [g.token_ids for _, g in engine.collect()] == [g.token_ids for _, g in reference.collect()]
    engine.submit(Request("a", 12, prompt_ids=unrelated))  # a prompt that does not extend "a"'s ids: fed whole
    reference.submit(Request("a", 12, prompt_ids=unrelated))
    assert engine.collect()[0][1].token_ids == reference.collect()[0][1].token_ids
    engine.release("a")
    assert "a" not in engine.saved


def test_kv_cache_honours_each_request_cap(policy):
    prompt = policy.prompt_ids([{"role": "user", "content": "Show me what is in the current directory."}])
    engine = KVCacheEngine(policy, GenerationConfig(max_new_tokens=40, temperature=1.0, seed=0))
    engine.submit(Request(0, 3, prompt_ids=prompt))
    engine.submit(Request(1, 40, prompt_ids=prompt))
    replies = dict(engine.collect())
    assert len(replies[0].token_ids) <= 3 and replies[0].completion_tokens == len(replies[0].token_ids)
    assert replies[0].finish_reason == ("stop" if replies[0].token_ids[-1] in policy.stop_ids else "length")


def test_length_groups_bound_the_padding():
    engine = KVCacheEngine.__new__(KVCacheEngine)
    engine.max_pad_share = 0.25
    lengths = [3, 100, 4, 98, 5, 60, 100]
    groups = engine._length_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        width = max(lengths[i] for i in group)
        assert 1 - sum(lengths[i] for i in group) / (width * len(group)) <= 0.25


def test_sampling_follows_temperature_and_top_p():
    import torch

    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 0.0]])
    assert sample_tokens(logits, GenerationConfig(temperature=0.0), None).tolist() == [1, 0]
    generator = torch.Generator().manual_seed(0)
    nucleus = GenerationConfig(temperature=1.0, top_p=0.5)  # only the most likely token is inside the nucleus
    assert all(sample_tokens(logits, nucleus, generator).tolist() == [1, 0] for _ in range(20))


def test_sampling_draws_each_token_at_its_probability():
    import torch

    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0]]).log_softmax(-1).repeat(20_000, 1)
    temperature = 0.9
    tokens = sample_tokens(logits, GenerationConfig(temperature=temperature), torch.Generator().manual_seed(1))
    counts = torch.bincount(tokens, minlength=4).double()
    expected = (logits[0] / temperature).softmax(-1).double() * len(tokens)
    assert counts[2] == 0  # a token of probability 0 is never drawn
    # within 5 standard deviations of the binomial count of every token
    assert ((counts - expected).abs() <= 5 * (expected * (1 - expected / len(tokens))).sqrt() + 1e-9).all(), counts
    again = sample_tokens(logits, GenerationConfig(temperature=temperature), torch.Generator().manual_seed(1))
    assert torch.equal(tokens, again)  # a seeded generator repeats its samples


def test_auto_picks_the_engine_by_backend(policy):
    class Scripted:  # an object with generate_from_ids and no local model behind it
        pass

    assert resolve_engine("auto", policy, token_level=True) == "kv_cache"  # CPU
    assert resolve_engine("auto", Scripted(), token_level=True) == "generate"
    assert resolve_engine("auto", policy, token_level=False) == "messages"
    with pytest.raises(ValueError, match="unknown rollout engine"):
        make_engine("fast", policy, GenerationConfig(), token_level=True)
    with pytest.raises(ValueError, match="vllm engine"):
        make_engine("vllm", policy, GenerationConfig(), token_level=True)


def test_continuous_batching_greedy_ids_equal_the_generate_engine(policy, pool_tasks):
    """transformers' continuous-batching manager (the CUDA engine) also runs on CPU, with a small paged cache: the
    same greedy ids, requests joining as their episodes' tool results come back."""
    reference = rollouts(policy, pool_tasks[:3], "generate")
    batched = rollouts(policy, pool_tasks[:3], "continuous_batching")
    assert [r["completion_ids"] for r in reference] == [r["completion_ids"] for r in batched]
    assert [r["completion_mask"] for r in reference] == [r["completion_mask"] for r in batched]
    assert policy.model.config._attn_implementation == "sdpa"  # the manager hands the model back as it found it


def test_grouped_attention_gives_the_bits_of_transformers_sdpa(policy):
    """`generation_attention` on the CPU reads grouped-query heads in place; the logits of a left-padded batch with a
    cache are the bits transformers' own SDPA attention gives (its `repeat_kv` copies)."""
    import torch

    from coevolve_lib.core.models import GROUPED_SDPA, generation_attention

    model = policy.model
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # the tiny model has grouped heads
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = (torch.arange(6) >= torch.tensor([[2], [0]])).long()

    def logits():
        with torch.inference_mode():
            prefill = model(input_ids=ids, attention_mask=mask, use_cache=True)
            step = model(input_ids=torch.tensor([[15], [16]]), past_key_values=prefill.past_key_values, use_cache=True,
                         attention_mask=torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1))
        return prefill.logits, step.logits

    plain = logits()
    with generation_attention(model):
        assert model.config._attn_implementation == GROUPED_SDPA
        grouped = logits()
    assert model.config._attn_implementation == "sdpa"  # restored
    assert all(torch.equal(a, b) for a, b in zip(plain, grouped))


def test_roomy_cache_equals_concatenation():
    import torch
    from transformers import DynamicCache

    from coevolve_lib.rollout.kv_caches import stack_caches, unstack_caches

    rows = [[(torch.randn(2, n, 4), torch.randn(2, n, 4)) for _ in range(3)] for n in (3, 5)]
    roomy, mask = stack_caches(rows, "cpu", room=2)
    plain = DynamicCache()
    for layer in range(3):
        keys = torch.stack([torch.cat([k.new_zeros(2, 5 - k.shape[1], 4), k], 1) for k, _ in (r[layer] for r in rows)])
        values = torch.stack([torch.cat([v.new_zeros(2, 5 - v.shape[1], 4), v], 1)
                              for _, v in (r[layer] for r in rows)])
        plain.update(keys, values, layer)
    for added in (1, 1, 3):  # the third outgrows the room: the buffers grow
        new = [(torch.randn(2, 2, added, 4), torch.randn(2, 2, added, 4)) for _ in range(3)]
        for layer, (keys, values) in enumerate(new):
            assert all(torch.equal(a, b) for a, b in zip(roomy.update(keys, values, layer),
                                                         plain.update(keys, values, layer)))
        mask = torch.cat([mask, torch.ones(2, added, dtype=torch.long)], 1)
    assert roomy.get_seq_length() == plain.get_seq_length() == 10
    split = unstack_caches(roomy, mask)
    assert [tuple(k.shape) for k, _ in (layers[0] for layers in split)] == [(2, 8, 4), (2, 10, 4)]
    assert torch.equal(split[0][2][0], torch.cat([rows[0][2][0], plain.layers[2].keys[0, :, 5:]], 1))
