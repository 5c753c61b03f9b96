"""The CoEvolve loop on AppWorld, against AppWorld's REAL server on the synthetic world its own code builds: D_0 from
unguided exploration of the train split (the data engine), signals and contexts from real AppWorld rollouts, and
TRL's GRPO steps with a feedback round and TGC/SGC (the training loop, `tiny-appworld`)."""

import json
import shutil
from collections import Counter

import pytest
from helpers import CodeModel, EveryFailure  # noqa: F401 (registers the every_failure signal)

from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.models import ChatModel, Generation
from coevolve_lib.core.paths import repo_relative
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.engine.contexts import build_context
from coevolve_lib.engine.data_engine import DataEngine, stamp_rollouts
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.engine.signals import SignalExtractor
from coevolve_lib.envs.appworld.calls import solution_code
from coevolve_lib.envs.appworld.environment import AppWorldEnvironment, appworld_source_root
from coevolve_lib.profiles import run_config
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.studies.run import Study, Variant, measure
from coevolve_lib.training.loop import train

SMALL = ["data_engine.d0_size=8", "data_engine.explore.runs=3", "data_engine.explore.calls_per_run=4",
         'data_engine.signals.enabled=["every_failure"]', "data_engine.max_targets=1",
         "data_engine.heldout.new_tasks.size=0", "data_engine.heldout.new_envs.size=0",
         "environment.warm_start.enabled=false"]
"""The module's data engine: a small D_0 and no held-out set (one test builds its own); rounds target one failed
trajectory (test-only `every_failure` signal: the random-init policy, without the profile's warm start, fails every
episode)."""


@pytest.fixture(scope="module")
def engine(world, tmp_path_factory):
    """A data engine with D_0 built (module scope: the training test goes on in its folder, with its servers), and
    shared in the folder beside it (`shared_starts`), as a study's first run shares it."""
    run = run_config("tiny-appworld", SMALL)
    folder = tmp_path_factory.mktemp("engine")
    engine = DataEngine(run.data_engine, folder, AppWorldEnvironment(run.data_engine, folder, source_root=world.root))
    engine.initial_pool(progress=False, shared=folder.parent / "shared_starts")
    yield engine
    engine.close()


def test_d0_holds_appworld_tasks_that_appworlds_evaluator_accepted(engine, world):
    report = json.loads((engine.run_dir / "round_000" / "report.json").read_text())
    tasks = engine.pool.tasks
    assert 0 < len(tasks) <= 8 and report["added_to_pool"] == len(tasks)
    sources = {t["provenance"]["origin_task"] for t in tasks}
    assert sources <= set(world.splits["train"])  # D_0 explores the train split's start states only
    verdicts = {v["task_id"]: v for v in read_jsonl(engine.run_dir / "round_000" / "verdicts.jsonl")}
    for task in tasks:
        assert verdicts[task["task_id"]]["reason"] == "objective_met"
        assert len(task["reference_actions"]) >= 3 and task["data_version"] == "appworld"
        assert "answer_from" in task  # None: a change; else what the answer is read from (solution_code needs it)
        folder = engine.environment.root / "data" / "tasks" / task["task_id"]
        assert json.loads((folder / "specs.json").read_text())["instruction"] == task["query"]
    assert not (world.root / "data" / "tasks" / tasks[0]["task_id"]).exists()  # the source root is never written


def test_a_held_out_set_explores_unseen_households_and_another_run_can_roll_it_out(engine, world, tmp_path,
                                                                                   monkeypatch):
    """The held-out sources: one task per start state (household), the pool's in the train split and the unseen
    set's in the dev split, no household in both. A set built in one run folder (cached) is written into another
    run's data root when that run reads it (`install_tasks`), where AppWorld's server runs its reference."""
    monkeypatch.setattr("coevolve_lib.engine.heldout.CACHE_DIR", tmp_path / "cache")  # built here, not reused
    households = {name: {world.start_states[s.task_id] for s in engine.sources(name)} for name in ("pool", "unseen")}
    assert len(households["pool"]) == len(engine.sources("pool")) == 5 and len(households["unseen"]) == 3
    assert not households["pool"] & households["unseen"]
    run = run_config("tiny-appworld", SMALL + ["data_engine.heldout.new_tasks.size=0",
                                              "data_engine.heldout.new_envs.size=2",
                                              "data_engine.heldout.new_envs.runs=1"])
    built = DataEngine(run.data_engine, tmp_path / "a", engine.environment).heldout("new_envs")
    assert len(built[1]) == 2
    assert {world.start_states[t["initial_config"]["appworld_task"]] for t in built[1]} <= households["unseen"]
    other = DataEngine(run.data_engine, tmp_path / "b", AppWorldEnvironment(run.data_engine, tmp_path / "b",
                                                                          source_root=world.root))
    try:
        key, tasks = other.heldout("new_envs")
        assert (key, tasks) == built
        docs = other.environment.api_docs()
        for task in tasks:
            folder = other.environment.root / "data" / "tasks" / task["task_id"]
            assert json.loads((folder / "specs.json").read_text())["instruction"] == task["query"]
        task = tasks[0]
        [env_task] = other.rollout_tasks([task])
        reply = f"```python\n{solution_code(task['reference_actions'], docs, task['answer_from'])}\n```"
        [record] = run_rollouts(PerEpisode([env_task], {task["task_id"]: [reply]}), [env_task],
                                RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=1)), progress=False,
                                new_episode=other.environment.new_episode)
        assert record["success"], record["steps"]
    finally:
        other.close()


def test_a_run_that_differs_only_in_training_copies_the_shared_d0_and_can_roll_it_out(engine, world, tmp_path,
                                                                                   monkeypatch):
    """A study's other runs copy the D_0 the first shared (one build per data-engine config, not one per run): the same
    pool tasks and round report, and the task files the first run wrote copied into the copying run's data root (no
    AppWorld writer run: 20-30 s for a 32-task D_0)."""
    run = run_config("tiny-appworld", SMALL + ["training.seed=1", "training.pool_updates=none",
                                              'data_engine.signals.enabled=["boundary"]'])
    other = DataEngine(run.data_engine, tmp_path, AppWorldEnvironment(run.data_engine, tmp_path,
                                                                     source_root=world.root))
    try:
        def no_writer(*args, **kwargs):
            raise AssertionError("AppWorld's writer ran: the task files were not copied")

        monkeypatch.setattr("coevolve_lib.envs.appworld.environment.write_tasks", no_writer)
        other.initial_pool(progress=False, shared=engine.run_dir.parent / "shared_starts")
        monkeypatch.undo()
        d0 = [t for t in engine.pool.tasks if t["pool_version"] == 0]
        assert other.pool.tasks == d0
        for name in ("report.json", "timings.json"):  # the build's own wall seconds: copied, not built again
            assert (tmp_path / "round_000" / name).read_text() == (engine.run_dir / "round_000" / name).read_text()
        task = d0[0]
        [env_task] = other.rollout_tasks([task])
        code = solution_code(task["reference_actions"], other.environment.api_docs(), task["answer_from"])
        reply = f"```python\n{code}\n```"
        [record] = run_rollouts(PerEpisode([env_task], {task["task_id"]: [reply]}), [env_task],
                                RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=1)), progress=False,
                                new_episode=other.environment.new_episode)
        assert record["success"], record["steps"]
        changed = run_config("tiny-appworld", SMALL + ["data_engine.d0_size=4"]).data_engine  # D_0 reads d0_size
        assert DataEngine(changed, tmp_path / "n4", other.environment).d0_key() != other.d0_key()
    finally:
        other.close()


class PerEpisode(CodeModel):
    """A task's n-th sampled episode gets its n-th reply (cyclically); with a reply that ends the episode in one step,
    each episode is one scripted reply. A unit-test stand-in for a policy (e.g. on the boundary: the reference
    solution, then completing the task doing nothing)."""

    def __init__(self, tasks, replies):
        super().__init__(tasks, replies)
        self.episodes = Counter()

    def _reply(self, messages):
        task_id = self.task_of[messages[1]["content"].split("Task: ", 1)[1]]
        self.episodes[task_id] += 1
        replies = self.replies[task_id]
        return Generation(replies[(self.episodes[task_id] - 1) % len(replies)], None, 10, 5, 0.0, "stop")


def test_signals_and_contexts_read_real_appworld_rollouts(engine):
    """A boundary group of real AppWorld episodes (one solved, one not) fires the boundary signal, and its context
    names the AppWorld APIs the trajectory called."""
    tasks = engine.pool.tasks[:2]
    docs = engine.environment.api_docs()
    solve = {t["task_id"]: f"```python\n{solution_code(t['reference_actions'], docs, t['answer_from'])}\n```"
             for t in tasks}
    give_up = "```python\napis.supervisor.complete_task()\n```"
    env_tasks = engine.rollout_tasks(tasks)
    model = PerEpisode(env_tasks, {t["task_id"]: [solve[t["task_id"]], give_up] for t in tasks})
    records = run_rollouts(model, env_tasks, RolloutPhase(RolloutConfig(batch_size=2, max_steps_per_episode=3)),
                           samples_per_task=2, progress=False, new_episode=engine.environment.new_episode)
    assert [r["success"] for r in records] == [True, False, True, False]
    assert records[0]["steps"][0]["calls"][:2] == ["supervisor.show_account_passwords", "supervisor.show_profile"]
    stamp_rollouts(records, 1, tasks)
    signals = SignalExtractor(run_config("tiny-appworld").data_engine.signals).observe(1, records)
    boundary = [s for s in signals if s["type"] == "boundary"]
    assert {s["task_id"] for s in boundary} == {t["task_id"] for t in tasks}
    target = engine.pool_target(tasks[0], boundary[0], records[int(boundary[0]["rollout_id"][-1])])
    context = build_context(target, run_config("tiny-appworld").data_engine.explore)
    called = {name for name in records[0]["steps"][0]["calls"] if not name.startswith("supervisor.")}
    assert called and called <= set(context["focus_pattern"])


def test_the_prefix_and_format_rewards_read_real_appworld_episodes(engine):
    """AppWorld's `prefix` and `format` rewards on real episodes of one pool task: the reference solution (1 for
    both), its first call only, then completing the task (prefix: one reference API of the two it named, since the
    login preamble's show_profile counts as an extra; format: its code ran), and code that fails (0 for both)."""
    from coevolve_lib.envs.appworld.calls import parse_appworld_call
    from coevolve_lib.envs.appworld.rewards import format_reward, prefix_reward

    task = engine.pool.tasks[0]
    wanted = [parse_appworld_call(action).name for action in task["reference_actions"]]
    assert "supervisor.show_profile" not in wanted[:1]
    docs = engine.environment.api_docs()
    fenced = lambda code: f"```python\n{code}\n```"  # noqa: E731
    replies = [fenced(solution_code(task["reference_actions"], docs, task["answer_from"])),
               fenced(solution_code(task["reference_actions"][:1], docs, None)), fenced("print(undefined_name)")]
    [env_task] = engine.rollout_tasks([task])
    records = run_rollouts(PerEpisode([env_task], {task["task_id"]: replies}), [env_task],
                           RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=1)), samples_per_task=3,
                           progress=False, new_episode=engine.environment.new_episode)
    assert [r["success"] for r in records] == [True, False, False]
    assert [prefix_reward(r, task) for r in records] == [1.0, 1 / (max(len(wanted), 2) + 1), 0.0]
    assert [format_reward(r, task) for r in records] == [1.0, 0.5, 0.0]
    assert records[1]["steps"][0]["calls"][-1] == "supervisor.complete_task"


def test_a_warm_start_conversation_is_an_episode_whose_one_reply_solves_its_task(engine):
    """The AppWorld warm start's data for a pool task: the prompt an episode of it starts with, then one reply (the
    reference code in a ```python block) that AppWorld's server runs and its evaluator passes."""
    from coevolve_lib.envs.appworld.warm_start import sft_conversation

    settings = RolloutConfig(batch_size=1, max_steps_per_episode=2)
    docs = engine.environment.api_docs()
    for task in engine.pool.tasks[:2]:
        [env_task] = engine.rollout_tasks([task])
        conversation = sft_conversation(env_task, task, docs, settings.max_steps_per_episode, settings.tool_docs)
        prompt, [reply] = conversation["messages"][:2], conversation["messages"][2:]
        [record] = run_rollouts(PerEpisode([env_task], {task["task_id"]: [reply["content"]]}), [env_task],
                                RolloutPhase(settings), progress=False, new_episode=engine.environment.new_episode)
        assert record["messages"][:3] == prompt + [reply]
        assert record["success"] and len(record["steps"]) == 1, record["steps"]


def test_the_tiny_appworld_warm_start_is_shipped_for_its_recipe(engine, tmp_path, monkeypatch):
    """`tiny-appworld`'s policy is the shipped warm start (built from the profile's own recipe), found without
    building anything; run sizes do not change the recipe, the warm start's settings do."""
    import coevolve_lib.engine.warm_start as warmstart
    from coevolve_lib.core.paths import MODELS_DIR
    from coevolve_lib.core.records import config_hash
    from coevolve_lib.envs.appworld.synthetic import builder_version

    root = engine.environment.source_root
    environment = AppWorldEnvironment(run_config("tiny-appworld").data_engine, tmp_path, source_root=root)
    recipe = environment.warm_start_recipe()
    shipped = warmstart.shipped_warm_start("tiny-appworld", config_hash(recipe))
    assert shipped is not None, "the shipped tiny-appworld warm start has another recipe: rebuild and ship it"
    monkeypatch.setattr(warmstart, "CACHE_DIR", tmp_path / "empty_cache")  # a fresh clone
    monkeypatch.setattr("coevolve_lib.envs.appworld.environment.warm_start",
                        lambda *a, **k: pytest.fail("the warm start was built"))
    assert environment.warm_start(str(MODELS_DIR / "tiny")) == str(shipped)
    assert recipe["data"] == {"data": "synthetic world", "builder_version": builder_version()}  # no machine path
    small = run_config("tiny-appworld", SMALL[:-1]).data_engine
    assert AppWorldEnvironment(small, tmp_path / "small", source_root=root).warm_start_recipe() == recipe
    shorter = run_config("tiny-appworld", ["environment.warm_start.max_steps=10"]).data_engine
    assert AppWorldEnvironment(shorter, tmp_path / "other", source_root=root).warm_start_recipe() != recipe


def test_grpo_steps_and_a_feedback_round_on_appworld(engine, world):
    """TRL's GRPO on AppWorld pool tasks with the tiny policy, end to end: 2 steps, a feedback round (its targets:
    the test-only `every_failure` signal), TGC/SGC before and after. The run goes on from the module's D_0, in its
    folder and with its servers (`train(engine=...)`). The policy is the random-init tiny model (no warm start), so
    all rewards are 0 and GRPO's update is zero: this shows the loop, not learning (docs/appworld.md)."""
    out = engine.run_dir
    run = run_config("tiny-appworld", SMALL + [
        "rollout.max_steps_per_episode=1", "rollout.max_new_tokens=64", "training.max_steps=2",
        "training.tasks_per_step=1", "training.draw_factor=1", "training.group_size=2",
        "training.feedback_every=1", "training.eval_limit=1", "training.eval_pool_tasks=1"])
    d0 = [t["task_id"] for t in engine.pool.tasks]
    summary = train(run, out, progress=False, engine=engine)
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/episodes"] == 2 for r in rows)
    assert [r.get("feedback/round") for r in rows] == [1, None]  # none after the last step
    [round_1] = summary["rounds"]
    assert round_1["targets"] == 1 and round_1["signals"]["every_failure"] == 2
    report = json.loads((out / "round_001" / "report.json").read_text())
    assert report["specs"] >= 1 and report["accepted"] >= 1
    pool = TaskPool(out / "pool.jsonl")
    assert [t["task_id"] for t in pool.tasks if t["pool_version"] == 0] == d0  # D_0 was not built again
    added = [t for t in pool.tasks if t["pool_version"] == 1]
    assert len(added) == report["added_to_pool"] == round_1["tasks_added"]
    for task in added:
        assert (engine.environment.root / "data" / "tasks" / task["task_id"] / "ground_truth").is_dir()
    step_records = read_jsonl(out / "rollouts" / "step_00001.jsonl")
    assert {r["task_source"] for r in step_records} == {"pool:0"}
    assert all(r["tool_format"] == "code" and r["num_tests"] >= 1 and r["reward"] == 0.0 for r in step_records)
    before, after = summary["eval_before"], summary["eval_after"]
    assert before["eval/val_n"] == after["eval/val_n"] == 1 and before["eval/d0_n"] == 1
    assert before["eval/val_sgc_n"] == 1
    environment = json.loads((out / "run_config.json").read_text())["environment"]
    assert environment == {"benchmark": "appworld", "data_root": str(world.root), "data": "synthetic world"}
    # a study measures it as any run (notebook 15): D_0's sample and TGC on the dev split, named as the synthetic one's
    study = Study("s", ("table3",), (Variant("coevolve"),))
    measured = measure(study, run, study.variants[0], 0, out)
    assert [(r["eval_set"], r["n"]) for r in measured] == [("pool/d0", 1), ("appworld-synthetic/dev", 1)]


def test_the_evaluate_command_measures_tgc_and_sgc_on_appworld(tmp_path, monkeypatch, capsys):
    """`python -m coevolve_lib evaluate --profile <appworld profile>`: what multi-GPU runs evaluate checkpoints with."""
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)  # the synthetic world
    out = tmp_path / "dev.json"
    assert cli(["evaluate", "--profile", "tiny-appworld", "--limit", "1", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out  # one line per metric: TGC over tasks, SGC over scenarios
    assert ("tiny on appworld-synthetic/dev (n=1, T=0.0): tgc 0.00% (0/1)\n"
            "tiny on appworld-synthetic/dev (n=1, T=0.0): sgc 0.00% (0/1)") in printed
    doc = json.loads(out.read_text())
    rows = {row["metric"]: row for row in doc["metrics"]}
    assert rows["tgc"]["n"] == 1 and rows["sgc"]["n"] == 1 and rows["tgc"]["temperature"] == 0.0
    # a zero-shot evaluation reads the data root itself (no run of its own synthesizes tasks into an overlay)
    assert doc["config"]["root"] == repo_relative(appworld_source_root())


def test_an_llm_abstracted_and_judged_round_on_appworld_replays_from_its_recording(engine, tmp_path):
    """The paper's synthesis on AppWorld (Figs. 12-13: `paper-qwen3-4b-appworld`'s stages) in a whole round: the
    offline explorer re-explores a pool task's start state; the explorer LLM (scripted replies through a real
    OpenAI-compatible server, recorded) abstracts the triplets into a task with its answer rule, AppWorld writes and
    evaluates it, and the LLM judges the execution; a replay of the recording, with no endpoint, writes the same
    round. One scripted text answers both asks: its `<task>` block is the abstraction's reply, its verdict the
    judge's."""
    from coevolve_lib.cli.openai_server import ChatServer, FaultConfig
    from coevolve_lib.core.llm_calls import RecordedChatModel
    from coevolve_lib.core.model_specs import load_chat_model
    from coevolve_lib.core.openai_model import OpenAIChatModel
    from coevolve_lib.engine.feedback import feedback_round

    task = engine.pool.tasks[0]
    answer = task["answer_from"] or "none"
    query = f"Again, step by step: {task['query']}"
    steps = "\n".join(f"{n}. {action}" for n, action in enumerate(task["reference_actions"], 1))
    reply = (f"<task>\nDescription: {task['query'][:60]}\nQuery: {query}\nActionSequence:\n{steps}\n"
             f"Answer: {answer}\nCriterion: AppWorld's tests pass.\n</task>\n"
             "Success: true\nReason: [every call ran and the outcome matches the query]")
    run = run_config("tiny-appworld", SMALL + ["data_engine.explorer_model=openai:tiny",
                                              "data_engine.synthesis.abstraction=llm",
                                              "data_engine.synthesis.judge=true", "data_engine.explore.runs=1",
                                              "data_engine.explore.calls_per_run=3"])
    config = DataEngine(run.data_engine, tmp_path, engine.environment).feedback_config()
    target = engine.pool_target(task)
    recording = tmp_path / "llm_calls.jsonl"

    def pool(name):  # each round commits to a copy of the module's pool
        shutil.copy(engine.pool.path, tmp_path / name)
        return TaskPool(tmp_path / name)

    with ChatServer(load_chat_model("tiny"), faults=FaultConfig(scripted_reply=reply)) as server:
        live = OpenAIChatModel("tiny", base_url=server.base_url, timeout=30)
        recorded = feedback_round(1, tmp_path / "recorded", [target], pool("recorded.jsonl"), config,
                                  engine.environment.round_stages(), RecordedChatModel("tiny", recording, live),
                                  progress=False)
    assert recorded["specs"] == 1 and recorded["accepted"] == 1, recorded
    [verdict] = read_jsonl(tmp_path / "recorded" / "verdicts.jsonl")
    assert verdict["judge"]["success"] and verdict["reason"] == "objective_met" and verdict["cost"]["calls"] == 1
    [spec] = [spec for record in read_jsonl(tmp_path / "recorded" / "abstractions.jsonl") for spec in record["specs"]]
    assert spec["abstraction"] == "llm" and spec["query"] == query and spec["answer_from"] == task["answer_from"]
    assert len(read_jsonl(recording)) == 2  # the abstraction's ask and the judge's
    replayed = feedback_round(1, tmp_path / "replayed", [target], pool("replayed.jsonl"), config,
                              engine.environment.round_stages(), RecordedChatModel("tiny", recording),
                              progress=False)
    written = sorted(path.name for path in (tmp_path / "recorded").iterdir())
    assert "verdicts.jsonl" in written and "report.json" in written
    for name in set(written) - {"timings.json"}:  # a replayed round measures its own wall times
        assert (tmp_path / "replayed" / name).read_text() == (tmp_path / "recorded" / name).read_text(), name
    assert replayed == recorded


class Reflector(ChatModel):
    """Writes the same reflection for every trial: a unit-test stand-in for the reflecting policy."""

    name, native_tools = "scripted-reflector", False

    def generate(self, conversations, tools=None, config=None):
        return [Generation("I completed the task without running its steps; next time I run each step first.", None,
                           20, 12, 0.0, "stop") for _ in conversations]


def test_the_curriculum_and_reflexion_baselines_run_on_appworld(engine):
    """Table 10's curriculum and Reflexion on AppWorld pool tasks and real AppWorld episodes that failed (the agent
    completes each task without doing it): the curriculum ranks the pool by those outcomes and admits the easiest
    share; Reflexion re-poses a failed task with its reflection as a new AppWorld task that AppWorld writes and its
    evaluator accepts, with the source's reference calls and its answer rule (a task that asks for an answer keeps
    asking for it)."""
    from coevolve_lib.core.config import BaselinesConfig
    from coevolve_lib.engine.pool_updates.curriculum import curriculum_round
    from coevolve_lib.engine.pool_updates.reflexion import REFLECTIONS_HEADER, reflexion_round

    d0 = [t for t in engine.pool.tasks if t["pool_version"] == 0]
    answering = [t for t in d0 if t["answer_from"] is not None]
    assert answering, "D_0 has no task that asks for an answer"
    tasks = [answering[0], next(t for t in d0 if t is not answering[0])]
    env_tasks = engine.rollout_tasks(tasks)
    give_up = "```python\napis.supervisor.complete_task()\n```"
    records = run_rollouts(CodeModel(env_tasks, {t["task_id"]: [give_up] for t in tasks}), env_tasks,
                           RolloutPhase(RolloutConfig(batch_size=2, max_steps_per_episode=1)), samples_per_task=1,
                           progress=False, new_episode=engine.environment.new_episode)
    assert [r["success"] for r in records] == [False, False]
    stamp_rollouts(records, 1, tasks)

    settings = BaselinesConfig()
    report = reflexion_round(engine, 5, records[:1], settings, Reflector(), progress=False)  # the answering task's
    assert report["targets"] == 1 and report["accepted"] == 1, report
    [reposed] = [t for t in engine.pool.tasks if t["pool_version"] == 5]
    assert reposed["query"].startswith(tasks[0]["query"]) and REFLECTIONS_HEADER in reposed["query"]
    assert reposed["reference_actions"] == tasks[0]["reference_actions"]
    assert reposed["answer_from"] == tasks[0]["answer_from"] and reposed["provenance"]["verdict"] == "objective_met"
    folder = engine.environment.root / "data" / "tasks" / reposed["task_id"]
    assert json.loads((folder / "specs.json").read_text())["instruction"] == reposed["query"]

    report = curriculum_round(engine, 6, 1, records, 2, settings, minimum=1)
    chosen = json.loads((engine.run_dir / "round_006" / "curriculum.json").read_text())
    assert report["counts"]["tasks_seen"] == 2 and report["counts"]["mean_success"] == 0.0
    assert 1 <= chosen["admitted"] == len(chosen["admitted_ids"]) < len(engine.pool.tasks)
    assert set(chosen["admitted_ids"]) <= set(engine.pool.ids)


def test_rest_replays_a_successful_replys_calls_into_validated_appworld_tasks(engine):
    """Table 10's ReST on AppWorld: a reply that solved a pool task is kept (reward >= 1), the calls its code makes are
    run again from the task's start state (`AppWorldReplay`), abstracted and validated like any round's: the whole
    sequence is the task itself (a duplicate), a shorter window of it a new task unless the pool has it."""
    from coevolve_lib.core.config import BaselinesConfig
    from coevolve_lib.core.environment import binary_reward
    from coevolve_lib.engine.pool_updates.rest import rest_round

    d0 = [t for t in engine.pool.tasks if t["pool_version"] == 0]
    task = max(d0, key=lambda t: len(t["reference_actions"]))
    assert len(task["reference_actions"]) == 4, "D_0 has no 4-call task"
    env_tasks = engine.rollout_tasks([task])
    code = solution_code(task["reference_actions"], engine.environment.api_docs(), task["answer_from"])
    records = run_rollouts(CodeModel(env_tasks, {task["task_id"]: [f"```python\n{code}\n```"]}), env_tasks,
                           RolloutPhase(RolloutConfig(batch_size=1, max_steps_per_episode=1)), samples_per_task=1,
                           progress=False, new_episode=engine.environment.new_episode)
    stamp_rollouts(records, 1, [task])
    for record in records:
        record["reward"] = float(binary_reward(record, task))
    assert [r["reward"] for r in records] == [1.0]

    report = rest_round(engine, 7, records, BaselinesConfig(), progress=False)
    assert report["targets"] == 1 and report["triplets"] == report["valid_triplets"] == 4, report
    explored = list(read_jsonl(engine.run_dir / "round_007" / "explorations.jsonl"))
    assert [t["action"] for e in explored for t in e["triplets"]] == task["reference_actions"]
    # every window of 3-4 calls validates: the ones already in the pool (the task itself at least) are duplicates
    assert report["specs"] >= 1 and set(report["rejection_reasons"]) <= {"duplicate"}, report
    windows = [task["reference_actions"][i:j] for i in range(4) for j in range(i + 3, 5)]
    added = [t for t in engine.pool.tasks if t["pool_version"] == 7]
    assert len(added) == report["accepted"] and all(t["reference_actions"] in windows for t in added)
