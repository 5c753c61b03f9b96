"""Generated GorillaFileSystem worlds: seeded, split into disjoint seed ranges, valid initial states of BFCL's real
file system, and explorable into validated warm-start tasks."""

import json
import re

import pytest
from helpers import BFCL

from coevolve_lib.core.config import SynthesisConfig, WarmStartConfig
from coevolve_lib.engine.warm_start import warm_start_tasks
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.worlds import (
    CLASS_NAME,
    WORLD_SPLITS,
    WorldShape,
    vocabulary,
    world_seeds,
    world_state,
    world_tasks,
)


def _walk(node: dict, depth: int = 1):
    for name, entry in node.items():
        yield name, entry, depth
        if entry["type"] == "directory":
            yield from _walk(entry["contents"], depth + 1)


def test_the_vocabulary_is_bfcl_question_words():
    words = vocabulary()
    assert len(words) == 1500 == len(set(words))
    assert all(re.fullmatch(r"[a-z]{3,10}", w) for w in words)
    assert words[:3] == ("the", "and", "for")  # the most frequent first


def test_a_world_is_a_function_of_its_seed_and_seeds_differ():
    assert world_state(7) == world_state(7)
    states = [json.dumps(world_state(seed), sort_keys=True) for seed in range(200)]
    assert len(set(states)) == 200


def test_train_and_val_worlds_are_disjoint_seed_ranges():
    assert not set(WORLD_SPLITS["train"]) & set(WORLD_SPLITS["val"])
    assert list(world_seeds("val", 3)) == [1_000_000, 1_000_001, 1_000_002]
    assert list(world_seeds("train", 2, offset=5)) == [5, 6]
    with pytest.raises(ValueError, match="outside the train range"):
        world_seeds("train", 10, offset=len(WORLD_SPLITS["train"]) - 5)


def test_worlds_have_the_documented_shape():
    shape = WorldShape()
    homes_with_one_folder = hidden = files = 0
    for seed in range(300):
        (_, root), = world_state(seed)[CLASS_NAME]["root"].items()
        assert root["type"] == "directory" and root["contents"]
        entries = list(_walk(root["contents"]))
        assert all(depth <= shape.max_depth for _, _, depth in entries)
        assert all(entry["contents"] for _, entry, _ in entries if entry["type"] == "directory")
        assert all(1 <= len(entry["contents"]) <= shape.max_entries for _, entry, _ in entries
                   if entry["type"] == "directory")
        homes_with_one_folder += len(root["contents"]) == 1 and next(iter(root["contents"].values()))["type"] == \
            "directory"
        for name, entry, _ in entries:
            if entry["type"] == "file":
                files += 1
                hidden += name.startswith(".")
                assert entry["content"].endswith(".") and len(entry["content"].split()) >= 3
    assert 0.4 < homes_with_one_folder / 300 < 0.7  # about half, plus homes that drew a single folder
    assert 0.01 < hidden / files < 0.08


def test_a_world_runs_in_bfcls_file_system():
    for task in world_tasks("val", 3):
        (home, root), = task.initial_config[CLASS_NAME]["root"].items()
        env = BFCLEnv(task)
        pwd, listing = env.execute(["pwd()", "ls(a=True)"])
        env.close()
        assert json.loads(pwd)["current_working_directory"] == f"/{home}"
        assert json.loads(listing)["current_directory_content"] == list(root["contents"])


def test_worlds_explore_into_validated_tasks_that_name_their_world(tmp_path):
    sources = world_tasks("train", 6)
    config = WarmStartConfig(data_seeds=1, data_runs=4, data_calls_per_run=5, data_min_calls=1, data_max_calls=4)
    tasks = warm_start_tasks(sources, tmp_path, config, SynthesisConfig(description_words=4, max_calls=4), BFCL)
    assert len(tasks) >= 12
    assert {t["provenance"]["origin_task"] for t in tasks} <= {s.id for s in sources}
    assert all(t["involved_classes"] == [CLASS_NAME] and 1 <= len(t["reference_actions"]) <= 4 for t in tasks)
    assert all(t["provenance"]["verdict"] in ("objective_met", "positive_reward") for t in tasks)
