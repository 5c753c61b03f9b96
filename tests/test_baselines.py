"""The Table 10 baselines (`training.pool_updates`: curriculum, rest, reflexion; coevolve_lib/engine/pool_updates/):
the selection and filtering logic on hand-made rollouts, then one real 2-step run of each on the tiny profile (real BFCL
environments, real TRL GRPO steps, real validation; no mocks), checked against the rollouts it recorded."""

import json
from collections import Counter

import pytest
from helpers import BFCL, small_run

import coevolve_lib.training.loop as train_lib
from coevolve_lib.core.config import BaselinesConfig
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.engine.pool_updates import curriculum, reflexion, rest
from coevolve_lib.profiles import ConfigError, run_config


def rollout(task_id, step, sample, success=False, reward=None, calls=(), observations=None, terminated="completed",
            error_message="Model instance does not match the state of ground truth: expected 'secret.txt'"):
    observations = list(observations) if observations is not None else ["ok"] * len(calls)
    return {"task_id": task_id, "step": step, "sample_index": sample, "rollout_id": f"{step}/{task_id}/{sample}",
            "success": success, "score": float(success), "reward": float(success) if reward is None else reward,
            "steps": [{"turn": 0, "step": i, "calls": [c], "observations": [o]}
                      for i, (c, o) in enumerate(zip(calls, observations))],
            "messages": [{"role": "assistant", "content": "I will not call anything"}],
            "terminated": terminated, "error_message": error_message}


def task(task_id, calls=3, query="Do it.", **provenance):
    return {"task_id": task_id, "query": query, "intent": "x", "initial_config": {}, "involved_classes": [],
            "data_version": "v3", "reference_actions": ["pwd()"] * calls, "completion_criterion": "c",
            "pool_version": 0, "provenance": provenance}


# ---------------------------------------------------------------------------------------------- curriculum (unit)

def test_competence_grows_linearly_from_c0_to_the_whole_pool():
    assert curriculum.competence(0, 10, 0.25) == 0.25
    assert curriculum.competence(5, 10, 0.25) == 0.625
    assert curriculum.competence(10, 10, 0.25) == 1.0 and curriculum.competence(12, 10, 0.25) == 1.0


def test_curriculum_ranks_by_shrunk_success_then_length_and_admits_the_easiest_share():
    tasks = [task("a", 3), task("b", 4), task("c", 3), task("d", 4), task("e", 3), task("f", 3)]
    records = ([rollout("a", 1, i, success=i < 6) for i in range(8)]  # 6/8
               + [rollout("b", 1, 0, success=True)]  # 1/1: shrunk towards the mean, below a's 6/8
               + [rollout("c", 1, i) for i in range(8)])  # 0/8: hardest
    counts = curriculum.success_counts(records)
    assert counts == {"a": (6, 8), "b": (1, 1), "c": (0, 8)}
    selection = curriculum.curriculum_selection(tasks, counts, share=0.5, prior=4.0, minimum=2)
    mean = 7 / 17
    estimates = {r["task_id"]: r["estimate"] for r in selection["ranking"]}
    assert estimates["a"] == pytest.approx((6 + 4 * mean) / 12, abs=1e-6)
    assert estimates["b"] == pytest.approx((1 + 4 * mean) / 5, abs=1e-6)
    assert estimates["d"] == estimates["e"] == estimates["f"] == pytest.approx(mean, abs=1e-6)  # never drawn
    # a (0.64) > b (0.53) > the unseen at the mean (0.41; 3 calls before 4, then by id) > c (0.14)
    assert [r["task_id"] for r in selection["ranking"]] == ["a", "b", "e", "f", "d", "c"]
    assert selection["admitted_ids"] == ["a", "b", "e"] and selection["admitted"] == 3
    # at least `minimum` (a step's tasks), at most the pool; no prior: the raw rate (b's 1/1 first)
    assert curriculum.curriculum_selection(tasks, counts, 0.1, 4.0, minimum=2)["admitted_ids"] == ["a", "b"]
    assert curriculum.curriculum_selection(tasks, counts, 1.0, 4.0, minimum=9)["admitted"] == 6
    assert curriculum.curriculum_selection(tasks, counts, 0.5, 0.0, 2)["admitted_ids"][:2] == ["b", "a"]
    # before any outcome: every estimate is 0, so the shortest tasks come first
    first = curriculum.curriculum_selection(tasks, {}, 0.5, 4.0, 2)
    assert first["admitted_ids"] == ["a", "c", "e"] and first["mean_success"] == 0.0


def test_pool_sampling_draws_only_among_the_admitted_ids(tmp_path):
    pool = TaskPool(tmp_path / "pool.jsonl")
    pool.add_round([task(f"t{i}") for i in range(10)], 0)
    for seed in range(20):
        assert {t["task_id"] for t in pool.sample(3, seed, versions={0}, ids={"t1", "t4", "t7", "t9"})} \
            <= {"t1", "t4", "t7", "t9"}
    drawn = pool.sample(4, 0, ids={"t2"})  # fewer candidates than draws: with replacement
    assert [t["task_id"] for t in drawn] == ["t2"] * 4
    assert pool.sample(2, 0, ids=set()) == []


# ---------------------------------------------------------------------------------------------- ReST (unit)

def test_rest_keeps_rollouts_over_the_threshold_one_per_call_sequence_round_robin_over_tasks():
    records = [
        rollout("a", 1, 0, True, calls=["ls()", "pwd()"]),
        rollout("a", 1, 1, True, calls=["ls()", "pwd()"]),  # same calls as sample 0: one trajectory
        rollout("a", 2, 0, True, calls=["pwd()", "ls()"]),
        rollout("a", 2, 1, True, calls=["pwd()", "ls()", "pwd()"]),
        rollout("b", 1, 0, True, calls=["cd(folder='x')"]),
        rollout("b", 1, 1, False, reward=0.4, calls=["cd(folder='y')"]),  # under the threshold
        rollout("c", 1, 0, True, calls=[]),  # no call executed: nothing to learn from
        rollout("gone", 1, 0, True, calls=["ls()"]),  # not a pool task
    ]
    pool = {"a", "b", "c"}
    kept = rest.rest_filter(records, 1.0, pool, None, seed=0)
    assert sorted(r["rollout_id"] for r in kept) == ["1/a/0", "1/b/0", "2/a/0", "2/a/1"]
    two = rest.rest_filter(records, 1.0, pool, 2, seed=0)
    assert sorted(r["task_id"] for r in two) == ["a", "b"]  # round-robin: both tasks before a second of a
    assert [r["rollout_id"] for r in two] == [r["rollout_id"] for r in rest.rest_filter(records, 1.0, pool, 2, 0)]
    lower = rest.rest_filter(records, 0.4, pool, None, seed=0)
    assert "1/b/1" in {r["rollout_id"] for r in lower}


def test_rest_triplets_are_the_trajectorys_own_calls():
    record = rollout("a", 3, 1, True, calls=["mkdir(dir_name='x')", "cd(folder='nope')", "ls()"],
                     observations=["None", '{"error": "cd: nope: No such directory"}',
                                   '{"current_directory_content": ["x"]}'])
    target = ExplorationTarget.from_pool_task(task("a"), BFCL, rest.rest_marker(record), record)
    context, triplets, cost = rest.trajectory_triplets(target)
    assert context is None and cost["calls"] == 0
    assert [(t["action"], t["valid"]) for t in triplets] == [("mkdir(dir_name='x')", True),
                                                            ("cd(folder='nope')", False), ("ls()", True)]
    assert {t["signal_id"] for t in triplets} == {"rest/3/a/1"} and {t["run_id"] for t in triplets} == {"rest/3/a/1"}


# ---------------------------------------------------------------------------------------------- Reflexion (unit)

def test_reflexion_reflects_on_each_failed_tasks_latest_failure_within_the_budget():
    records = [rollout("a", 1, 0), rollout("a", 2, 3), rollout("a", 2, 1), rollout("a", 2, 0, success=True),
               rollout("b", 1, 0, success=True), rollout("c", 2, 0), rollout("gone", 2, 0)]
    chosen = reflexion.reflexion_targets(records, {"a", "b", "c"}, None, seed=0)
    assert sorted(chosen) == ["2/a/1", "2/c/0"]  # b never failed; a: step 2, lowest failed sample
    assert len(reflexion.reflexion_targets(records, {"a", "b", "c"}, 1, seed=0)) == 1


def test_a_reposed_task_keeps_its_base_query_and_the_last_reflections():
    original = task("a", query="Make folder 'x'.")
    record = rollout("a", 1, 0)
    first = reflexion.reflexion_spec(original, "Plan: call mkdir first.", record, memory=2)
    assert first["query"] == ("Make folder 'x'.\n\n" + reflexion.REFLECTIONS_HEADER + "\n1. Plan: call mkdir first.")
    assert first["action_sequence"] == original["reference_actions"] and first["initial_config"] == {}
    assert first["source"] == {"task_id": "a", "signal_id": "reflexion/1/a/0", "signal_type": "reflexion",
                               "context_id": None, "run_ids": ["1/a/0"]}
    reposed = {**task("r1", query=first["query"]), "provenance": {"reflexion": first["reflexion"]}}
    second = reflexion.reflexion_spec(reposed, "Plan: two.", rollout("r1", 2, 0), memory=2)
    third = reflexion.reflexion_spec({**reposed, "provenance": {"reflexion": second["reflexion"]}}, "Plan: three.",
                                     rollout("r1", 3, 0), memory=2)
    assert second["reflexion"]["reflections"] == ["Plan: call mkdir first.", "Plan: two."]
    assert third["reflexion"] == {"base_query": "Make folder 'x'.", "reflections": ["Plan: two.", "Plan: three."]}
    assert third["query"].count(reflexion.REFLECTIONS_HEADER) == 1 and third["spec_id"] != second["spec_id"]


def test_the_reflection_prompt_shows_the_trial_but_not_the_checkers_answer():
    record = rollout("a", 1, 0, calls=["cd(folder='docs')"], observations=['{"error": "cd: docs: No such directory"}'],
                     terminated="episode_step_cap")
    prompt = reflexion.reflection_prompt(task("a", query="Open docs."), record)
    assert "Task: Open docs." in prompt and "cd(folder='docs')" in prompt and "No such directory" in prompt
    assert "too many steps" in prompt and "(none)" in prompt
    assert "ground truth" not in prompt and "secret.txt" not in prompt  # the checker's message would leak the answer
    silent = reflexion.reflection_prompt(task("a"), rollout("a", 1, 0))
    assert "no function call was made" in silent and "I will not call anything" in silent
    assert reflexion.clean_reflection("  Plan:\n\n do   this\tthen that ", 100) == "Plan: do this then that"
    assert reflexion.clean_reflection("one two three", 9) == "one two" and reflexion.clean_reflection(" \n ", 9) == ""


def test_configs_reject_a_policy_reflector_over_processes_and_an_explorer_reflector_without_a_model():
    with pytest.raises(ConfigError, match="single-process only"):
        run_config("tiny", ["training.pool_updates=reflexion", "training.launch.num_processes=2"])
    with pytest.raises(ConfigError, match="needs data_engine.explorer_model"):
        run_config("tiny", ["training.pool_updates=reflexion", "training.baselines.reflexion_reflector=explorer"])
    with pytest.raises(ConfigError, match="rest_threshold"):
        run_config("tiny", ["training.baselines.rest_threshold=0"])
    assert run_config("tiny", ["training.pool_updates=curriculum"]).training.baselines == BaselinesConfig()


# ---------------------------------------------------------------------------------------------- real 2-step runs

SMOKE = {
    "environment": {"warm_start": {"enabled": False}},
    "data_engine": {"d0_size": 8, "max_targets": 2,
                    "explore": {"runs": 1, "calls_per_run": 4},
                    "heldout": {"new_tasks": {"size": 0}, "new_envs": {"size": 0}}},
    "rollout": {"max_new_tokens": 12, "max_steps_per_episode": 2, "tool_docs": "none"},
    "training": {"max_steps": 3, "tasks_per_step": 2, "group_size": 2, "feedback_every": 1, "draw_factor": 1,
                 "max_completion_tokens": 64,  # rounds after steps 1 and 2, none after the last
                 "eval_limit": 0, "eval_pool_tasks": 0, "learning_rate": 1e-3,
                 "torch_threads": 1},  # one thread: on 2 shared cores two threads made a step 5x slower
}


class Killed(BaseException):
    """Stands for the process dying: a BaseException, as KeyboardInterrupt is (the kit contains what an environment
    raises, never a kill)."""


def _run(tmp_path, name, **extra):
    return small_run(SMOKE, tmp_path, name, **extra)


def _rollouts(out, step):
    return read_jsonl(out / "rollouts" / f"step_{step:05d}.jsonl")


def test_curriculum_run_draws_only_admitted_tasks_and_resumes_with_them(tmp_path, monkeypatch):
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "curriculum"})
    real_round = curriculum.curriculum_round

    def die_at_round_2(engine, round_index, *args, **kwargs):
        if round_index == 2:
            raise Killed
        return real_round(engine, round_index, *args, **kwargs)

    monkeypatch.setattr(curriculum, "curriculum_round", die_at_round_2)
    with pytest.raises(Killed):
        train_lib.train(run, out, progress=False)
    killed_step_2 = [r["task_id"] for r in _rollouts(out, 2)]
    monkeypatch.setattr(curriculum, "curriculum_round", real_round)
    summary = train_lib.train(run, out, progress=False)  # resumes from checkpoint-1: step 2 and round 2 again

    pool = TaskPool(out / "pool.jsonl")
    assert len(pool) == 8 and pool.version == 2  # no new tasks; the rounds are committed
    selections = [json.loads((out / f"round_{k:03d}" / "curriculum.json").read_text()) for k in (0, 1, 2)]
    assert [s["competence"] for s in selections] == [0.25, 0.5, 0.75]  # c(t) = 0.25 + 0.75 t / 3
    assert [s["admitted"] for s in selections] == [2, 4, 6]  # max(2 tasks a step, ceil(c * 8))
    for step, selection in enumerate(selections, 1):  # step k draws from round k-1's selection
        assert {r["task_id"] for r in _rollouts(out, step)} <= set(selection["admitted_ids"])
    assert [r["task_id"] for r in _rollouts(out, 2)] == killed_step_2  # the resumed run drew the same tasks
    # round 1 ranked on exactly what step 1 recorded
    counts = curriculum.success_counts(_rollouts(out, 1))
    assert {r["task_id"]: (r["successes"], r["episodes"]) for r in selections[1]["ranking"] if r["episodes"]} == counts
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["pool/admitted"] for r in rows] == [2, 4, 6]
    assert [r["counts"]["admitted"] for r in summary["rounds"]] == [4, 6]
    assert summary["pool_updates"] == "curriculum" and all(r["tasks_added"] == 0 for r in summary["rounds"])


def test_a_rest_round_abstracts_rewarded_trajectories_into_validated_tasks(tmp_path):
    """A real round (real D_0, BFCL executions, deterministic abstraction, validation) on hand-made trajectories whose
    observations come from executing their calls: no model."""
    from coevolve_lib.engine.data_engine import DataEngine
    from coevolve_lib.envs.bfcl.validation import replay

    run, out = _run(tmp_path, "run")
    engine = DataEngine(run.data_engine, out, "bfcl")
    engine.initial_pool(progress=False)
    source = engine.pool.tasks[0]

    def executed(rollout_id, calls, reward):
        _, observations, _, _ = replay(source, calls)
        step, _, sample = rollout_id.partition("/x/")
        record = rollout(source["task_id"], int(step), int(sample), success=reward == 1.0, reward=reward,
                         calls=calls, observations=observations)
        return {**record, "rollout_id": rollout_id}

    other = ["pwd()", "mkdir(dir_name='rest_made_dir')", "cd(folder='rest_made_dir')", "ls()"]
    records = [executed("1/x/0", list(source["reference_actions"]), 1.0),  # the reference itself: a duplicate
               executed("1/x/1", other, 1.0),  # the policy's own different solution: a new task
               executed("1/x/2", ["pwd()", "mkdir(dir_name='too_low')", "ls()"], 0.0)]  # under the threshold
    report = rest.rest_round(engine, 1, records, BaselinesConfig(), progress=False)
    assert report["targets"] == 2 and report["rejection_reasons"] == {"duplicate": 1} and report["added_to_pool"] == 1
    assert report["counts"] == {"window_rollouts": 3, "filtered_rollouts": 2, "filtered_tasks": 1,
                                "trajectories_used": 2, "threshold": 1.0}
    [new] = [t for t in engine.pool.tasks if t["pool_version"] == 1]
    assert new["reference_actions"] == other and new["provenance"]["runs"] == ["rest/1/x/1"]
    assert new["provenance"]["origin_task"] == source["task_id"] and new["provenance"]["signal_type"] == "rest"
    assert new["initial_config"] == source["initial_config"] and "rest_made_dir" in new["query"]
    again = rest.rest_round(engine, 1, [], BaselinesConfig(), progress=False)  # a finished round is read back
    assert again == json.loads((out / "round_001" / "report.json").read_text()) and len(engine.pool) == 9


@pytest.mark.paper  # 45 s: `make test-paper` (the Makefile's TESTS_AFTER_NOTEBOOKS note)
def test_rest_run_filters_the_policys_own_rollouts(tmp_path):
    # The warm-started tiny policy (shipped): a random-init one never succeeds, and ReST keeps successes only.
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "rest", "environment.warm_start.enabled": True,
                                        "rollout.max_new_tokens": 64, "rollout.max_steps_per_episode": 8,
                                        "training.max_completion_tokens": 512, "training.tasks_per_step": 8,
                                        "training.group_size": 8, "data_engine.d0_size": 100,
                                        "data_engine.explore.runs": 8})  # the profile's D_0 (91 tasks)
    summary = train_lib.train(run, out, progress=False)
    pool = TaskPool(out / "pool.jsonl")
    origin = {t["task_id"]: t for t in pool.tasks if t["pool_version"] == 0}
    used = 0
    for round_index in (1, 2):
        window = _rollouts(out, round_index)
        round_dir = out / f"round_{round_index:03d}"
        report = json.loads((round_dir / "report.json").read_text())
        passed = [r for r in window if r["reward"] >= 1.0]
        assert report["counts"]["filtered_rollouts"] == len(passed) and report["counts"]["window_rollouts"] == 64
        targets = json.loads((round_dir / "targets.json").read_text())
        assert set(targets) <= {r["rollout_id"] for r in passed} and len(targets) == min(2, len(
            {(r["task_id"], tuple(c for s in r["steps"] for c in s["calls"])) for r in passed}))
        assert report["targets"] == len(targets) and report["specs"] == report["added_to_pool"] + sum(
            report["rejection_reasons"].values())
        verdicts = {v["spec_id"]: v for v in read_jsonl(round_dir / "verdicts.jsonl")}
        by_id = {r["rollout_id"]: r for r in window}
        for target in targets:  # a solution equal to its task's reference abstracts to that task: a duplicate
            record = by_id[target]
            executed = [parse_call(c).to_source() for s in record["steps"] for c in s["calls"]]
            if record["task_id"] in origin and executed == origin[record["task_id"]]["reference_actions"]:
                assert verdicts[record["task_id"]]["reason"] == "duplicate"
        for new in (t for t in pool.tasks if t["pool_version"] == round_index):
            [run_id] = new["provenance"]["runs"]
            record = by_id[run_id.removeprefix("rest/")]
            executed = [parse_call(c).to_source() for s in record["steps"] for c in s["calls"]]
            size = len(new["reference_actions"])
            assert any(executed[i:i + size] == new["reference_actions"] for i in range(len(executed)))
        used += len(targets)
    assert used, "this seed's warm-started policy solves a task in the first steps"
    assert [r["counts"]["filtered_rollouts"] for r in summary["rounds"]] == [
        json.loads((out / f"round_00{k}" / "report.json").read_text())["counts"]["filtered_rollouts"] for k in (1, 2)]
    assert summary["pool_size_end"] == len(pool)


def test_reflexion_run_reposes_failed_tasks_with_the_policys_reflection(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "reflexion",
                                        "training.baselines.reflexion_max_new_tokens": 80})
    summary = train_lib.train(run, out, progress=False)
    pool = TaskPool(out / "pool.jsonl")
    tasks = {t["task_id"]: t for t in pool.tasks}
    for round_index in (1, 2):
        window = _rollouts(out, round_index)
        failed = {r["task_id"] for r in window if not r["success"]}
        report = json.loads((out / f"round_{round_index:03d}" / "report.json").read_text())
        assert report["targets"] == min(2, len(failed)) and report["counts"]["failed_tasks"] == len(failed)
        assert report["heldout_leaks"] == report["rejection_reasons"].get("heldout_leak", 0)  # every round counts them
        reflections = {r["key"]: r for r in read_jsonl(out / f"round_{round_index:03d}" / "reflections.jsonl")}
        assert all(r["reflector"] == f"tiny@step{round_index}" for r in reflections.values())
        added = [t for t in pool.tasks if t["pool_version"] == round_index]
        assert len(added) == report["added_to_pool"] == report["accepted"]
        assert len(added) + sum(report["rejection_reasons"].values()) == report["targets"]
        for new in added:
            memory = new["provenance"]["reflexion"]
            origin = tasks[new["provenance"]["origin_task"]]
            trial = next(r for r in window if r["rollout_id"] == memory["rollout_id"])
            assert not trial["success"] and trial["task_id"] == origin["task_id"]
            assert memory["reflections"][-1] == reflections[memory["rollout_id"]]["reflection"] != ""
            assert new["query"] == reflexion.reposed_query(memory["base_query"], memory["reflections"])
            assert (new["initial_config"], new["reference_actions"]) == (origin["initial_config"],
                                                                        origin["reference_actions"])
            assert new["provenance"]["verdict"] == "objective_met"
    assert len(pool) > 8 and summary["pool_size_end"] == len(pool)
    assert Counter(r.get("counts", {}).get("reflections", 0) > 0 for r in summary["rounds"]) == Counter({True: 2})


def test_every_pool_update_of_the_kit_is_registered_and_a_profile_can_name_each():
    from coevolve_lib.engine.pool_updates import POOL_UPDATES

    assert sorted(POOL_UPDATES) == ["curriculum", "none", "random", "reflexion", "rest", "signals"]
    for name in POOL_UPDATES:
        assert run_config("tiny", {"training": {"pool_updates": name}}).training.pool_updates == name
    with pytest.raises(ConfigError, match="training.pool_updates: unknown pool update 'sgnals'; registered: "):
        run_config("tiny", {"training": {"pool_updates": "sgnals"}})
    assert [name for name, update in POOL_UPDATES.items() if not update.has_rounds] == ["none"]
