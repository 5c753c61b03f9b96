"""Write synthesized tasks as real AppWorld tasks, with AppWorld's own code. Runs ONLY inside `.venv-appworld`.

    .venv-appworld/bin/python -I coevolve_lib/envs/appworld/task_writer.py INPUT.json OUTPUT.json

(-I keeps this folder, which holds the kit's own `appworld.py`, off sys.path.) APPWORLD_ROOT must name a scratch root
whose `data/` shows the writable root's data (`validation.write_tasks` sets one up): AppWorld finds tasks only
under `APPWORLD_ROOT/data/tasks/<id>`, so each task is built there, then renamed into `INPUT["tasks_dir"]` when it is
complete; the scratch root also takes AppWorld's experiment outputs.

INPUT: `{"tasks_dir": ..., "tasks": [{"task_id", "source_task", "instruction", "answer_task": bool, "keep_failed":
bool, "steps": [{"label", "code"}]}]}`, the steps rendered by the kit (`calls.solution_steps`): this script imports
nothing of the kit. For each task it
1. saves the start state: the source task's specs with the new id and instruction, and the source task's start
   databases with the supervisor's active `supervisor.Task` record given the new instruction (what
   `apis.supervisor.show_active_task()` shows);
2. runs the steps in AppWorld, in-process, from that start state, and records each step's output, the database
   changes (`change_summary`) and the answer passed to `complete_task`; a step that fails ends the task: no folder,
   unless `keep_failed` (the kit's "w/o validation" ablation), where the steps stop there and the task is written
   with the changes made so far (and no answer) as its expected outcome;
3. writes `ground_truth/` in AppWorld's minimal mode, with a generic `evaluation.py`: the end state's changes must
   equal the reference run's (computed by the same `change_summary`, whose source is embedded there) and, for an
   answer task, the answer must equal the reference's.
OUTPUT: `{task_id: {"written": bool, "error": str | None, "answer", "changes": int, "observations": [str]}}`.
"""

import inspect
import json
import os
import re
import shutil
import sys
import traceback

CHANGES_REQUIREMENT = "the database changes equal the reference solution's"
ANSWER_REQUIREMENT = "the answer equals the reference solution's"
EXPERIMENT = "coevolve_task_writer"
FAILED = "Execution failed"
"""How AppWorld's `execute` output starts when the code raised or was refused."""


def change_summary(models) -> dict:
    """The database changes between a task's start and end states (AppWorld's ModelCollectionPair), canonical and
    JSON-able: for each changed model, its added, updated and removed records as sorted field dicts. Added records
    leave out their `id` (it depends on what else was created and deleted first). AppWorld's `changed_model_names`
    leaves out `supervisor.Task` (the answer) itself; timestamps are stable because AppWorld freezes time at the
    task's datetime."""

    def rows(records, drop):
        dumped = sorted(json.dumps({key: value for key, value in record.to_dict().items() if key not in drop},
                                   sort_keys=True, default=str) for record in records)
        return [json.loads(row) for row in dumped]

    summary = {}
    for name in sorted(models.changed_model_names()):
        added, updated, removed = models.changed_records(name)
        summary[name] = {"added": rows(added, ("id",)), "updated": rows(updated, ()), "removed": rows(removed, ())}
    return summary


# `evaluate(test, public_data, ...)`: the function name and signature AppWorld's task format asks of a task's
# ground_truth/evaluation.py (its evaluator calls it), not the kit's "evaluate" (measuring a policy on tasks).
EVALUATE = '''

def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
    with test({changes!r}):
        test.case(json.dumps(change_summary(models), sort_keys=True), "==",
                  json.dumps(private_data.expected_changes, sort_keys=True))
'''
EVALUATE_ANSWER = '''    with test({answer!r}):
        task = models.end.supervisor.Task.find_one()
        test.answer(json.loads(task.answer), ground_truth_answer)
'''


def evaluation_code(answer_task: bool) -> str:
    """The generic evaluation.py: `change_summary` (this file's own source) and the tests."""
    code = "import json\n\n\n" + inspect.getsource(change_summary) + EVALUATE.format(changes=CHANGES_REQUIREMENT)
    return code + (EVALUATE_ANSWER.format(answer=ANSWER_REQUIREMENT) if answer_task else "")


def save_start_state(task_id: str, source_task: str, instruction: str) -> None:
    """specs.json and dbs/ of the new task: the source task's, with the new id and instruction."""
    from appworld.collections.models import ModelCollection
    from appworld.common.path_store import path_store
    from appworld.task import Task

    source = Task.load(task_id=source_task, load_ground_truth=False)
    source_dbs = os.path.join(path_store.data, "tasks", source_task, "dbs")
    # A private in-memory copy: AppWorld caches databases by path, and the source may serve other tasks.
    models = ModelCollection.load(from_db_home_path=source_dbs, to_db_home_path=f":memory:writer-{task_id}",
                                  load_apps=[*source.allowed_apps, "admin"])
    active = models.supervisor.Task.all()[0]  # the record show_active_task() shows
    active.instruction = instruction
    active.save()
    task = Task(id=task_id, instruction=instruction, supervisor=source.supervisor, datetime=source.datetime,
                allowed_apps=source.allowed_apps, db_version=source.db_version, model_collection=models)
    # Official tasks store their dbs as changes to base_dbs (.jsonl), the synthetic world's in full (.db).
    changes_format = any(name.endswith(".jsonl") for name in os.listdir(source_dbs))
    task.save(save_ground_truth=False, model_collection_format="changes" if changes_format else "full")
    task.close()


def run_reference(task_id: str, steps: list[dict], keep_failed: bool = False) -> dict:
    """Run the steps from the saved start state; the changes and answer as AppWorld's evaluator will see them. A
    failing step ends the run: with `keep_failed`, the outcome so far is still measured (with the error)."""
    from appworld import AppWorld
    from appworld.apps.model_lib import get_db_home_path
    from appworld.collections.models import ModelCollection, ModelCollectionPair

    world = AppWorld(task_id=task_id, experiment_name=EXPERIMENT, load_ground_truth=False)
    try:
        observations, error = [], None
        for step in steps:
            output = world.execute(step["code"])
            if output.startswith(FAILED):
                error = f"{step['label']}: {output}"
                if not keep_failed:
                    return {"error": error, "observations": observations}
                break
            observations.append(output)
        # The start/end pair exactly as appworld.evaluator.evaluate_task builds it.
        end_in_memory = get_db_home_path(storage_type="memory", type="task_output", task_id=task_id)
        models_end = ModelCollection.load(to_db_home_path=end_in_memory,
                                          from_db_home_path=world.output_db_home_path_on_disk,
                                          load_apps=world.task.allowed_apps)
        models = ModelCollectionPair(start_db_home_path=world.task.model_collection.from_db_home_path,
                                     start_model_collection=world.task.model_collection,
                                     end_db_home_path=end_in_memory, end_model_collection=models_end)
        answer = models.end.supervisor.Task.find_one().answer  # None: complete_task never ran (a failed step)
        answer = None if answer is None else json.loads(answer)
        return {"error": error, "observations": observations, "changes": change_summary(models), "answer": answer}
    finally:
        world.close()
        world.task.close()


def write_ground_truth(directory: str, spec: dict, run: dict) -> None:
    """AppWorld's minimal-mode ground truth (see `appworld_world_builder.build_task`)."""
    answer = run["answer"] if spec["answer_task"] else None
    tests = [{"requirement": CHANGES_REQUIREMENT, "label": "no_op_fail" if run["changes"] else "no_op_pass"}]
    if spec["answer_task"]:
        tests.append({"requirement": ANSWER_REQUIREMENT, "label": "no_op_fail"})
    code = "\n".join(step["code"] for step in spec["steps"])
    apps = {app for app, _ in re.findall(r"apis\.(\w+)\.(\w+)", code)} - {"supervisor"}
    files = {
        "evaluation.py": evaluation_code(spec["answer_task"]),
        "test_data.json": json.dumps(tests, indent=2),
        "answer.json": json.dumps(answer),
        "public_data.json": json.dumps({}),
        "private_data.json": json.dumps({"expected_changes": run["changes"]}, indent=2, sort_keys=True),
        "metadata.json": json.dumps({"mode": "minimal", "difficulty": 1, "num_apps": len(apps),
                                     "num_apis": len(set(re.findall(r"apis\.(\w+\.\w+)", code))),
                                     "num_solution_code_lines": len(code.strip().splitlines())}, indent=2),
    }
    os.makedirs(directory)
    for name, text in files.items():
        with open(os.path.join(directory, name), "w") as file:
            file.write(text)


def write_task(spec: dict, tasks_dir: str) -> dict:
    """Build one task in the scratch root, then rename it into `tasks_dir` (a folder there is always complete)."""
    from appworld.common.path_store import path_store

    task_id = spec["task_id"]
    staged = os.path.join(path_store.data, "tasks", task_id)
    shutil.rmtree(staged, ignore_errors=True)
    try:
        save_start_state(task_id, spec["source_task"], spec["instruction"])
        run = run_reference(task_id, spec["steps"], spec.get("keep_failed", False))
    except Exception:  # noqa: BLE001 - reported per task: one bad spec must not cost the batch
        shutil.rmtree(staged, ignore_errors=True)
        return {"written": False, "error": traceback.format_exc(limit=3)[-2000:], "answer": None, "changes": 0,
                "observations": []}
    if run["error"] is not None and "changes" not in run:
        shutil.rmtree(staged, ignore_errors=True)
        return {"written": False, "error": run["error"], "answer": None, "changes": 0,
                "observations": run["observations"]}
    write_ground_truth(os.path.join(staged, "ground_truth"), spec, run)
    try:
        os.rename(staged, os.path.join(tasks_dir, task_id))
    except OSError:  # written meanwhile by another writer: same id, same content
        shutil.rmtree(staged, ignore_errors=True)
    return {"written": True, "error": run["error"], "answer": run["answer"] if spec["answer_task"] else None,
            "changes": len(run["changes"]), "observations": run["observations"]}


def main(input_path: str, output_path: str) -> None:
    with open(input_path) as file:
        request = json.load(file)
    results = {spec["task_id"]: write_task(spec, request["tasks_dir"]) for spec in request["tasks"]}
    with open(output_path, "w") as file:
        json.dump(results, file, indent=2, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Everything is written (the output file closed, the task folders renamed): skip the interpreter's teardown of
    # AppWorld's apps and databases, which took 4.3 s of a 9.1 s one-task run (docs/log.md, 2026-12-06).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
