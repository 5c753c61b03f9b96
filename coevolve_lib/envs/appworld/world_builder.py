"""Build a small synthetic AppWorld world with AppWorld's own code. Runs ONLY inside `.venv-appworld`.

    .venv-appworld/bin/python -I coevolve_lib/envs/appworld/world_builder.py ROOT

(-I keeps this folder, which holds the kit's own `appworld.py`, off sys.path: it would shadow AppWorld's package.)

The kit never imports this file (its venv has no `appworld`, and pydantic 2 there could not load it): the kit side,
`coevolve_lib/envs/appworld/synthetic.py`, runs it as a script in AppWorld's venv. Why a synthetic world: AppWorld's
task data downloads only from AWS S3, so offline the kit's AppWorld code path is tested on tasks built here, in
AppWorld's own formats, and served by AppWorld's own environment server.

It writes, under ROOT (the folder APPWORLD_ROOT names):
- `data/api_docs/` from `ApiDocCollection.build()` (every app's docs, so that `Task.load` finds them);
- `data/base_dbs/`: the world every task starts from (admin, supervisor, simple_note records, and the api_docs app's
  records, so that `apis.api_docs.*` answers as in the real benchmark);
- `data/tasks/<id>/`: `specs.json` and `dbs/` (through AppWorld's `Task.save`), `ground_truth/` (evaluation.py with
  its tests, test_data.json, answer.json, public/private data, metadata.json in AppWorld's minimal mode);
- `data/datasets/{train,dev,synthetic}.txt`;
- `solutions.json` beside `data/` (outside AppWorld's data): each task's known correct solution code, for tests;
- `world.json`: the task ids per split, written last (its presence marks a complete build).

Task ids follow AppWorld's `<scenario>_<n>` (exactly one underscore: AppWorld asserts it). Two scenarios:
`synnote` (create a note: state-changing, with a no-op-passing test as AppWorld's tasks have) and `synask`
(answer a question through `apis.supervisor.complete_task(answer=...)`).
"""

import json
import os
import re
import sys
from datetime import datetime
from textwrap import dedent

SUPERVISOR = {"first_name": "Ada", "last_name": "Okafor", "email": "ada.okafor@example.com",
              "phone_number": "5550100100", "birthday": "1990-04-12"}
NOTE_PASSWORD = "note-pass-4821"
TASK_DATETIME = "2023-05-18T12:00:00"
DB_VERSION = "0.1.0"
BASE_NOTES = [
    {"title": "Grocery list", "content": "eggs, milk, spinach", "tags": ["shopping"]},
    {"title": "Book club", "content": "Next book: The Left Hand of Darkness", "tags": ["reading"]},
    {"title": "Gate code", "content": "4417", "tags": ["home"]},
    {"title": "Packing list", "content": "passport, charger, socks", "tags": ["travel"]},
]

LOGIN = dedent(f"""\
    passwords = {{p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}}
    token = apis.simple_note.login(username="{SUPERVISOR['email']}", password=passwords["simple_note"])["access_token"]
    """)

# `evaluate(test, public_data, ...)` below: the function name and signature AppWorld's task format asks of a task's
# ground_truth/evaluation.py (its evaluator calls it), not the kit's "evaluate" (measuring a policy on tasks).
CREATE_NOTE_EVALUATION = dedent('''\
    def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
        added, updated, removed = models.changed_records("simple_note.Note")
        with test("exactly one note was added and none was updated or removed"):
            test.case(len(added), "==", 1)
            test.case(len(updated) + len(removed), "==", 0)
        with test("the added note has the requested title and content"):
            test.case(added[0].title, "==", private_data.title)
            test.case(added[0].content, "==", private_data.content)
        with test("no app other than simple_note was changed"):
            test.case({name.split(".")[0] for name in models.changed_model_names()} - {"simple_note"}, "==", set())
    ''')
CREATE_NOTE_TESTS = [
    {"requirement": "exactly one note was added and none was updated or removed", "label": "no_op_fail"},
    {"requirement": "the added note has the requested title and content", "label": "no_op_fail"},
    {"requirement": "no app other than simple_note was changed", "label": "no_op_pass"},
]

ANSWER_EVALUATION = dedent('''\
    import json


    def evaluate(test, public_data, private_data, main_user, models, ground_truth_answer):
        with test("the task was completed with the correct answer"):
            task = models.end.supervisor.Task.find_one()
            test.answer(json.loads(task.answer), ground_truth_answer)
        with test("no note was changed"):
            test.case(models.changed_model_names(include=["simple_note.Note"]), "==", set())
    ''')
ANSWER_TESTS = [
    {"requirement": "the task was completed with the correct answer", "label": "no_op_fail"},
    {"requirement": "no note was changed", "label": "no_op_pass"},
]


def create_note_task(task_id: str, title: str, content: str) -> dict:
    return {
        "id": task_id,
        "instruction": f"Create a new note in my Simple Note account titled '{title}' with the content '{content}'.",
        "private_data": {"title": title, "content": content},
        "answer": None,
        "evaluation": CREATE_NOTE_EVALUATION,
        "test_data": CREATE_NOTE_TESTS,
        "solution": LOGIN + f"apis.simple_note.create_note(title={title!r}, content={content!r}, access_token=token)\n"
                            "apis.supervisor.complete_task()\n",
    }


def answer_task(task_id: str, instruction: str, answer, solution_body: str) -> dict:
    return {
        "id": task_id,
        "instruction": instruction,
        "private_data": {},
        "answer": answer,
        "evaluation": ANSWER_EVALUATION,
        "test_data": ANSWER_TESTS,
        "solution": LOGIN + solution_body,
    }


TASKS = [
    create_note_task("synnote_1", "Dentist", "Appointment on Friday at 10:00"),
    create_note_task("synnote_2", "Wifi password", "orange-kite-77"),
    create_note_task("synnote_3", "Gift ideas", "scarf, board game"),
    answer_task("synask_1", "What is the content of my Simple Note note titled 'Gate code'?", "4417", dedent("""\
        notes = apis.simple_note.search_notes(query="Gate code", access_token=token)
        note = apis.simple_note.show_note(note_id=notes[0]["note_id"], access_token=token)
        apis.supervisor.complete_task(answer=note["content"])
        """)),
    answer_task("synask_2", "How many notes are in my Simple Note account?", 4, dedent("""\
        notes = apis.simple_note.search_notes(page_limit=20, access_token=token)
        apis.supervisor.complete_task(answer=len(notes))
        """)),
]
SPLITS = {"train": ["synnote_1", "synnote_2", "synask_1"], "dev": ["synnote_3", "synask_2"],
          "synthetic": [task["id"] for task in TASKS]}


def build_api_docs():
    """Every app's API docs in AppWorld's formats; `Task.load` reads the standard ones of all apps."""
    from appworld.collections.api_docs import ApiDocCollection

    api_docs = ApiDocCollection.build()
    api_docs.save()
    return api_docs


def build_base_dbs(data: str, api_docs) -> str:
    """The world every task starts from: the supervisor and their Simple Note account with BASE_NOTES, and the api_docs
    app's records."""
    from appworld.apps import get_all_apps
    from appworld.collections.models import ModelCollection

    models = ModelCollection.load(to_db_home_path=":memory:synthetic_base", from_db_home_path=":memory:synthetic_base",
                                  load_apps=get_all_apps(), create_db=True)
    models.admin.MainUser.create_save(**SUPERVISOR)
    supervisor = models.supervisor.Supervisor.create_save(**SUPERVISOR)
    models.supervisor.AccountPassword.create_save(supervisor_id=supervisor.id, account_name="simple_note",
                                                  password=NOTE_PASSWORD)
    user = models.simple_note.User.create_save(first_name=SUPERVISOR["first_name"], last_name=SUPERVISOR["last_name"],
                                               email=SUPERVISOR["email"], password=NOTE_PASSWORD, verified=True)
    for note in BASE_NOTES:
        models.simple_note.Note.create_save(user_id=user.id, **note)
    for app_name, api_name_to_doc in api_docs.items():
        for doc in api_name_to_doc.values():
            models.api_docs.ApiDoc.create_save(
                app_name_=app_name, api_name=doc["api_name"], path=doc["path"], method=doc["method"],
                description=doc["description"], parameters=doc["parameters"],
                response_schemas=doc["response_schemas"])
    path = os.path.join(data, "base_dbs")
    models.save(db_home_path=path, format="full")
    models.close()
    return path


def build_task(data: str, base_dbs: str, spec: dict) -> None:
    """One task: its start state (the base world plus the supervisor's active task record), specs and ground truth."""
    from appworld.apps import get_all_apps
    from appworld.collections.models import ModelCollection
    from appworld.task import Task
    from munch import munchify

    models = ModelCollection.load(from_db_home_path=base_dbs, to_db_home_path=f":memory:{spec['id']}",
                                  load_apps=get_all_apps())
    supervisor = models.supervisor.Supervisor.find_one()
    models.supervisor.Task.create_save(supervisor_id=supervisor.id, instruction=spec["instruction"])
    task = Task(id=spec["id"], instruction=spec["instruction"], supervisor=munchify(SUPERVISOR),
                datetime=datetime.fromisoformat(TASK_DATETIME), allowed_apps=get_all_apps(skip_admin=True),
                db_version=DB_VERSION, model_collection=models)
    task.save(save_ground_truth=False)
    task.close()

    ground_truth = os.path.join(data, "tasks", spec["id"], "ground_truth")
    os.makedirs(ground_truth)
    files = {
        "evaluation.py": spec["evaluation"],
        "test_data.json": json.dumps(spec["test_data"], indent=2),
        "answer.json": json.dumps(spec["answer"]),
        "public_data.json": json.dumps({}),
        "private_data.json": json.dumps(spec["private_data"], indent=2),
        # AppWorld's minimal mode needs these four keys (else `len(None)` deep in GroundTruth).
        # num_apps counts apps besides supervisor, num_apis distinct `apis.<app>.<api>` names, as AppWorld's do.
        "metadata.json": json.dumps({"mode": "minimal", "difficulty": 1, "num_apps": 1,
                                     "num_apis": len(set(re.findall(r"apis\.(\w+\.\w+)", spec["solution"]))),
                                     "num_solution_code_lines": len(spec["solution"].strip().splitlines())}, indent=2),
    }
    for name, text in files.items():
        with open(os.path.join(ground_truth, name), "w") as file:
            file.write(text)


def main(root: str) -> None:
    os.environ["APPWORLD_ROOT"] = root  # read by AppWorld's path_store on every access
    data = os.path.join(root, "data")
    api_docs = build_api_docs()
    base_dbs = build_base_dbs(data, api_docs)
    for spec in TASKS:
        build_task(data, base_dbs, spec)
    os.makedirs(os.path.join(data, "datasets"))
    for split, task_ids in SPLITS.items():
        with open(os.path.join(data, "datasets", f"{split}.txt"), "w") as file:
            file.write("\n".join(task_ids) + "\n")
    with open(os.path.join(root, "solutions.json"), "w") as file:
        json.dump({spec["id"]: spec["solution"] for spec in TASKS}, file, indent=2)
    with open(os.path.join(root, "world.json"), "w") as file:
        json.dump({"splits": SPLITS}, file, indent=2)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
