"""Synthesized AppWorld tasks: a task spec becomes a real AppWorld task on disk, validated by AppWorld's own evaluator.

The paper validates an abstracted task by executing it in the environment; on AppWorld the judge is AppWorld's own
evaluator (its tests on the apps' databases and the answer). So a spec (query + action sequence of call strings,
`envs.appworld.calls`, + where its answer comes from) is written as an AppWorld task (specs.json, dbs, ground_truth with
evaluation.py) by `envs/appworld/task_writer.py` in AppWorld's venv, which defines the expected outcome by running the
reference solution; then AppWorld's server runs the reference again in a fresh initialize of the written task and
evaluates it.

Official AppWorld data is never written into: tasks go to an overlay root (`overlay_root`) whose `data/` links to
the source root's, with a real `data/tasks/` of links plus the synthesized task folders. The kit never imports
`appworld` and never runs the spec's code itself: AppWorld runs it, in the writer and in the server.

    root = overlay_root(world_root, out_dir)
    with AppWorldServer(AppWorldServerConfig(root=root)) as server:
        api_docs = server.client.api_docs()
        write_tasks(root, specs, api_docs)                  # one writer run for a round's specs
        verdicts = [validate_appworld(spec, config, server, api_docs, root, known) for spec in specs]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from coevolve_lib.core.config import RunError, SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.paths import shown_path
from coevolve_lib.core.safe_calls import CallParseError
from coevolve_lib.engine.judge import judge
from coevolve_lib.engine.tasks import content_id, verdict
from coevolve_lib.envs.appworld.benchmark import AppWorldEnv, AppWorldEnvConfig, load_task
from coevolve_lib.envs.appworld.calls import parse_appworld_call, solution_steps
from coevolve_lib.envs.appworld.server import APPWORLD_VENV, AppWorldServer, appworld_python

WRITER = Path(__file__).with_name("task_writer.py")
OVERLAY = "appworld_root"
SOURCE_MARKER = "source_root.txt"
"""File beside `data/` naming the source root the overlay links (`overlay_root`)."""
WRITTEN = "synthesized"
"""Folder beside `data/` holding the writer's result per synthesized task (`<task id>.json`), so that a spec is
written (or found failing) once."""


def overlay_root(source_root: Path, out_dir: Path) -> Path:
    """A writable AppWorld data root at `out_dir/appworld_root`: `data/` links every entry of the source root's
    `data/` but `tasks/`, a real folder with a link per source task beside the synthesized tasks. Idempotent: a new
    call links the source tasks added since and keeps the synthesized ones; the source root is only read. A folder
    made on another source root (a rebuilt synthetic world, another APPWORLD_ROOT) is a RunError: its tasks were
    written from that root's start states."""
    source = Path(source_root).resolve() / "data"
    data = Path(out_dir) / OVERLAY / "data"
    marker = data.parent / SOURCE_MARKER
    if marker.exists() and marker.read_text().strip() != str(source.parent):
        raise RunError(f"{shown_path(out_dir)} was made on the AppWorld data root {marker.read_text().strip()}, not "
                       f"{source.parent} (a rebuilt synthetic world or another APPWORLD_ROOT): delete the folder, or "
                       "use another one")
    tasks = data / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    if not marker.exists():  # several processes (or threads) of one run may write it at once: the same text
        handle, partial = tempfile.mkstemp(prefix=f".{SOURCE_MARKER}.", dir=marker.parent)
        with os.fdopen(handle, "w") as file:
            file.write(f"{source.parent}\n")
        os.replace(partial, marker)
    links = [(data / entry.name, entry) for entry in source.iterdir() if entry.name != "tasks"]
    if (source / "tasks").is_dir():
        links += [(tasks / task.name, task) for task in (source / "tasks").iterdir()]
    for link, target in links:
        if not os.path.lexists(link):
            try:
                link.symlink_to(target, target_is_directory=target.is_dir())
            except FileExistsError:  # another training process (multi-GPU runs) made it first
                pass
    return data.parent


def appworld_task_id(spec: dict) -> str:
    """`syn<16 hex>_1`: a content hash of the task (its answer rule included), in AppWorld's `<scenario>_<n>` form
    (AppWorld asserts exactly one underscore)."""
    initial = {**spec["initial_config"], "answer_from": spec.get("answer_from")}
    return "syn" + content_id(initial, spec["query"], spec["action_sequence"]).removeprefix("syn-") + "_1"


def _written_path(root: Path, task_id: str) -> Path:
    return Path(root) / WRITTEN / f"{task_id}.json"


def write_tasks(root: Path, specs: list[dict], api_docs: dict, venv: Path = APPWORLD_VENV,
                timeout_s: float = 900, keep_failed: bool = False) -> dict[str, dict]:
    """Write each spec as an AppWorld task under `root/data/tasks/` (one writer run in AppWorld's venv for all specs
    not written yet). Returns per spec id `{task_id, written, error, answer, changes, observations}`: `changes` is
    the number of models the reference changed, `observations` its calls' outputs; a spec whose calls do not parse or
    whose reference raised gets no folder and an `error`, unless `keep_failed` (the "w/o validation" ablation): then
    a reference that raised is written too, its expected outcome the changes made before it raised (and no answer),
    with the `error`. Results are kept in `root/synthesized/`: calling again runs nothing for specs already done (or,
    with `keep_failed`, already written)."""
    root = Path(root)
    results, todo = {}, {}
    for spec in specs:
        task_id = appworld_task_id(spec)
        stored = _written_path(root, task_id)
        if stored.exists():
            record = json.loads(stored.read_text())
            if record["written"] or not keep_failed:  # a reference that raised is written now if kept
                results[spec["spec_id"]] = record
                continue
        try:
            steps = solution_steps(spec["action_sequence"], api_docs, spec.get("answer_from"))
        except (CallParseError, ValueError) as error:
            results[spec["spec_id"]] = {"task_id": task_id, "written": False, "error": f"invalid spec: {error}",
                                        "answer": None, "changes": 0, "observations": []}
            continue
        labels = ["login", *spec["action_sequence"], "complete_task"]
        todo.setdefault(task_id, {"task_id": task_id, "source_task": spec["initial_config"]["appworld_task"],
                                  "instruction": spec["query"], "answer_task": spec.get("answer_from") is not None,
                                  "keep_failed": keep_failed,
                                  "steps": [{"label": label, "code": code} for label, code in zip(labels, steps)],
                                  "spec_ids": []})["spec_ids"].append(spec["spec_id"])
    if todo:
        for task_id, result in _run_writer(root, list(todo.values()), venv, timeout_s).items():
            calls = len(todo[task_id]["steps"]) - 2  # the outputs of the calls, not of login and complete_task
            record = {"task_id": task_id, **result, "observations": result["observations"][1:calls + 1]}
            _store(_written_path(root, task_id), record)
            results.update({spec_id: record for spec_id in todo[task_id]["spec_ids"]})
    return results


def _store(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(record, indent=2, default=str))
    partial.replace(path)


def _run_writer(root: Path, tasks: list[dict], venv: Path, timeout_s: float) -> dict[str, dict]:
    """One run of the writer script in a scratch APPWORLD_ROOT inside `root` (an overlay of it: same file system, so
    the writer's finished task folders rename into `root/data/tasks/`)."""
    scratch = Path(tempfile.mkdtemp(prefix=".writer-", dir=root))
    try:
        scratch_root = overlay_root(root, scratch)
        request, output = scratch / "request.json", scratch / "result.json"
        request.write_text(json.dumps({"tasks_dir": str((Path(root) / "data" / "tasks").resolve()), "tasks": tasks}))
        env = {**os.environ, "APPWORLD_ROOT": str(scratch_root.resolve()),
               "APPWORLD_CACHE": str(Path(venv).resolve() / "appworld-cache")}
        # -I: the script's folder (which holds the kit's `appworld.py`) and PYTHONPATH stay off AppWorld's sys.path.
        result = subprocess.run([str(appworld_python(venv)), "-I", str(WRITER), str(request), str(output)], env=env,
                                cwd=scratch_root, capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"the AppWorld task writer failed (status {result.returncode}):\n"
                               f"{result.stderr[-3000:]}")
        return json.loads(output.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_on_server(server: AppWorldServer, root: Path, task_id: str, steps: list[str]) -> tuple[dict, list[str]]:
    """The reference solution in a fresh initialize of the written task on the server, cell by cell: AppWorld's
    evaluation (`AppWorldEnv.score`) and the calls' outputs."""
    env = AppWorldEnv(load_task(task_id, root), server, AppWorldEnvConfig(max_steps=len(steps)))
    env.reset()
    try:
        outputs = [env.execute(code) for code in steps]
        return env.score(), outputs[1:-1]
    finally:
        env.close()


def _cheap_rejections(spec: dict, actions: list[str], task_id: str, config: SynthesisConfig, api_docs: dict,
                      known: set) -> tuple[list[str], list[str]]:
    """(reasons, details) of the checks that need no execution: "duplicate" (spec id or task id in `known`),
    "too_short" (< min_calls calls), "invalid_call" (a call that does not parse against the API docs: it cannot be
    rendered to code)."""
    reasons, details = [], []
    if spec["spec_id"] in known or task_id in known:
        reasons.append("duplicate")
        details.append("already in the pool")
    if len(actions) < config.min_calls:
        reasons.append("too_short")
        details.append(f"{len(actions)} calls < min_calls {config.min_calls}")
    invalid = []
    for index, action in enumerate(actions):
        try:
            parse_appworld_call(action, api_docs)
        except CallParseError as e:
            invalid.append(index)
            details.append(f"call {index} rejected: {e}")
    if invalid:
        reasons.append("invalid_call")
    return reasons, details


def validate_appworld(spec: dict, config: SynthesisConfig, server: AppWorldServer, api_docs: dict, root: Path,
                      known_task_ids: set | None = None, model: ChatModel | None = None) -> dict:
    """Validate an AppWorld task spec by AppWorld's own execution and evaluator (verdict/v1, `engine.tasks.verdict`).
    The spec is written first if it is not yet (`write_tasks`; call that with a round's specs to batch).

    Rejections (all that apply in `reasons`, `reason` the first; the cheap ones skip execution): "duplicate" (spec id or
    task id in `known_task_ids`), "too_short" (< min_calls calls), "invalid_call" (a call that does not parse against
    the API docs), "call_error" (the writer's reference run raised), "no_effect" (no database change and no answer),
    "nondeterministic" (the server's rerun of the reference in a fresh initialize is not a success although the writer's
    run of the same actions defined its tests). Accepted with "objective_met" when AppWorld's evaluator says success;
    then, with `config.judge` and a `model`, the Fig. 13 judge reads the executed calls and their outputs and may reject
    it ("judge_rejected"). The paper's other acceptance, a failed execution with positive reward (pass fraction > 0),
    has no case here: the execution validated is the reference itself, whose own run wrote the tests, so a rerun that
    passes only some of them (e.g. a different answer, while the no-change test passes) is not reproducible, and its
    reference would not solve its own task (docs/deviations.md).
    """
    actions = list(spec["action_sequence"])
    task_id = appworld_task_id(spec)
    reasons, details = _cheap_rejections(spec, actions, task_id, config, api_docs, known_task_ids or set())
    observations = []
    if not reasons:
        written = write_tasks(root, [spec], api_docs, server.config.venv)[spec["spec_id"]]
        observations = written["observations"]
        if written["error"] is not None:
            reasons.append("call_error")
            details.append(f"the reference raised: {written['error']}")
        elif not written["changes"] and written["answer"] is None:
            reasons.append("no_effect")
            details.append("no database change and no answer")
        else:
            steps = solution_steps(actions, api_docs, spec.get("answer_from"))
            score, observations = _run_on_server(server, root, task_id, steps)
            details.append(f"AppWorld's evaluation: {len(score['passes'])}/{score['num_tests']} tests pass"
                           + "".join(f"; failed: {failure}" for failure in score["failures"]))
            if not score["success"]:
                reasons.append("nondeterministic")
                details.append("the server's rerun of the reference does not reproduce the writer's run")
    judged, judge_error, cost = None, None, Cost()
    if config.judge and model is not None and not reasons:
        steps = [{"calls": [a], "observations": [o]} for a, o in zip(actions, observations)]
        judged, judge_error = judge(spec["intent"], spec["query"], actions, steps, model, config, cost,
                                    lambda action: parse_appworld_call(action, api_docs).as_json())
        if judged is not None and not judged["success"]:
            reasons.append("judge_rejected")
            details.append(f"judge: {judged['reason']}")
    return verdict(spec, task_id, actions, reasons, "objective_met", "; ".join(details), observations, cost, judged,
                   judge_error)


def accept_appworld_unvalidated(spec: dict, config: SynthesisConfig, api_docs: dict, root: Path,
                                known_task_ids: set | None = None) -> dict:
    """The "w/o validation" ablation's verdict on AppWorld (Table 11, `synthesis.validate: false`): an AppWorld task
    exists only as a written task, so the spec is written (`write_tasks(keep_failed=True)`: a reference that raises is
    written with what it changed before) and kept as abstracted, unchecked: no rerun, no evaluator, no no-effect
    check. Rejected only as a duplicate, shorter than `min_calls`, with a call that does not parse against the API
    docs (it cannot be rendered to code), or when AppWorld could not write it at all ("unwritable")."""
    actions = list(spec["action_sequence"])
    task_id = appworld_task_id(spec)
    reasons, details = _cheap_rejections(spec, actions, task_id, config, api_docs, known_task_ids or set())
    details.insert(0, "validation off (synthesis.validate: false): written, not checked")
    observations = []
    if not reasons:
        written = write_tasks(root, [spec], api_docs, keep_failed=True)[spec["spec_id"]]
        observations = written["observations"]
        if not written["written"]:
            reasons.append("unwritable")
        if written["error"] is not None:
            details.append(f"the reference raised: {written['error']}")
    return verdict(spec, task_id, actions, reasons, "unvalidated", "; ".join(details), observations)
