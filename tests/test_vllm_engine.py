"""The `vllm` rollout engine (coevolve_lib/rollout/vllm.py) against a stand-in for TRL's vLLM: the fast unit tests, and
the lockstep of several processes on one server, which needs server mode or TP > 1 and so GPUs to run for real (vLLM's
CPU build runs the engine in tests/test_vllm.py, `make test-vllm`).

`FakeVLLMGeneration` stands in for `trainer.vllm_generation`: it checks
only the kit's side of the call (the prompts the engine sends, how it cuts and reads the completions, the lockstep
across processes), not vLLM. It is TRL's own `VLLMGeneration` in server mode, built without its `__init__` (which
needs vLLM and a running server), so its `generate` runs TRL's code as is: gather every process's prompts, generate
once on the main process, broadcast, and hand process i the replies [i * len(prompts), (i + 1) * len(prompts)).
Only the vLLM client is scripted: it answers each prompt with the pool task's reference calls in the tiny
template's tool-call format, one per step, then "Done.", each followed by junk after the stop id (as a sampler that
ran on would give). Processes are threads; accelerate's gather and broadcast become exchanges at a barrier.
"""

import copy
import importlib.util
import threading
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from helpers import BFCL, check_scripted_token_records, scripted_reply_ids
from trl.generation import vllm_generation as trl_vllm

from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import GenerationConfig, HFChatModel
from coevolve_lib.envs.bfcl.episode import Episode
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.rollout.engines import Request
from coevolve_lib.rollout.vllm import VLLMEngine


class World:
    """Processes as threads: `exchange` is an all-gather of one object per process."""

    def __init__(self, size: int):
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=60)  # a process out of step fails instead of hanging
        self.ranks: dict[int, int] = {}
        """Thread id -> process index (accelerate's gather_object and broadcast take no process argument)."""

    def exchange(self, rank: int, value) -> list:
        self.slots[rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values

    def rank(self) -> int:
        return self.ranks.get(threading.get_ident(), 0)


@pytest.fixture
def world(monkeypatch):
    """A one-process world; a test makes more with `world.__init__(n)`. TRL's collectives go through it."""
    world = World(1)

    def gather_object(values):
        return [value for part in world.exchange(world.rank(), values) for value in part]

    def broadcast_object_list(objects, from_process=0):
        objects[:] = world.exchange(world.rank(), objects)[from_process]

    monkeypatch.setattr(trl_vllm, "gather_object", gather_object)
    monkeypatch.setattr(trl_vllm, "broadcast_object_list", broadcast_object_list)
    return world


class FakeAccelerator:
    """What the engine and TRL's server-mode generate use of accelerate's Accelerator."""

    def __init__(self, world: World, rank: int):
        self.world, self.process_index, self.num_processes, self.device = world, rank, world.size, "cpu"
        self.is_main_process = rank == 0
        self.gathers = 0

    def gather(self, tensor):
        self.gathers += 1
        return torch.cat(self.world.exchange(self.process_index, tensor))


class ScriptedClient:
    """TRL's VLLMClient on the main process: scripted completions instead of a server's."""

    def __init__(self, tokenizer, tasks):
        self.tokenizer, self.tasks = tokenizer, tasks
        self.junk = tokenizer("junk after the stop", add_special_tokens=False)["input_ids"]

    def generate(self, prompts, features, n, **sampling):
        assert features is None and n == 1
        return {"prompt_ids": prompts, "logprobs": None,
                "completion_ids": [scripted_reply_ids(self.tokenizer, self.tasks, p) + self.junk for p in prompts]}


class FakeVLLMGeneration(trl_vllm.VLLMGeneration):
    """TRL's VLLMGeneration in server mode with a scripted client (see the module docstring); records the prompts
    of every call."""

    def __init__(self, accelerator: FakeAccelerator, client: ScriptedClient | None):
        self.accelerator, self.mode, self.tensor_parallel_size, self.vllm_client = accelerator, "server", 1, client
        self.temperature, self.top_p, self.top_k, self.min_p, self.repetition_penalty = 0.9, 1.0, 0, 0.0, 1.0
        self.max_completion_length, self.logprobs, self.structured_outputs_regex = 4096, 0, None
        self.enable_sleep_mode, self.generation_kwargs = False, {}
        self.calls: list[list[list[int]]] = []

    def generate(self, prompts, images, num_generations, profiler=None):
        self.calls.append([list(p) for p in prompts])
        return super().generate(prompts, images, num_generations, profiler)


@pytest.fixture(scope="module")
def tiny():
    return load_chat_model("tiny")


@pytest.fixture(scope="module")
def pool_tasks(tmp_path_factory):
    from coevolve_lib.engine.feedback import FeedbackConfig, synthesize_initial
    from coevolve_lib.engine.pool import TaskPool
    from coevolve_lib.envs.bfcl.episode import pool_task_to_bfcl
    from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks

    folder = tmp_path_factory.mktemp("pool")
    pool = TaskPool(folder / "pool.jsonl")
    synthesize_initial(split_tasks(load_tasks("v3", "base"), "train")[:6], pool, folder / "d0", FeedbackConfig(),
                       BFCL.target, BFCL.round_stages(),
                       size=3, progress=False)
    return [pool_task_to_bfcl(t) for t in pool.tasks]


def process(tiny, world, rank, tasks):
    """One process's model (its own tokenizer: threads must not share one) and trainer stand-in."""
    model = HFChatModel.from_loaded(tiny.model, copy.deepcopy(tiny.tokenizer), f"policy-{rank}")
    accelerator = FakeAccelerator(world, rank)
    client = ScriptedClient(model.tokenizer, tasks) if rank == 0 else None
    return model, SimpleNamespace(accelerator=accelerator, vllm_generation=FakeVLLMGeneration(accelerator, client))


CONFIG = RolloutPhase(RolloutConfig(tool_docs="none", batch_size=2), token_level=True, engine="vllm")


def test_vllm_rollouts_keep_generated_ids_and_mask_the_environment(tiny, pool_tasks, world):
    model, trainer = process(tiny, world, 0, pool_tasks)
    records = run_rollouts(model, pool_tasks, CONFIG, samples_per_task=2, progress=False, trainer=trainer,
                           new_episode=Episode)
    assert [r["task_id"] for r in records] == [t.id for t in pool_tasks for _ in range(2)]
    # each completion is cut after its stop id: the junk vLLM might have sampled after it never enters the ids
    check_scripted_token_records(records, pool_tasks, model.tokenizer)
    # The prompts sent are the episodes' ids up to each model turn, each once (one process: no padding).
    sent = Counter(tuple(p) for call in trainer.vllm_generation.calls for p in call)
    expected = Counter(tuple(r["prompt_ids"] + r["completion_ids"][:k]) for r in records
                       for k, m in enumerate(r["completion_mask"]) if m and (k == 0 or not r["completion_mask"][k - 1]))
    assert sent == expected
    assert trainer.accelerator.gathers == 0  # one process: no exchange


def test_completions_are_cut_at_the_request_cap_and_after_the_first_stop_id(tiny):
    stop = tiny.stop_ids[0]
    words = tiny.tokenizer("one two three four five", add_special_tokens=False)["input_ids"]
    trainer = SimpleNamespace(accelerator=FakeAccelerator(World(1), 0), vllm_generation=SimpleNamespace(
        mode="server", tensor_parallel_size=1,
        generate=lambda prompts, images, num_generations: (prompts, [words, words[:2] + [stop] + words, [stop]], None,
                                                           None)))
    engine = VLLMEngine(tiny, GenerationConfig(), trainer)
    for key, cap in enumerate([3, 100, 100]):
        engine.submit(Request(key, cap, prompt_ids=[1, 2, key]))
    replies = dict(engine.collect())
    assert (replies[0].token_ids, replies[0].finish_reason) == (words[:3], "length")
    assert (replies[1].token_ids, replies[1].finish_reason) == (words[:2] + [stop], "stop")
    assert replies[1].text == tiny.tokenizer.decode(words[:2]) and replies[1].completion_tokens == 3
    assert (replies[2].token_ids, replies[2].finish_reason, replies[2].text) == ([stop], "stop", "")
    assert replies[0].prompt_tokens == 3


def test_generate_is_collective_in_server_mode_and_with_colocated_tensor_parallelism(tiny):
    def engine(processes, mode, tp):
        trainer = SimpleNamespace(accelerator=SimpleNamespace(num_processes=processes),
                                  vllm_generation=SimpleNamespace(mode=mode, tensor_parallel_size=tp))
        return VLLMEngine(tiny, GenerationConfig(), trainer)

    assert engine(2, "server", 1).collective and engine(2, "colocate", 2).collective
    assert not engine(2, "colocate", 1).collective and not engine(1, "server", 1).collective


def test_two_processes_stay_in_lockstep_until_both_are_done(tiny, pool_tasks, world):
    """Process 1 has twice the episodes (two waves of batch_size 2), so process 0's end early: it must keep
    calling, with as many (padding) prompts as process 1 sends, until process 1 is done; every process then gets
    the replies to its own prompts, the same records as alone."""
    shares = [pool_tasks[:1], pool_tasks[1:3]]
    alone = []
    for rank, tasks in enumerate(shares):
        model, trainer = process(tiny, world, 0, tasks)
        alone.append((run_rollouts(model, tasks, CONFIG, samples_per_task=2, progress=False, trainer=trainer,
                                   new_episode=Episode),
                      len(trainer.vllm_generation.calls)))
    assert alone[0][1] < alone[1][1]

    world.__init__(2)
    processes = [process(tiny, world, rank, pool_tasks) for rank in range(2)]
    results, errors = [None, None], []

    def run(rank):
        model, trainer = processes[rank]
        world.ranks[threading.get_ident()] = rank
        try:
            results[rank] = run_rollouts(model, shares[rank], CONFIG, samples_per_task=2, progress=False,
                                         trainer=trainer, new_episode=Episode)
        except BaseException as error:  # reported below
            errors.append(error)
            world.barrier.abort()

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(thread.is_alive() for thread in threads), errors
    calls = [trainer.vllm_generation.calls for _, trainer in processes]
    assert [len(call) for call in calls[0]] == [len(call) for call in calls[1]]  # same calls, same prompt counts
    assert len(calls[0]) == alone[1][1]  # process 0 kept calling until process 1 was done
    assert processes[0][1].accelerator.gathers == len(calls[0]) + 1  # + the exchange that found nobody left
    for rank in range(2):
        assert [(r["task_id"], r["completion_ids"], r["completion_mask"], r["success"]) for r in results[rank]] == \
            [(r["task_id"], r["completion_ids"], r["completion_mask"], r["success"]) for r in alone[rank][0]]


def test_training_accepts_use_vllm_and_refuses_it_without_the_vllm_package(monkeypatch, tmp_path, capsys):
    from coevolve_lib.__main__ import main as cli
    from coevolve_lib.core.config import TrainConfig

    assert TrainConfig(use_vllm=True, vllm_mode="colocate").use_vllm
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "vllm" else
                        find_spec(name, *a, **k))
    assert cli(["train", "--profile", "tiny", "--out", str(tmp_path / "run"), "--set", "training.use_vllm=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training.use_vllm=true needs the vllm package, which is not installed" in err
    assert not (tmp_path / "run").exists()  # refused before anything ran
