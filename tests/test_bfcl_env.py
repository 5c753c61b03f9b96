"""BFCLEnv on real BFCL v3 tasks: isolation, robustness, official-equal scoring; tasks, splits and tool schemas."""

import json
import subprocess
import sys

import pytest

from coevolve_lib.core.config import EpisodeBudget
from coevolve_lib.core.safe_calls import Call, parse_call
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.benchmark import EMPTY_TURN, BFCLEnv
from coevolve_lib.envs.bfcl.replay import official_verdict
from coevolve_lib.envs.bfcl.tasks import BFCLTask, load_tasks, restrict_classes, split_tasks
from coevolve_lib.rollout.toolcalls import DOC_TYPES, tools_to_openai


@pytest.fixture(scope="module")
def base_tasks():
    return load_tasks("v3", "base")


def file_system_task(tasks):
    return next(t for t in tasks if "GorillaFileSystem" in t.involved_classes)


def play(env, turns):
    for calls in turns:
        if calls:
            env.execute(calls)
        env.end_turn()
    return env.score()


def test_load_tasks_shapes(base_tasks):
    assert len(base_tasks) == 200
    task = base_tasks[0]
    assert task.id == "multi_turn_base_0" and task.data_version == "v3" and not task.long_context
    assert len(task.turns) == len(task.ground_truth) and task.missed_functions == {}
    miss = load_tasks("v3", "miss_func")[0]
    (turn, names), = miss.missed_functions.items()
    assert miss.turns[turn] == []  # hold-out turns are kept empty, as in the data
    before, after = {d["name"] for d in miss.tools_at_turn(turn - 1)}, {d["name"] for d in miss.tools_at_turn(turn)}
    assert set(names).isdisjoint(before) and set(names) <= after
    assert load_tasks("v3", "long_context")[0].long_context


def test_split_is_seeded_disjoint_and_category_independent(base_tasks):
    train, val = split_tasks(base_tasks, "train"), split_tasks(base_tasks, "val")
    assert len(train) == len(val) == 100
    assert {t.id for t in train}.isdisjoint({t.id for t in val})
    assert [t.id for t in split_tasks(base_tasks, "val")] == [t.id for t in val]
    assert [t.id for t in split_tasks(base_tasks, "val", seed=1)] != [t.id for t in val]
    long_val = split_tasks(load_tasks("v3", "long_context"), "val")
    assert [t.id.rsplit("_", 1)[1] for t in long_val] == [t.id.rsplit("_", 1)[1] for t in val]
    assert len(split_tasks(base_tasks, "all")) == 200
    with pytest.raises(ValueError):
        split_tasks(base_tasks, "test")


def test_tools_to_openai_maps_types_recursively(base_tasks):
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI as official

    assert DOC_TYPES == official
    doc = {"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "x": {"type": "float", "description": "a"},
        "t": {"type": "tuple", "items": {"type": "dict", "properties": {"y": {"type": "any"}}}},
    }, "required": ["x"]}}
    (tool,) = tools_to_openai([doc])
    params = tool["function"]["parameters"]
    assert tool["type"] == "function" and params["type"] == "object" and params["required"] == ["x"]
    assert params["properties"]["x"]["type"] == "number" and params["properties"]["x"]["format"] == "float"
    assert params["properties"]["t"]["type"] == "array"
    assert params["properties"]["t"]["items"]["type"] == "object"
    assert params["properties"]["t"]["items"]["properties"]["y"]["type"] == "string"
    tools = tools_to_openai(base_tasks[0].tools_at_turn(0))
    assert all(t["function"]["parameters"]["type"] == "object" for t in tools)
    assert "dict" not in json.dumps(tools).replace("dictionary", "")


def test_two_envs_of_one_task_do_not_share_state(base_tasks):
    task = file_system_task(base_tasks)
    a, b = BFCLEnv(task), BFCLEnv(task)
    assert a.execute(["mkdir(dir_name='only_in_a')"]) == ["None"]
    assert "only_in_a" in a.execute(["ls()"])[0]
    assert "only_in_a" not in b.execute(["ls()"])[0]
    assert a.state() != b.state() and b.state() == BFCLEnv(task).state()


def test_execute_formats_like_the_official_executor(base_tasks):
    env = BFCLEnv(file_system_task(base_tasks))
    observations = env.execute(["pwd()", Call("cd", (), (("folder", "no_such_dir"),)), "cd(1, 2, 3)", "nope()"])
    assert "current_working_directory" in json.loads(observations[0])
    assert "error" in observations[1]
    assert observations[2].startswith("Error during execution: ") and "positional" in observations[2]
    assert observations[3] == "Error during execution: unknown function 'nope'"
    # Rejected calls are neither executed nor recorded; the accepted ones are recorded in canonical form.
    assert env.history == [[["pwd()", "cd(folder='no_such_dir')", "cd(1, 2, 3)"]]]


def test_execute_never_raises_on_junk(base_tasks):
    env = BFCLEnv(file_system_task(base_tasks))
    before = env.state()
    for junk in [None, 42, [None], [b"ls()"], [object()], "ls(", ["x" * 200_000], [Call("eval", ("1",))],
                 [Call("ls", (), ((1, 2),))], [Call("__init__")]]:
        observations = env.execute(junk)
        assert observations and all(o.startswith("Error during execution: ") for o in observations), junk
    assert env.state() == before and env.history == [[]]


def test_ground_truth_passes_and_perturbations_fail(base_tasks):
    for task in base_tasks[:10]:
        assert play(BFCLEnv(task), task.ground_truth)["success"], task.id
        turn = next(i for i, calls in enumerate(task.ground_truth) if calls)
        empty = [[] if i == turn else calls for i, calls in enumerate(task.ground_truth)]
        result = play(BFCLEnv(task), empty)
        assert not result["success"] and result["error_type"] == EMPTY_TURN
        assert result["turn_valid"][turn] is False and result["turns_scored"] == len(task.ground_truth)


def test_a_turn_of_only_rejected_calls_is_graded_as_bfcl_grades_it(base_tasks):
    """BFCL records a call it cannot run, with its error as the result: such a turn is not empty and can pass."""
    rejected = ["no_such_tool(x=1)", "cd(folder='a', folder='b')", "print('x', sep=1)"]
    for task in base_tasks:
        gt = task.ground_truth
        early = [gt[0] + gt[1], rejected, *gt[2:]]  # turn 1's calls made in turn 0
        if len(gt) > 1 and gt[1] and official_verdict(task, early):
            break
    else:
        pytest.fail("no task whose turn 1 can be done in turn 0")
    env = BFCLEnv(task)
    env.execute(early[0])
    env.end_turn()
    assert all(o.startswith("Error during execution: ") for o in env.execute(rejected))
    assert env.history[1] == []  # rejected calls never run and are not recorded as executed
    assert env.end_turn()["valid"] and play(env, early[2:])["success"]
    result = play(BFCLEnv(task), [early[0], [], *gt[2:]])
    assert not result["success"] and result["error_type"] == EMPTY_TURN


def test_print_counts_with_the_result_bfcl_gives_it(base_tasks):
    """BFCL's `eval` runs the builtin print (result "None"); the kit runs nothing but records the same result."""
    task = next(t for t in base_tasks if t.id == "multi_turn_base_34")
    touch = "touch(file_name='statistics.txt')"  # echo creates the file anyway: only its "None" result is needed
    assert touch in task.ground_truth[1]
    for call, passes in [("print('done')", True), ("print('a', 'b', sep='/', end=None)", True),
                         ("print(value='x')", False), ("print('x', file='f')", False), ("open_file()", False)]:
        turns = [task.ground_truth[0], [call if c == touch else c for c in task.ground_truth[1]]]
        assert official_verdict(task, turns) is passes, call
        assert play(BFCLEnv(task), turns)["success"] is passes, call


@pytest.mark.parametrize("call, passes", [
    ("ｐｒｉｎｔ('x')", True), ("print(*['x'])", True), ("print(ls())", True),  # issue 22: once errors in the kit
    ("ｐｒｉｎｔ(*'ab', sep='')", True), ("print(ls(), **{'end': ''})", True), ("print(*1)", False),
    ("print(ls(), sep=1)", False), ("print(ｌｓ())", False), ("print(nope())", False), ("print(**{1: 2})", False),
    ("print(sep='a', **{'sep': 'b'})", False), ("print(ls(), end='', end='')", False), ("ｌｓ()", False)])
def test_print_spellings_are_graded_as_bfcl_grades_them(base_tasks, capsys, call, passes):
    """Python reads `ｐｒｉｎｔ` as `print` and BFCL's `eval` runs it, with unpacked arguments and the calls in its
    arguments: the kit's verdict is the official one, and Python's print never runs (nothing on stdout)."""
    task = next(t for t in base_tasks if t.id == "multi_turn_base_34")
    touch = "touch(file_name='statistics.txt')"  # only its "None" result is needed (echo creates the file)
    turns = [task.ground_truth[0], [call if c == touch else c for c in task.ground_truth[1]]]
    assert official_verdict(task, turns) is passes
    capsys.readouterr()
    env = BFCLEnv(task)
    env.execute(turns[0])
    env.end_turn()
    [observation] = env.execute([call])  # print is no function of the env: the model is told so
    assert observation.startswith("Error during execution: ")
    assert play(env, [turns[1]])["success"] is passes
    assert capsys.readouterr().out == ""


def test_calls_in_print_arguments_run_as_in_bfcl(base_tasks):
    """`print(mkdir(...))` makes the directory in BFCL (the argument is evaluated), so the state matches the ground
    truth's; a literal print does not. The argument call is recorded as executed."""
    for task in base_tasks:
        turn, index = next(((t, i) for t, calls in enumerate(task.ground_truth) for i, c in enumerate(calls)
                            if c.startswith("mkdir(")), (None, None))
        if turn is not None:
            break
    gt = task.ground_truth
    mkdir = gt[turn][index]
    for wrapped, passes in [(f"print({mkdir})", True), ("print('x')", False), (f"print({mkdir}, sep=1)", False)]:
        turns = [[wrapped if i == index else c for i, c in enumerate(calls)] if t == turn else calls
                 for t, calls in enumerate(gt)]
        assert official_verdict(task, turns) is passes, wrapped
        env = BFCLEnv(task)
        assert play(env, turns)["success"] is passes, wrapped
        assert (parse_call(mkdir).to_source() in env.history[turn][0]) is wrapped.startswith("print(mkdir"), wrapped


def test_dropped_state_changing_call_is_a_state_mismatch(base_tasks):
    task = next(t for t in base_tasks if t.ground_truth[0] and t.ground_truth[0][-1].startswith("mkdir("))
    dropped = [task.ground_truth[0][:-1]] + task.ground_truth[1:]
    result = play(BFCLEnv(task), dropped)
    assert result["error_type"] == "multi_turn:instance_state_mismatch" and result["turn_valid"][0] is False


def test_dropped_read_only_call_is_a_response_mismatch(base_tasks):
    task = next(t for t in base_tasks if len(t.ground_truth[0]) > 1 and t.ground_truth[0][-1].startswith("ls("))
    dropped = [task.ground_truth[0][:-1]] + task.ground_truth[1:]
    assert play(BFCLEnv(task), dropped)["error_type"] == "multi_turn:execution_response_mismatch"


def test_score_closes_missing_turns_as_empty(base_tasks):
    task = base_tasks[0]
    env = BFCLEnv(task)
    env.execute(task.ground_truth[0])
    result = env.score()  # the rollout stopped after one turn
    assert result["turns_scored"] == len(task.ground_truth) and not result["success"]
    assert result["turn_valid"][0] is True and result["error_type"] == EMPTY_TURN
    assert env.score() == result


def test_failed_turn_keeps_the_episode_failed(base_tasks):
    task = next(t for t in base_tasks if len(t.ground_truth) >= 3 and all(t.ground_truth))
    env = BFCLEnv(task)
    env.end_turn()  # turn 0 left empty
    for calls in task.ground_truth[1:]:
        env.execute(calls)
        env.end_turn()
    assert env.score()["success"] is False and env.score()["turn_valid"][0] is False


def test_from_config_and_state_are_json_friendly(base_tasks):
    task = file_system_task(base_tasks)
    env = BFCLEnv.from_config(task.initial_config, task.involved_classes)
    state = env.state()
    json.dumps(state)
    assert state["GorillaFileSystem"]["root"] == task.initial_config["GorillaFileSystem"]["root"]
    env.execute(["touch(file_name='new.txt')"])
    assert env.state() != state and env.end_turn() is None
    with pytest.raises(ValueError, match="no ground truth"):
        env.score()
    env.close()


def test_state_of_every_class_is_json_friendly():
    tasks = load_tasks("v3", "long_context")
    seen = set()
    for task in tasks:
        if not set(task.involved_classes) <= seen:
            json.dumps(BFCLEnv(task).state())
            seen |= set(task.involved_classes)
    assert len(seen) == 8


def test_official_names_reused():
    checker = bfcl_backend.checker_module("v3")
    assert EMPTY_TURN in checker.multi_turn_checker.__code__.co_consts


def test_restrict_classes_keeps_only_the_chosen_classes_state():
    tasks = load_tasks("v3", "base")
    kept = restrict_classes(tasks, ["GorillaFileSystem"])
    with_fs = [t for t in tasks if "GorillaFileSystem" in t.involved_classes]
    assert [t.id for t in kept] == [t.id for t in with_fs]
    assert all(t.involved_classes == ["GorillaFileSystem"] and set(t.initial_config) <= {"GorillaFileSystem"}
               and t.ground_truth is None for t in kept)
    mixed = next(t for t in with_fs if len(t.involved_classes) > 1)
    restricted = next(t for t in kept if t.id == mixed.id)
    assert restricted.initial_config["GorillaFileSystem"] == mixed.initial_config["GorillaFileSystem"]
    env = BFCLEnv(restricted)  # runs with the one class
    assert not any("Error" in o for o in env.execute(["pwd()"]))
    env.close()
    assert restrict_classes(tasks, None) == tasks
    with pytest.raises(ValueError, match="unknown BFCL class"):
        restrict_classes(tasks, ["FileSystem"])


# ----------------------------------------------------------------------------------- the state budget (issue 29)

def _shared_folder_calls(depth: int) -> list[str]:
    """A chain of `depth` folders, then `cp` one level up at each level: each copy shares the folders below it, so
    what `find` walks doubles per level (2**depth paths from ~4*depth calls)."""
    down = ["mkdir(dir_name='x')", "cd(folder='x')"] * depth
    return down + ["mkdir(dir_name='x')"] + ["cd(folder='..')", "cp(source='x', destination='y')"] * depth


def test_state_budget_stops_shared_folders_before_they_multiply(base_tasks):
    from coevolve_lib.envs.bfcl.state_size import state_size

    env = BFCLEnv(file_system_task(base_tasks), max_state_chars=100_000)
    observations = env.execute(_shared_folder_calls(30))
    assert env.state_over
    over = observations.index(next(o for o in observations if o.startswith("Error during execution: the env")))
    assert over < len(observations) - 1 and all(o == observations[over] for o in observations[over:])
    # the call that passed the budget ran; the state is at most one doubling over it, and nothing later ran
    assert 100_000 < state_size(env._instances.values(), 10**9) <= 2 * 100_000 + 1_000
    assert env.execute(["ls()"]) == [observations[over]]
    verdict = play(env, [])
    assert not verdict["success"] and verdict["error_type"] == "state_cap"
    # without a budget the same calls pass 10 million (the measurement stops there)
    unbounded = BFCLEnv(file_system_task(base_tasks))
    unbounded.execute(_shared_folder_calls(30))
    assert state_size(unbounded._instances.values(), 10**7) > 10**7


def test_state_budget_counts_calls_run_inside_print(base_tasks):
    env = BFCLEnv(file_system_task(base_tasks), max_state_chars=100_000)
    calls = _shared_folder_calls(30)
    env.execute(calls[:61])
    env.execute([f"print({', '.join(calls[61:])})"])  # BFCL's eval runs print's argument calls
    assert env.state_over
    # they stopped at the first one over the budget, and no later call runs
    assert len(env.history[-1][-1]) < len(calls) - 61
    assert env.execute(["ls()"])[0].startswith("Error during execution: the environment's state")


@pytest.mark.parametrize("version", ["v3", "v4"])
def test_every_bfcl_task_state_sits_far_below_the_state_budget(version):
    """Every multi-turn task of both data versions, all four categories, measured after each ground-truth call."""
    done = subprocess.run([sys.executable, "-c", STATE_SIZES, version], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    largest = json.loads(done.stdout)
    assert len(largest) == 800
    budget = EpisodeBudget().max_state_chars
    assert max(largest.values()) < budget / 10, max(largest.items(), key=lambda item: item[1])


STATE_SIZES = """
import json, sys
from coevolve_lib.core.safe_calls import parse_call
from coevolve_lib.envs.bfcl.backend import CATEGORIES
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.state_size import state_size
from coevolve_lib.envs.bfcl.tasks import load_tasks
largest = {}
for category in CATEGORIES:
    for task in load_tasks(sys.argv[1], category):
        env = BFCLEnv(task)
        sizes = [state_size(env._instances.values(), 10**9)]
        for turn in task.ground_truth:
            for text in turn:
                env.execute([parse_call(text)])
                sizes.append(state_size(env._instances.values(), 10**9))
        largest[task.id] = max(sizes)
print(json.dumps(largest))
"""


def test_state_budget_sees_a_branch_the_tree_no_longer_holds(base_tasks):
    """A copy's subfolders keep their old `parent`: after `rm` of the original, `cd` into a copied child and `cd ..`
    land in the removed folder, which `find` and `du` walk from there (found in review: 49 calls made 2,097,153
    `find` paths while the public tree measured 103)."""
    from coevolve_lib.envs.bfcl.state_size import state_size

    task = BFCLTask(id="synthetic_0", category="synthetic", data_version="v3", turns=[],
                    involved_classes=["GorillaFileSystem"], initial_config={"GorillaFileSystem": {"root": {
                        "workspace": {"type": "directory", "contents": {"a": {"type": "directory", "contents": {
                            "x": {"type": "directory", "contents": {}}}}}}}}})
    env = BFCLEnv(task, max_state_chars=100_000)
    env.execute(["cd(folder='workspace')", "cp(source='a', destination='c')", "rm(file_name='a')",
                 "cd(folder='c')", "cd(folder='x')", "cd(folder='..')"])
    assert json.loads(env.execute(["pwd()"])[0])["current_working_directory"] == "/workspace/a"
    env.execute(["mkdir(dir_name='d')", "cd(folder='d')", "touch(file_name='f.txt')", "cd(folder='..')"])
    observations = []
    for k in range(20):
        observations += env.execute([f"cp(source='d', destination='e{k}')", f"mv(source='e{k}', destination='d')"])
    assert env.state_over and observations[-1].startswith("Error during execution: the environment's state")
    assert state_size(env._instances.values(), 10**9) <= 2 * 100_000 + 1_000


def test_a_step_stops_running_calls_once_its_output_passes_what_the_episode_can_keep():
    """Issue 47: under the state cap `find` prints every path in full, about the whole state per call, so one reply of
    32 `find` calls printed 14.7 million characters for an episode that keeps 1 million. Calls past the step's output
    budget are not run."""
    from coevolve_lib.envs.bfcl.benchmark import OUTPUT_OVER

    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    env = BFCLEnv(task, max_state_chars=524_288)
    name = "n" * 250
    for _ in range(58):  # a deep chain of long names: ~460k characters per `find`, under the state cap
        env.execute([f"mkdir(dir_name='{name}')", f"cd(folder='{name}')"])
    env.execute(["cd(folder='..')"] * 58)
    assert not env.state_over
    unbounded = env.execute(["find(path='.')"] * 32)
    assert sum(map(len, unbounded)) > 10_000_000
    bounded = env.execute(["find(path='.')"] * 32, output_budget=1_048_576)
    ran = [o for o in bounded if o != OUTPUT_OVER]
    assert len(ran) == 3 and sum(map(len, ran)) < 1_048_576 + 500_000 and bounded.count(OUTPUT_OVER) == 29
