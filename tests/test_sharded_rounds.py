"""A round split over processes (`engine.shards.Shards`, issue 28): each process explores, abstracts and validates
its share and every stage ends with the whole stage everywhere, so two processes grow the same pool as one, task for
task, for D_0 and for a signal-guided round; the cross-shard duplicate rule decides what one validator would."""

import json
import multiprocessing
import random
from pathlib import Path

import pytest
from helpers import BFCL
from test_feedback import _signal_round_inputs

from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.feedback import FeedbackConfig, deduplicated, feedback_round, synthesize_initial
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.engine.shards import SINGLE, Shards
from coevolve_lib.envs.bfcl.tasks import load_tasks, split_tasks


def _rounds(run_dir: Path, shards: Shards) -> None:
    """D_0 of 12 environments, then a signal-guided round over it, as every process of a run calls them."""
    sources = split_tasks(load_tasks("v3", "base"), "train")[:12]
    pool = TaskPool(run_dir / "pool.jsonl")
    synthesize_initial(sources, pool, run_dir / "round_000", FeedbackConfig(), BFCL.target, BFCL.round_stages(),
                       size=20, progress=False, shards=shards)
    signals, rollouts = _signal_round_inputs(pool)
    by_id = {t["task_id"]: t for t in pool.tasks}
    targets = [ExplorationTarget.from_pool_task(by_id[s["task_id"]], BFCL, s, rollouts[s["rollout_id"]])
               for s in signals]
    feedback_round(1, run_dir / "round_001", targets, pool, FeedbackConfig(), BFCL.round_stages(), progress=False,
                   shards=shards)


def _gather(index: int, shared, barrier):
    """A gather of one object per process over a shared dict, for forked test processes (the run's is accelerate's
    `gather_object`)."""
    def gather(mine):
        barrier.wait()  # the previous gather's readers are done with the dict
        shared[index] = mine
        barrier.wait()
        return [shared[i] for i in range(2)]
    return gather


def _shard(run_dir: Path, index: int, shared, barrier) -> None:
    _rounds(run_dir, Shards(index, 2, _gather(index, shared, barrier)))


def test_two_processes_grow_the_same_pool_as_one(tmp_path):
    _rounds(tmp_path / "one", SINGLE)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2, timeout=300)
    shared = context.Manager().dict()
    workers = [context.Process(target=_shard, args=(tmp_path / "two", index, shared, barrier)) for index in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
    assert [worker.exitcode for worker in workers] == [0, 0]

    one, two = TaskPool(tmp_path / "one" / "pool.jsonl"), TaskPool(tmp_path / "two" / "pool.jsonl")
    assert len(one.tasks) > 20 and one.version == 1  # D_0 and the round both added tasks
    assert two.tasks == one.tasks
    for round_dir in ("round_000", "round_001"):
        reports = [json.loads((tmp_path / run / round_dir / "report.json").read_text()) for run in ("one", "two")]
        assert reports[0] == reports[1]  # the wall times, which differ, are in timings.json
        # each process wrote its own share of every stage, and the shares together are the single process's work
        for stage in ("explorations", "abstractions", "verdicts"):
            shares = [len((tmp_path / "two" / round_dir / f"{stage}.p{i}.jsonl").read_text().splitlines())
                      for i in range(2)]
            single = len((tmp_path / "one" / round_dir / f"{stage}.jsonl").read_text().splitlines())
            assert min(shares) > 0 and sum(shares) == single


def test_validation_split_over_shards_accepts_what_one_validator_accepts():
    """Specs whose ids collide at random, some failing on their merits: validated one by one against the round's
    accepted tasks, or by two shards against the pool alone and then `deduplicated`, the same specs are accepted."""
    for seed in range(500):
        _check_merge(random.Random(seed))


def _check_merge(rng: random.Random) -> None:
    specs = [{"spec_id": f"s{i}"} for i in range(rng.randint(1, 12))]
    task_id = {s["spec_id"]: rng.choice(["a", "b", "c", "s1", "s3"]) for s in specs}  # a spec id may be a task id
    merit = {s["spec_id"]: rng.random() < 0.7 for s in specs}

    def verdict(spec, known):
        duplicate = spec["spec_id"] in known or task_id[spec["spec_id"]] in known
        accepted = merit[spec["spec_id"]] and not duplicate
        return {"spec_id": spec["spec_id"], "task_id": task_id[spec["spec_id"]], "accepted": accepted,
                "reason": "objective_met" if accepted else "duplicate" if duplicate else "call_error",
                "reasons": [] if accepted else ["duplicate" if duplicate else "call_error"], "detail": ""}

    known, one = set(), {}
    for spec in specs:  # one validator: later specs see the earlier accepted ones
        one[spec["spec_id"]] = verdict(spec, known)
        if one[spec["spec_id"]]["accepted"]:
            known.add(task_id[spec["spec_id"]])
    shards = {spec["spec_id"]: verdict(spec, set()) for spec in specs}  # each shard knows the pool only
    merged = deduplicated(specs, shards)
    assert [v["accepted"] for v in merged.values()] == [v["accepted"] for v in one.values()]
    assert deduplicated(specs, one) == one  # one validator's verdicts pass unchanged


def test_a_process_that_cannot_see_what_another_wrote_stops_in_one_line(tmp_path, monkeypatch):
    """Issue 46: on a shared filesystem a node may see another's round file late, or its old content; a barrier alone
    let it go on from what it saw. `settle` waits for the writer's digest, then stops the run in one line."""
    from coevolve_lib.core import shared_files
    from coevolve_lib.core.config import RunError

    written = tmp_path / "pool.jsonl"
    written.write_text('{"task_id": "a"}\n')
    stale_view = {str(written): shared_files.file_digest(written)}  # what the writer wrote and announces
    written.write_text("")  # what this node's filesystem shows
    monkeypatch.setattr(shared_files, "SETTLE_TIMEOUT_S", 0.5)
    reader = Shards(1, 2, gather=lambda mine: [stale_view, mine])
    with pytest.raises(RunError, match=r"^1 file\(s\) another process wrote are not visible here as written after "
                                       r"0\.5 s \(.*pool\.jsonl has other content\)") as error:
        reader.settle()
    assert "\n" not in str(error.value)
    written.write_text('{"task_id": "a"}\n')  # the filesystem catches up: it goes on
    reader.settle()
