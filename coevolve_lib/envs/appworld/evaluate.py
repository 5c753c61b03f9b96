"""TGC and SGC of a model on an AppWorld split (`evaluate_appworld`): one greedy episode per task through the kit's
rollout loop and AppWorld's own evaluator (episodes: `envs/appworld/episode.py`), written as a `results/v2` document."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

from coevolve_lib.core.config import RolloutConfig
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.paths import repo_relative
from coevolve_lib.core.records import append_jsonl, config_hash
from coevolve_lib.core.results import write_result
from coevolve_lib.envs.appworld.benchmark import data_root, load_tasks, measured_records, scenarios_completed
from coevolve_lib.envs.appworld.episode import AppWorldEpisodes
from coevolve_lib.envs.appworld.server import AppWorldServerConfig
from coevolve_lib.envs.appworld.synthetic import SYNTHETIC_BENCHMARK, synthetic_start_states
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts
from coevolve_lib.rollout.evaluation import EvaluationError


def evaluate_appworld(model: ChatModel, split: str, root: str | Path | None = None,
                      phase: RolloutPhase | None = None, *, out: str | Path, limit: int | None = None,
                      profile: str = "tiny", experiment: str = "appworld", episodes: AppWorldEpisodes | None = None,
                      server_config: AppWorldServerConfig | None = None, progress: bool = False,
                      synthetic: bool | None = None) -> dict:
    """TGC and SGC of `model` on an AppWorld split (one greedy episode per task by default), written to `out` as a
    `results/v2` document (two rows, `tgc` and `sgc`, in percent); every episode's record is appended to
    `<out>.rollouts.jsonl` as it ends. Returns the document. Its eval_set is `appworld/<split>` on official data,
    `appworld-synthetic/<split>` on the kit's synthetic world (`synthetic`; None: whether `root` is that world), so
    that no table shows a synthetic split as the paper's.

    Environment errors (`environment_error`) are counted in `details` and left out of both metrics; a task whose
    episode hit one is listed in `per_task` with its error type. `episodes`: an `AppWorldEpisodes` to use (e.g.
    with a test's running servers); by default one is made for `root` and `split` (its servers run as `server_config`
says: by default in the OS-level sandbox), and closed at the end."""
    phase = phase or RolloutPhase(RolloutConfig(batch_size=16))  # 16 live episodes (servers), as always
    root = data_root(root)
    tasks = load_tasks(split, root)[:limit]
    if not tasks:
        raise EvaluationError(f"no AppWorld task to evaluate ({split}, limit {limit})")
    out = Path(out)
    rollouts_path = out.with_suffix(".rollouts.jsonl")
    rollouts_path.unlink(missing_ok=True)
    # the hash is of what the document records: the root relative to the checkout, not this machine's folders
    settings = {"benchmark": "appworld", "split": split, "root": repo_relative(root), "limit": limit,
                "model": model.name, "rollout": phase.recorded()}
    start = time.perf_counter()
    owned = episodes is None
    episodes = AppWorldEpisodes(root, split=split, server_config=server_config) if owned else episodes
    with episodes if owned else nullcontext(episodes):
        records = run_rollouts(model, tasks, phase, on_record=lambda r: append_jsonl(rollouts_path, r),
                               progress=progress, new_episode=episodes)
    measured = measured_records(records)
    if not measured:
        raise EvaluationError(f"every AppWorld episode ended in an environment error (the first: "
                              f"{records[0]['error_message'][:300]})")
    if all(r["terminated"] == "model_error" for r in records):
        raise EvaluationError(f"every episode ended in a model error (the first: {records[0]['error_message']}); "
                              "is the model's endpoint up?")
    try:
        scenarios = scenarios_completed(records)
    except ValueError:  # every scenario has an environment error: SGC measured nothing
        scenarios = {}
    synthetic = synthetic_start_states(root) is not None if synthetic is None else synthetic
    world = SYNTHETIC_BENCHMARK if synthetic else "appworld"
    common = {"benchmark": "appworld", "eval_set": f"{world}/{split}", "k": 1,
              "temperature": phase.generation.temperature}
    if phase.generation.seed is not None:
        common["seed"] = phase.generation.seed
    per_task = [{"task_id": r["task_id"], "success": r["success"], "pass_fraction": r["pass_fraction"],
                 "error_type": r["error_type"], "terminated": r["terminated"], "steps": len(r["steps"]),
                 "format_errors": r["format_errors"], "environment_error": r["environment_error"],
                 "completion_tokens": r["completion_tokens"]} for r in records]
    correct = sum(r["success"] for r in measured)
    rows = [{**common, "metric": "tgc", "n": len(measured), "correct": correct,
             "value": round(100.0 * correct / len(measured), 2), "per_task": per_task},
            {**common, "metric": "sgc", "n": len(scenarios), "correct": sum(scenarios.values()),
             "value": round(100.0 * sum(scenarios.values()) / len(scenarios), 2) if scenarios else None}]
    return write_result(out, experiment=experiment, profile=profile, model=model.name,
                        config_hash=config_hash(settings), config=settings, metrics=rows,
                        details={"tasks": len(records), "environment_errors": len(records) - len(measured),
                                 "model_errors": sum(r["terminated"] == "model_error" for r in records),
                                 "code_faults": sum(bool(r.get("code_fault")) for r in records),
                                 "format_errors": sum(r["format_errors"] for r in records),
                                 "positive_reward": sum(r["positive_reward"] for r in measured),
                                 "retried_episodes": sum(r["attempts"] > 1 for r in records),
                                 "seconds": round(time.perf_counter() - start, 2),
                                 "rollouts_path": str(rollouts_path)})
