"""Signal extraction on hand-built rollout histories with known answers, and on real BFCL ground-truth calls."""

import json
import logging
import random
from collections import Counter, deque

import pytest

from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.engine.data_engine import stamp_rollouts
from coevolve_lib.engine.signals import (
    SIGNALS,
    Signal,
    SignalConfig,
    SignalExtractor,
    action_names,
    action_patterns,
    register,
    rollout_id,
)
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.studies.report import rollout_steps


def rollout(task, score, sample=0, calls=("ls()",), classes=("A",), step=0):
    """A minimal training rollout record: one step holding `calls` (no step at all without calls)."""
    steps = [{"turn": 0, "step": 0, "calls": list(calls), "observations": [], "rejected": []}] if calls else []
    return {"schema": "rollout/v1", "task_id": task, "sample_index": sample, "score": score, "step": step,
            "rollout_id": f"{step}/{task}/{sample}", "involved_classes": list(classes), "steps": steps}


def group(task, scores, step=0, **kwargs):
    return [rollout(task, s, sample=i, step=step, **kwargs) for i, s in enumerate(scores)]


def only(kind, **config):
    return SignalExtractor(SignalConfig(enabled=(kind,), **config))


LITERAL = {"rare_rule": "pattern", "rare_min_tasks": 1}
"""The paper's literal rare rule (c_p / N < theta / 100 and c_p > 0), which the rare cases below written before the
`tail` rule and the recurrence condition check (2026-12-04)."""


def fired(records):
    return sorted(r["rollout_id"] for r in records)


# ---- helpers --------------------------------------------------------------------------------------------------

def test_rollout_id_and_action_names():
    record = {"task_id": "t", "step": 3, "sample_index": 2,
              "steps": [{"calls": ["cd(folder='x')", "ls(a=True)"]}, {"calls": []}, {"calls": ["mv(source='(a')"]}]}
    assert rollout_id(record) == "3/t/2"
    assert rollout_id({"task_id": "t"}) == "0/t/0"
    assert rollout_id({**record, "rollout_id": "given"}) == "given"
    assert action_names(record) == ["cd", "ls", "mv"]
    assert action_patterns(record, "bigram") == ["cd>ls", "ls>mv"]
    assert action_patterns(record, "sequence") == ["cd>ls>mv"]
    assert action_patterns(record, "set") == ["cd,ls,mv"]
    assert action_patterns({"steps": [{"calls": ["cd(folder='x')"]}]}) == ["cd"]  # one call: a unigram
    assert action_patterns({"steps": []}) == []


def test_config_rejects_bad_values():
    for bad in ({"forgetting_key": "class"}, {"rare_pattern": "trigram"}, {"rare_theta": 0},
                {"rare_theta": 100}, {"forgetting_window": 0}):
        with pytest.raises(ValueError):
            SignalConfig(**bad)
    assert SignalConfig(enabled=["rare"]).enabled == ("rare",)


# ---- forgetting ---------------------------------------------------------------------------------------------

def test_forgetting_fires_on_a_failure_after_an_earlier_success():
    extractor = only("forgetting")
    assert extractor.observe(0, group("t", [1, 0], step=0)) == []  # first visit: empty window, and same-step mix
    records = extractor.observe(1, group("t", [0, 1, 0], step=1) + group("u", [0], step=1))
    assert fired(records) == ["1/t/0", "1/t/2"]
    assert records[0]["evidence"] == {"key": "t", "window": [1, 0], "score": 0}
    assert records[0]["signal_id"] == "forgetting/1/t/0" and records[0]["schema"] == "signal/v1"
    assert records[0]["type"] == "forgetting" and records[0]["step"] == 1 and records[0]["task_id"] == "t"


def test_forgetting_threshold_is_inclusive_for_the_window_and_the_current_score():
    extractor = only("forgetting")
    extractor.observe(0, group("t", [0.5]))
    assert fired(extractor.observe(1, group("t", [0.5, 0.49], step=1))) == ["1/t/1"]  # 0.5 solved; 0.5 is no failure


def test_forgetting_window_drops_old_successes():
    extractor = only("forgetting", forgetting_window=2)
    extractor.observe(0, group("t", [1]))
    assert fired(extractor.observe(1, group("t", [0, 0, 0], step=1))) == ["1/t/0", "1/t/1", "1/t/2"]
    assert extractor.observe(2, group("t", [0], step=2)) == []  # the window now holds the last two failures
    assert extractor.signals["forgetting"].windows["t"] == deque([0, 0], maxlen=2)


def test_forgetting_per_task_type():
    history = [group("a", [1], step=0, classes=("TwitterAPI", "GorillaFileSystem")),
               group("b", [0], step=1, classes=("GorillaFileSystem", "TwitterAPI"))]
    per_task, per_type = only("forgetting"), only("forgetting", forgetting_key="task_type")
    assert [per_task.observe(i, rollouts) for i, rollouts in enumerate(history)] == [[], []]
    per_type.observe(0, history[0])
    (record,) = per_type.observe(1, history[1])
    assert record["evidence"]["key"] == "GorillaFileSystem+TwitterAPI" and record["task_id"] == "b"


# ---- boundary -----------------------------------------------------------------------------------------------

def test_boundary_marks_every_sample_of_a_mixed_group():
    rollouts = (group("mixed", [1, 0, 0]) + group("solved", [1, 1]) + group("half_low", [0.5, 0])
                + group("half_high", [0.5, 1]) + group("graded", [0.6, 0.4]) + group("k1_pass", [1])
                + group("k1_fail", [0]))
    records = only("boundary").observe(0, rollouts)
    # 0.5 counts as solved (as in forgetting), so [0.5, 0] is mixed and [0.5, 1] is all solved.
    assert fired(records) == ["0/graded/0", "0/graded/1", "0/half_low/0", "0/half_low/1",
                              "0/mixed/0", "0/mixed/1", "0/mixed/2"]
    assert records[0]["evidence"] == {"group_scores": [1, 0, 0], "solved": 1}
    assert fired(only("boundary", success_threshold=0.7).observe(0, group("graded", [0.6, 0.4]))) == []
    # the evidence counts the solved samples at the run's threshold, and the explorer's context reads that count
    (strict, _, _) = only("boundary", success_threshold=0.7).observe(0, group("graded", [0.8, 0.6, 0.4]))
    assert strict["evidence"]["solved"] == 1
    assert SIGNALS["boundary"].describe(strict["evidence"]).startswith("Under one policy, 1 of 3 sampled rollouts")


def test_one_task_drawn_twice_in_a_step_is_two_groups():
    pool_task = {"task_id": "t", "involved_classes": ["A"], "pool_version": 0}
    records = [{"task_id": "t", "sample_index": i % 2, "score": s, "steps": []} for i, s in enumerate([1, 1, 0, 0])]
    stamp_rollouts(records, 3, [pool_task, pool_task])
    assert [r["group_id"] for r in records] == ["3/t", "3/t", "3/t#2", "3/t#2"]  # a first draw keeps its old id
    assert len({r["rollout_id"] for r in records}) == 4
    assert only("boundary").observe(3, records) == []  # [1, 1] and [0, 0]: no group is mixed
    records[1]["score"] = 0
    assert fired(only("boundary").observe(3, records)) == ["3/t/0", "3/t/1"]
    # Another process drew `t` earlier in the same step: this process's draws are the 2nd and 3rd groups.
    stamp_rollouts(records, 3, [pool_task, pool_task], drawn_before=["u", "t"])
    assert [r["group_id"] for r in records] == ["3/t#2", "3/t#2", "3/t#3", "3/t#3"]


# ---- rare ---------------------------------------------------------------------------------------------------

def test_rare_waits_for_n_min():
    extractor = only("rare", rare_theta=20, rare_min_total=12, **LITERAL)
    step0 = [rollout(f"t{i}", 1, calls=["a()"]) for i in range(10)] + [rollout("odd", 0, calls=["b()"])]
    assert extractor.observe(0, step0) == []  # N = 11 < N_min although b is at 1/11 < 20%
    (record,) = extractor.observe(1, [rollout("odd", 0, calls=["b()"], step=1)])
    assert record["evidence"] == {"patterns": [{"pattern": "b", "count": 2}], "total": 12, "theta": 20}


def test_rare_frequency_exactly_at_theta_does_not_fire():
    at_threshold = [rollout(f"t{i}", 1, calls=["a()"]) for i in range(9)] + [rollout("odd", 0, calls=["b()"])]
    assert only("rare", rare_theta=10, rare_min_total=10, **LITERAL).observe(0, at_threshold) == []  # 1/10 == 10%
    below = at_threshold + [rollout("t9", 1, calls=["a()"])]
    assert fired(only("rare", rare_theta=10, rare_min_total=10, **LITERAL).observe(0, below)) == ["0/odd/0"]  # 1/11


def test_rare_counts_distinct_patterns_per_rollout_and_accumulates():
    extractor = only("rare", rare_theta=30, rare_min_total=1, **LITERAL)
    looping = rollout("loop", 0, calls=["cd()", "ls()", "cd()", "ls()", "cd()"])  # cd>ls and ls>cd, once each
    common = [rollout(f"c{i}", 1, calls=["cd()", "ls()"]) for i in range(3)]
    silent = rollout("silent", 0, calls=())
    records = extractor.observe(0, [looping, *common, silent])
    state = extractor.state_dict()["signals"]["rare"]
    assert state == {"counts": {"cd>ls": 4, "ls>cd": 1}, "total": 5,
                     "tasks": {"cd>ls": ["loop"], "ls>cd": ["loop"]}}  # the first distinct tasks, min_tasks at most
    (record,) = records  # ls>cd: 1/5 < 30%; cd>ls: 4/5; no calls, no patterns
    assert record["rollout_id"] == "0/loop/0"
    assert record["evidence"]["patterns"] == [{"pattern": "ls>cd", "count": 1}]
    # Counts are cumulative: ls>cd becomes common once it keeps recurring.
    assert extractor.observe(1, [rollout(f"r{i}", 1, calls=["ls()", "cd()"], step=1) for i in range(3)]) == []


def test_rare_needs_the_pattern_in_several_tasks():
    """The recurrence condition counts distinct tasks: K samples of one task that share a pattern are one situation."""
    extractor = only("rare", rare_rule="pattern", rare_theta=20, rare_min_total=1, rare_min_tasks=3)
    common = [rollout(f"c{i}", 1, calls=["a()"]) for i in range(40)]
    assert extractor.observe(0, common + [rollout("odd", 0, sample=k, calls=["b()"]) for k in range(4)]) == []
    assert extractor.observe(1, [rollout("odd2", 0, calls=["b()"], step=1)]) == []  # b in 2 tasks
    (record,) = extractor.observe(2, [rollout("odd3", 0, calls=["b()"], step=2)])  # 3 tasks: b is rare
    assert record["evidence"]["patterns"] == [{"pattern": "b", "count": 6}]


def test_rare_tail_takes_the_rarest_count_levels_whole():
    """`tail`: the least frequent recurring patterns whose occurrences together stay under theta % of N."""
    def rollouts(theta):
        extractor = only("rare", rare_theta=theta, rare_min_total=1, rare_min_tasks=1)
        records = ([rollout(f"a{i}", 1, calls=["a()"]) for i in range(20)]
                   + [rollout(f"{p}{i}", 0, calls=[f"{p}()"]) for p, n in (("b", 3), ("c", 3), ("d", 4))
                      for i in range(n)])  # N = 30: a 20, d 4, b and c 3 each
        return sorted({p["pattern"] for r in extractor.observe(0, records) for p in r["evidence"]["patterns"]})

    assert rollouts(25) == ["b", "c"]  # b + c = 6 < 7.5; with d 10 >= 7.5
    assert rollouts(40) == ["b", "c", "d"]  # 10 < 12; with a 30
    assert rollouts(15) == []  # the level of 3 holds 6 >= 4.5: b and c are equally rare, neither is taken alone


def test_rare_pattern_kinds():
    rollouts = [rollout(f"t{i}", 1, calls=["a()", "b()", "c()"]) for i in range(5)]
    rollouts.append(rollout("odd", 0, calls=["c()", "b()", "a()"]))
    assert fired(only("rare", rare_pattern="sequence", rare_theta=20, rare_min_total=1,
                      **LITERAL).observe(0, rollouts)) == ["0/odd/0"]
    assert only("rare", rare_pattern="set", rare_theta=20, rare_min_total=1, **LITERAL).observe(0, rollouts) == []


# ---- compositional (the example extra signal) ----------------------------------------------------------------

def test_compositional_needs_each_class_solved_alone():
    extractor = only("compositional", compositional_window=3)
    singles = group("fs", [1, 1, 0], classes=("FS",)) + group("tw", [1, 0], classes=("TW",))
    both = group("fs+tw", [0, 1], classes=("TW", "FS"))
    records = extractor.observe(0, singles + both + group("fs+math", [0], classes=("FS", "Math")))
    assert fired(records) == ["0/fs+tw/0"]  # Math was never seen alone; a success never fires
    assert records[0]["evidence"] == {"classes": ["FS", "TW"], "score": 0,
                                      "single_class_rates": {"FS": 2 / 3, "TW": 0.5}}
    assert fired(extractor.observe(2, group("fs+tw", [0], step=2, classes=("FS", "TW")))) == ["2/fs+tw/0"]
    assert extractor.observe(3, group("fs+tw", [0], step=3, classes=("FS", "TW"))) == []  # step 0 left the window
    assert extractor.observe(4, group("tw", [0, 0], step=4, classes=("TW",))
                             + group("fs", [1], step=4, classes=("FS",))
                             + group("fs+tw", [0], step=4, classes=("FS", "TW"))) == []  # TW now fails alone


def test_compositional_is_off_by_default():
    assert "compositional" in SIGNALS and "compositional" not in SignalConfig().enabled


# ---- extractor ----------------------------------------------------------------------------------------------

def test_one_trajectory_carries_several_types():
    extractor = SignalExtractor(SignalConfig(enabled=("forgetting", "boundary", "rare", "compositional"),
                                             rare_theta=50, rare_min_total=1, **LITERAL))
    extractor.observe(0, group("t", [1], calls=["a()"], classes=("A", "B")) + group("a", [1], classes=("A",))
                      + group("b", [1], classes=("B",)))
    records = extractor.observe(1, group("t", [0, 1], step=1, calls=["z()"], classes=("A", "B")))
    by_rollout = Counter(r["rollout_id"] for r in records)
    assert sorted(r["type"] for r in records if r["rollout_id"] == "1/t/0") == [
        "boundary", "compositional", "forgetting", "rare"]
    assert by_rollout == {"1/t/0": 4, "1/t/1": 2}  # the success: boundary and rare only
    assert len({r["signal_id"] for r in records}) == len(records)


class LongEpisode(Signal):
    """A user-defined type for the registry test: failures with more than two calls."""

    type = "test_long"

    def observe(self, step, rollouts):
        return [self.fire(r, step, {"calls": len(action_names(r))})
                for r in rollouts if r["score"] < 0.5 and len(action_names(r)) > 2]


@pytest.fixture
def registered_long():
    register(LongEpisode)
    yield LongEpisode
    SIGNALS.pop(LongEpisode.type)


def test_a_user_signal_registers_and_runs(registered_long):
    assert SIGNALS["test_long"] is LongEpisode
    extractor = SignalExtractor(SignalConfig(enabled=("boundary", "test_long")))
    records = extractor.observe(0, group("t", [0, 1], calls=["a()", "b()", "c()"]))
    assert [(r["type"], r["rollout_id"]) for r in records] == [
        ("boundary", "0/t/0"), ("boundary", "0/t/1"), ("test_long", "0/t/0")]
    assert records[-1]["evidence"] == {"calls": 3} and records[-1]["signal_id"] == "test_long/0/t/0"


def test_a_signal_given_as_its_class_fires_under_its_type():
    """`enabled: ["module:Class"]` (docs/architecture.md): its records carry the class's `type`, and are kept (they
    were refused as "not a signal/v1 record of type 'module:Class'", so the type never fired)."""
    try:
        extractor = SignalExtractor(SignalConfig(enabled=("boundary", f"{__name__}:LongEpisode")))
        records = extractor.observe(0, group("t", [0, 1], calls=["a()", "b()", "c()"]))
        assert extractor.step_errors == {}
        assert [r["type"] for r in records] == ["boundary", "boundary", "test_long"]
        assert set(extractor.state_dict()["signals"]) == {"boundary", "test_long"}
    finally:
        SIGNALS.pop(LongEpisode.type, None)


def test_unknown_signal_name_lists_the_registry():
    with pytest.raises(ValueError, match="unknown signal type.*'nope'.*'boundary'.*'forgetting'.*'rare'"):
        SignalExtractor(SignalConfig(enabled=("boundary", "nope")))
    with pytest.raises(TypeError):
        register(type("Nameless", (Signal,), {"observe": lambda self, step, rollouts: []}))


def random_history(seed, steps=8):
    rng = random.Random(seed)
    tools = ["cd()", "ls()", "mv()", "grep()", "post_tweet()"]
    classes = [("A",), ("B",), ("A", "B")]
    return [[rollout(f"t{task}", rng.choice([0, 0.5, 1]), sample=k, step=step, classes=classes[task % 3],
                     calls=rng.sample(tools, rng.randint(0, 3)))
             for task in rng.sample(range(6), 3) for k in range(4)]
            for step in range(steps)]


def test_state_dict_round_trip_gives_identical_later_outputs():
    config = SignalConfig(enabled=("forgetting", "boundary", "rare", "compositional"), forgetting_window=3,
                          rare_theta=15, rare_min_total=20, compositional_window=2)
    history = random_history(seed=1)
    original = SignalExtractor(config)
    for step, rollouts in enumerate(history[:4]):
        original.observe(step, rollouts + [{"task_id": "broken"}])
    state = json.loads(json.dumps(original.state_dict()))  # what a checkpoint file holds
    resumed = SignalExtractor(config)
    resumed.load_state_dict(state)
    later = [(original.observe(step, rollouts), resumed.observe(step, rollouts))
             for step, rollouts in enumerate(history[4:], start=4)]
    assert all(a == b for a, b in later) and sum(len(a) for a, _ in later) > 10
    assert {r["type"] for a, _ in later for r in a} == {"forgetting", "boundary", "rare", "compositional"}
    assert resumed.skipped == original.skipped == 4
    with pytest.raises(ValueError, match="state holds"):
        SignalExtractor(SignalConfig()).load_state_dict(state)


def test_malformed_rollouts_are_skipped_and_counted(caplog):
    good = group("t", [0, 1])
    bad = [
        {**good[0], "score": None}, {**good[0], "score": "1"}, {**good[0], "score": float("nan")},
        {key: value for key, value in good[0].items() if key != "score"},
        {key: value for key, value in good[0].items() if key != "task_id"},
        {**good[0], "steps": "cd()"}, {**good[0], "steps": [{"calls": "cd()"}]}, {**good[0], "steps": [{"calls": [3]}]},
        {**good[0], "steps": [None]}, {**good[0], "involved_classes": "A"}, "not a record", None,
    ]
    extractor = SignalExtractor(SignalConfig(enabled=("forgetting", "boundary", "rare"), rare_min_total=1))
    with caplog.at_level(logging.WARNING, logger="coevolve_lib.engine.signals"):
        records = extractor.observe(0, bad[:6] + good + bad[6:])
    assert extractor.skipped == len(bad) and len(caplog.records) == len(bad)
    assert fired(r for r in records if r["type"] == "boundary") == ["0/t/0", "0/t/1"]
    # Only the types that read involved_classes need it.
    unclassed = [{k: v for k, v in r.items() if k != "involved_classes"} for r in good]
    assert only("forgetting").observe(0, unclassed) == [] and len(only("boundary").observe(0, unclassed)) == 2
    by_type = only("forgetting", forgetting_key="task_type")
    by_type.observe(0, unclassed)
    assert by_type.skipped == 2


# ---- real BFCL calls ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ground_truth_rollouts():
    """Rollout records of the first 30 BFCL v3 base tasks, whose calls are the ground truth run in BFCLEnv."""
    records = []
    for task in load_tasks("v3", "base")[:30]:
        env = BFCLEnv(task)
        steps = []
        for turn, calls in enumerate(task.ground_truth):
            if calls:
                observations = env.execute(calls)
                steps.append({"turn": turn, "step": 0, "calls": env.history[-1][-1], "observations": observations,
                              "rejected": []})
            env.end_turn()
        verdict = env.score()
        records.append({"task_id": task.id, "sample_index": 0, "step": 0, "steps": steps,
                        "score": float(verdict["success"]), "involved_classes": task.involved_classes,
                        "ground_truth": task.ground_truth})
    return records


def test_action_names_and_rare_patterns_on_real_calls(ground_truth_rollouts):
    records = ground_truth_rollouts
    assert all(r["score"] == 1.0 for r in records)
    for record in records:
        assert action_names(record) == [parse_call(c).name for turn in record["ground_truth"] for c in turn]
    first = records[0]  # multi_turn_base_0: cd, mkdir, mv | cd, grep | sort | cd, mv, cd, diff
    assert action_names(first)[:6] == ["cd", "mkdir", "mv", "cd", "grep", "sort"]
    assert {"cd>mkdir", "mkdir>mv", "mv>cd", "grep>sort", "cd>diff"} <= set(action_patterns(first))

    config = SignalConfig(enabled=("rare",), rare_theta=1, rare_min_total=100, **LITERAL)
    records_fired = SignalExtractor(config).observe(0, records)
    counts = Counter(p for r in records for p in set(action_patterns(r)))
    total = sum(counts.values())
    expected = {r["task_id"]: sorted(p for p in set(action_patterns(r)) if counts[p] / total < 0.01) for r in records}
    assert total >= 100
    assert {r["task_id"]: [p["pattern"] for p in r["evidence"]["patterns"]] for r in records_fired} == {
        task: patterns for task, patterns in expected.items() if patterns}
    assert 0 < len(records_fired) < len(records)  # some trajectories are ordinary, some hold a rare pattern


def test_the_tail_rule_on_real_trajectories(ground_truth_rollouts):
    """`tail` with 3 tasks on the 30 ground truths (N = 135 over 78 bigrams, 50 of them seen once: the one-offs the
    recurrence condition leaves out; the 7 recurring patterns seen 3 times hold 16% of N, so theta is 20 here): the
    rare patterns together hold under theta % of all occurrences, each recurs in 3 tasks or more, and not every
    trajectory carries one."""
    records = ground_truth_rollouts
    extractor = SignalExtractor(SignalConfig(enabled=("rare",), rare_min_total=100, rare_theta=20))
    records_fired = extractor.observe(0, records)
    counts = Counter(p for r in records for p in set(action_patterns(r)))
    tasks = {p: {r["task_id"] for r in records if p in action_patterns(r)} for p in counts}
    rare = {p["pattern"] for r in records_fired for p in r["evidence"]["patterns"]}
    assert rare and all(len(tasks[p]) >= 3 for p in rare)
    assert sum(counts[p] for p in rare) * 100 < 20 * sum(counts.values())
    # Every recurring pattern seen less often than a rare one is rare too (the tail is taken from its rarest end).
    assert {p for p in counts if len(tasks[p]) >= 3 and counts[p] < max(counts[q] for q in rare)} <= rare
    assert 0 < len(records_fired) < len(records)


def test_the_rollout_table_counts_the_groups_the_boundary_signal_fires_on():
    """Notebook 03's table: mixed groups per step, at the run's threshold, as many as the boundary signal fires on."""
    steps = [group("a", [1, 0]) + group("b", [0.5, 0.5]), group("a", [0.5, 0], step=1) + group("b", [0.6, 0.4], step=1)]
    table = rollout_steps([r for rollouts in steps for r in rollouts], SignalConfig())
    assert list(table["mixed_groups"]) == [1, 2] and list(table["rollouts"]) == [4, 4]
    boundary = only("boundary")
    assert [len({r["task_id"] for r in boundary.observe(i, rollouts)}) for i, rollouts in enumerate(steps)] == [1, 2]
    strict = rollout_steps([r for rollouts in steps for r in rollouts], SignalConfig(success_threshold=0.7))
    assert list(strict["mixed_groups"]) == [1, 0]
