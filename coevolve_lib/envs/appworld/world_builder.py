"""Build a small synthetic AppWorld world with AppWorld's own code. Runs ONLY inside `.venv-appworld`.

    .venv-appworld/bin/python -I coevolve_lib/envs/appworld/world_builder.py ROOT

(-I keeps this folder, which holds the kit's own `appworld.py`, off sys.path: it would shadow AppWorld's package.)

The kit never imports this file (its venv has no `appworld`, and pydantic 2 there could not load it): the kit side,
`coevolve_lib/envs/appworld/synthetic.py`, runs it as a script in AppWorld's venv. Why a synthetic world: AppWorld's
task data downloads only from AWS S3, so offline the kit's AppWorld code path is tested on tasks built here, in
AppWorld's own formats, and served by AppWorld's own environment server.

The world is a set of households: a supervisor with a Simple Note account and its notes. The first one (Ada's) is
written by hand; the others are drawn from fixed name and note lists with `random.Random(WORLD_SEED)`, so every build
is the same world. Each task starts from its household's state (plus the supervisor's active-task record). The `train`
split's tasks start in Ada's household and TRAIN_HOUSEHOLDS more; the `dev` split's in DEV_HOUSEHOLDS others, start
states nothing in the train split holds (the kit's unseen-environment held-out set explores them).

It writes, under ROOT (the folder APPWORLD_ROOT names):
- `data/api_docs/` from `ApiDocCollection.build()` (every app's docs, so that `Task.load` finds them);
- `data/base_dbs/`: Ada's household (admin, supervisor, simple_note records, and the api_docs app's records, so that
  `apis.api_docs.*` answers as in the real benchmark);
- `data/tasks/<id>/`: `specs.json` and `dbs/` (through AppWorld's `Task.save`), `ground_truth/` (evaluation.py with
  its tests, test_data.json, answer.json, public/private data, metadata.json in AppWorld's minimal mode);
- `data/datasets/{train,dev,synthetic}.txt`;
- `solutions.json` beside `data/` (outside AppWorld's data): each task's known correct solution code, for tests;
- `world.json`, written last (its presence marks a complete build): the task ids per split and each task's start
  state (its household's name).

Task ids follow AppWorld's `<scenario>_<n>` (exactly one underscore: AppWorld asserts it). Two scenarios:
`synnote` (create a note: state-changing, with a no-op-passing test as AppWorld's tasks have) and `synask`
(answer a question through `apis.supervisor.complete_task(answer=...)`).
"""

import json
import os
import random
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
ADA = {"name": "ada", "supervisor": SUPERVISOR, "password": NOTE_PASSWORD, "notes": BASE_NOTES}

WORLD_SEED = 7
TRAIN_HOUSEHOLDS = 4
"""Drawn households whose one task each joins the train split (beside Ada's three)."""
DEV_HOUSEHOLDS = 3
"""Drawn households whose two tasks each (a note to create, a question) are the dev split."""
FIRST_NAMES = ["Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kemal", "Lena", "Mira"]
LAST_NAMES = ["Mendes", "Liu", "Haddad", "Obi", "Rahimi", "Petrov", "Sato", "Novak", "Park", "Yilmaz", "Berg", "Costa"]
NOTE_LIBRARY = [
    ("Bike lock", "3920", "home"), ("Plant care", "water the fern on Sundays", "home"),
    ("Movie night", "Arrival, then Paterson", "leisure"), ("Recipe: dal", "lentils, cumin, garlic, lemon", "cooking"),
    ("Flight", "LH 441 on June 3rd, seat 22A", "travel"), ("Locker", "B-17", "work"),
    ("Team offsite", "Tuesday, room Kepler", "work"), ("Reading list", "Piranesi; The Overstory", "reading"),
    ("Car service", "due at 60000 km", "errands"), ("Pharmacy", "pick up the refill Thursday", "errands"),
    ("Running plan", "5 km Mon, 8 km Thu", "health"), ("Wifi at the cabin", "pine-lake-19", "travel"),
    ("Birthday gift", "a field guide to birds", "family"), ("Guitar chords", "G, Em, C, D", "leisure"),
    ("Gym hours", "6:00 to 22:00 on weekdays", "health"), ("Train pass", "expires in October", "travel"),
    ("Podcast queue", "two episodes on tides", "leisure"), ("Tax papers", "in the blue folder", "errands"),
    ("Sourdough", "feed the starter at 8", "cooking"), ("Spare key", "with the neighbour at 12B", "home"),
    ("Project Atlas", "demo on the 14th", "work"), ("Vet visit", "booster shots in spring", "family"),
    ("Museum", "free entry on first Sundays", "leisure"), ("Printer ink", "model 64XL", "errands"),
    ("Soup", "leek, potato, thyme", "cooking"), ("Standup notes", "ask about the release date", "work"),
]
"""(title, content, tag) of the notes a drawn household may hold."""
NEW_NOTES = [
    ("Dentist", "Appointment on Friday at 10:00"), ("Wifi password", "orange-kite-77"),
    ("Gift ideas", "scarf, board game"), ("Parking spot", "level 2, bay 14"), ("Call the plumber", "Monday morning"),
    ("Book swap", "bring two paperbacks"), ("Garden", "plant tomatoes in May"), ("Passport", "renew before August"),
    ("Piano lesson", "Wednesday 17:30"), ("Recycling", "glass goes out on Tuesdays"),
    ("Camping gear", "tent, stove, headlamp"), ("Study group", "chapter 5 on Thursday"), ("Boiler", "service due"),
    ("Window cleaner", "every second Friday"), ("Lunch order", "two falafel wraps"), ("Concert", "row F, seats 9-10"),
    ("Bank", "new card arrives Monday"), ("Paint colours", "sage green, off-white"),
]
"""(title, content) of the notes create-note tasks ask for (the first three: Ada's hand-written tasks')."""

def login(email: str) -> str:
    """The start of every solution: the supervisor's Simple Note password, then a login."""
    return dedent(f"""\
        passwords = {{p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}}
        token = apis.simple_note.login(username="{email}", password=passwords["simple_note"])["access_token"]
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


def create_note_task(task_id: str, household: dict, title: str, content: str) -> dict:
    return {
        "id": task_id,
        "household": household["name"],
        "instruction": f"Create a new note in my Simple Note account titled '{title}' with the content '{content}'.",
        "private_data": {"title": title, "content": content},
        "answer": None,
        "evaluation": CREATE_NOTE_EVALUATION,
        "test_data": CREATE_NOTE_TESTS,
        "solution": login(household["supervisor"]["email"])
        + f"apis.simple_note.create_note(title={title!r}, content={content!r}, access_token=token)\n"
        "apis.supervisor.complete_task()\n",
    }


def answer_task(task_id: str, household: dict, instruction: str, answer, solution_body: str) -> dict:
    return {
        "id": task_id,
        "household": household["name"],
        "instruction": instruction,
        "private_data": {},
        "answer": answer,
        "evaluation": ANSWER_EVALUATION,
        "test_data": ANSWER_TESTS,
        "solution": login(household["supervisor"]["email"]) + solution_body,
    }


def content_question(task_id: str, household: dict, note: dict) -> dict:
    """What is the content of one of the household's notes (found by its exact title among the search's results)."""
    return answer_task(task_id, household, f"What is the content of my Simple Note note titled '{note['title']}'?",
                       note["content"], dedent(f"""\
        notes = apis.simple_note.search_notes(query={note['title']!r}, access_token=token)
        note_id = next(n["note_id"] for n in notes if n["title"] == {note['title']!r})
        note = apis.simple_note.show_note(note_id=note_id, access_token=token)
        apis.supervisor.complete_task(answer=note["content"])
        """))


def count_question(task_id: str, household: dict) -> dict:
    return answer_task(task_id, household, "How many notes are in my Simple Note account?", len(household["notes"]),
                       dedent("""\
        notes = apis.simple_note.search_notes(page_limit=20, access_token=token)
        apis.supervisor.complete_task(answer=len(notes))
        """))


def drawn_households(rng: random.Random, count: int) -> list[dict]:
    """`count` households: a supervisor each (no name pair reused), 3-6 notes of NOTE_LIBRARY, a password."""
    names = rng.sample([(first, last) for first in FIRST_NAMES for last in LAST_NAMES], count)
    households = []
    for index, (first, last) in enumerate(names):
        supervisor = {"first_name": first, "last_name": last, "email": f"{first}.{last}@example.com".lower(),
                      "phone_number": f"5550{index + 2:03d}{rng.randint(1000, 9999)}",
                      "birthday": f"19{rng.randint(60, 99)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"}
        notes = [{"title": title, "content": content, "tags": [tag]}
                 for title, content, tag in rng.sample(NOTE_LIBRARY, rng.randint(3, 6))]
        households.append({"name": f"{first}_{last}".lower(), "supervisor": supervisor,
                           "password": f"note-pass-{rng.randint(1000, 9999)}", "notes": notes})
    return households


def world_tasks() -> tuple[list[dict], list[dict], dict[str, list[str]]]:
    """(households, task specs, splits): Ada's five hand-written tasks (synnote_3 and synask_2 moved to the first dev
    household), then one task in each drawn train household and two in each drawn dev household."""
    rng = random.Random(WORLD_SEED)
    drawn = drawn_households(rng, TRAIN_HOUSEHOLDS + DEV_HOUSEHOLDS)
    train_homes, dev_homes = drawn[:TRAIN_HOUSEHOLDS], drawn[TRAIN_HOUSEHOLDS:]
    numbers = {"synnote": 3, "synask": 2}  # the hand-written tasks' last numbers

    def next_id(scenario: str) -> str:
        numbers[scenario] += 1
        return f"{scenario}_{numbers[scenario]}"

    new_notes = iter(NEW_NOTES[3:])
    train = [create_note_task("synnote_1", ADA, *NEW_NOTES[0]), create_note_task("synnote_2", ADA, *NEW_NOTES[1]),
             content_question("synask_1", ADA, BASE_NOTES[2])]
    asked = {BASE_NOTES[2]["title"]}  # no two tasks of the world share an instruction

    def question(home: dict) -> dict:
        note = rng.choice([note for note in home["notes"] if note["title"] not in asked])
        asked.add(note["title"])
        return content_question(next_id("synask"), home, note)

    def one_task(index: int, home: dict) -> dict:
        return create_note_task(next_id("synnote"), home, *next(new_notes)) if index % 2 == 0 else question(home)

    train += [one_task(index, home) for index, home in enumerate(train_homes)]
    dev = [create_note_task("synnote_3", dev_homes[0], *NEW_NOTES[2]), count_question("synask_2", dev_homes[0])]
    for home in dev_homes[1:]:
        dev += [create_note_task(next_id("synnote"), home, *next(new_notes)), question(home)]
    tasks = train + dev
    splits = {"train": [t["id"] for t in train], "dev": [t["id"] for t in dev], "synthetic": [t["id"] for t in tasks]}
    return [ADA, *drawn], tasks, splits


def build_api_docs():
    """Every app's API docs in AppWorld's formats; `Task.load` reads the standard ones of all apps."""
    from appworld.collections.api_docs import ApiDocCollection

    api_docs = ApiDocCollection.build()
    api_docs.save()
    return api_docs


def build_household(household: dict, api_docs, path: str) -> None:
    """A household's start state at `path`: the supervisor and their Simple Note account with its notes, and the
    api_docs app's records."""
    from appworld.apps import get_all_apps
    from appworld.collections.models import ModelCollection

    name = f":memory:household_{household['name']}"
    models = ModelCollection.load(to_db_home_path=name, from_db_home_path=name, load_apps=get_all_apps(),
                                  create_db=True)
    person = household["supervisor"]
    models.admin.MainUser.create_save(**person)
    supervisor = models.supervisor.Supervisor.create_save(**person)
    models.supervisor.AccountPassword.create_save(supervisor_id=supervisor.id, account_name="simple_note",
                                                  password=household["password"])
    user = models.simple_note.User.create_save(first_name=person["first_name"], last_name=person["last_name"],
                                               email=person["email"], password=household["password"], verified=True)
    for note in household["notes"]:
        models.simple_note.Note.create_save(user_id=user.id, **note)
    for app_name, api_name_to_doc in api_docs.items():
        for doc in api_name_to_doc.values():
            models.api_docs.ApiDoc.create_save(
                app_name_=app_name, api_name=doc["api_name"], path=doc["path"], method=doc["method"],
                description=doc["description"], parameters=doc["parameters"],
                response_schemas=doc["response_schemas"])
    models.save(db_home_path=path, format="full")
    models.close()


def build_task(data: str, household_dbs: str, supervisor: dict, spec: dict) -> None:
    """One task: its start state (its household's plus the supervisor's active task record), specs and ground
    truth."""
    from appworld.apps import get_all_apps
    from appworld.collections.models import ModelCollection
    from appworld.task import Task
    from munch import munchify

    models = ModelCollection.load(from_db_home_path=household_dbs, to_db_home_path=f":memory:{spec['id']}",
                                  load_apps=get_all_apps())
    models.supervisor.Task.create_save(supervisor_id=models.supervisor.Supervisor.find_one().id,
                                       instruction=spec["instruction"])
    task = Task(id=spec["id"], instruction=spec["instruction"], supervisor=munchify(supervisor),
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
    households, tasks, splits = world_tasks()
    paths = {}
    for household in households:  # Ada's is AppWorld's base_dbs; the drawn ones sit outside AppWorld's data
        paths[household["name"]] = (os.path.join(data, "base_dbs") if household is ADA
                                    else os.path.join(root, "households", household["name"]))
        build_household(household, api_docs, paths[household["name"]])
    supervisors = {household["name"]: household["supervisor"] for household in households}
    for spec in tasks:
        build_task(data, paths[spec["household"]], supervisors[spec["household"]], spec)
    os.makedirs(os.path.join(data, "datasets"))
    for split, task_ids in splits.items():
        with open(os.path.join(data, "datasets", f"{split}.txt"), "w") as file:
            file.write("\n".join(task_ids) + "\n")
    with open(os.path.join(root, "solutions.json"), "w") as file:
        json.dump({spec["id"]: spec["solution"] for spec in tasks}, file, indent=2)
    with open(os.path.join(root, "world.json"), "w") as file:
        json.dump({"splits": splits, "start_states": {spec["id"]: spec["household"] for spec in tasks}}, file,
                  indent=2)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
