"""The held-out evaluation sets of a profile: validated synthetic tasks built as the pool's D_0 is (unguided schema
exploration, the deterministic abstraction, validation; `offline`), from their own exploration seed, which the policy
never trains on. They measure what a small model learned, at a scale where the BFCL val split itself stays at 0. The
BFCL val split remains the headline metric; every result says which set it was measured on (`eval_set`).

    new_tasks  (a) new tasks in the pool's environments: the environments D_0 and the rounds explore. D_0 and every
               round reject a task whose content matches one of them (`engine.pool.content_keys`, `heldout_leak` in the
               round reports), so neither the static pool nor CoEvolve's rounds can "discover" the test set.
    new_envs   (b) tasks in unseen environments: BFCL's val-split environments, which nothing trains on or explores.

Frozen: a set is derived deterministically from its settings and source environments (`heldout_key`), cached under
`.cache/heldout/<key>/`, and the task ids of the sets the kit's results use are committed in
`coevolve_lib/data/heldout_sets.json`. A code change that alters a committed set is an error, never a silent change
of the benchmark.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, replace

from coevolve_lib.core.config import ExploreConfig, HeldoutSetConfig, RunError, SynthesisConfig
from coevolve_lib.core.environment import RoundStages
from coevolve_lib.core.paths import CACHE_DIR, LIBRARY_DATA
from coevolve_lib.core.records import config_hash
from coevolve_lib.engine.feedback import FeedbackConfig, faults, synthesize_initial
from coevolve_lib.engine.pool import TaskPool

log = logging.getLogger(__name__)

COMMITTED_SETS = LIBRARY_DATA / "heldout_sets.json"
"""Task ids of the held-out sets behind the committed results, by key."""
def offline(explore: ExploreConfig, synthesis: SynthesisConfig) -> tuple[ExploreConfig, SynthesisConfig]:
    """How a held-out set is built whatever a run's own explorer and synthesis settings: the schema explorer, the
    deterministic abstraction, validation on, no judge. The set is the profile's fixed benchmark, so every variant of
    a study (without validation, with another explorer) is measured on the same tasks."""
    return (replace(explore, explorer="schema", context_builder="heuristic"),
            replace(synthesis, abstraction="deterministic", judge=False, validate=True))


def heldout_key(name: str, source_ids: list[str], environment_identity: dict, explore: ExploreConfig,
                synthesis: SynthesisConfig, heldout: HeldoutSetConfig) -> str:
    """The set's identity: everything that decides which tasks it holds (`validate` is left out: always on), with
    the environment's part (`Environment.heldout_identity`; BFCL: its data version and classes). The
    unseen-environment set keeps the key it had as the kit's only set; the other names its source environments."""
    explore, synthesis = offline(explore, synthesis)
    synthesis_settings = {k: v for k, v in asdict(synthesis).items() if k != "validate"}
    identity = {**environment_identity, "explorer": explore.explorer, "explore_steps": explore.calls_per_run,
                "synthesis": synthesis_settings, "heldout": asdict(heldout)}
    if name != "new_envs":
        identity.update({"set": name, "sources": sorted(source_ids)})
    return config_hash(identity)


def ids_digest(task_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(task_ids)).encode()).hexdigest()


def heldout_tasks(name: str, sources: list, environment_identity: dict, explore: ExploreConfig,
                  synthesis: SynthesisConfig, heldout: HeldoutSetConfig, target: Callable, stages: RoundStages,
                  progress: bool = False, max_observation_chars: int | None = None,
                  environment_name: str = "the environment") -> tuple[str, list[dict]]:
    """(key, tasks) of the held-out set `name`, explored from the `sources` environments (each with an `id`) through
    the environment's `target` and round `stages`: built once (seconds) and cached; checked against the committed
    ids. `environment_identity`: the environment's part of the key (`Environment.heldout_identity`);
    `max_observation_chars`: the triplets' observation budget (`FeedbackConfig`); `environment_name`: who the log
    lines name. A build whose environment faulted (a step that raised) is used by this command but never cached as the
    set; one that holds no task is a RunError."""
    key = heldout_key(name, [t.id for t in sources], environment_identity, explore, synthesis, heldout)
    folder = CACHE_DIR / "heldout" / key
    if not (folder / "round_000" / "report.json").exists():
        # built aside and moved into place whole: two processes (e.g. `make test`'s two halves) never share a
        # half-built set
        staging = folder.with_name(f"{key}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        explore, synthesis = offline(explore, synthesis)
        unguided = FeedbackConfig(explore=replace(explore, runs=heldout.runs, seed=heldout.seed, guided=False),
                                  synthesis=synthesis, max_observation_chars=max_observation_chars,
                                  environment_name=environment_name)
        report = synthesize_initial(sources, TaskPool(staging / "pool.jsonl"), staging / "round_000", unguided,
                                    target, stages, size=heldout.size, progress=progress)
        met = faults(report)
        if met:  # a set that would differ once the environment works: not the set, not cached
            tasks = TaskPool(staging / "pool.jsonl").tasks
            shutil.rmtree(staging, ignore_errors=True)
            log.warning("%s: held-out set %s: %d environment fault(s) while building it; %d tasks, used by this "
                        "command and not cached (the next command builds it again)", environment_name, name, met,
                        len(tasks))
            if not tasks:
                raise RunError(f"{environment_name}: the held-out set {name} holds no task: its build met {met} "
                               "environment fault(s) (the log says which)")
            return key, tasks
        shutil.rmtree(folder, ignore_errors=True)  # a set left half-built by an older version
        try:
            staging.rename(folder)
        except OSError:  # another process moved its copy first: the same set
            shutil.rmtree(staging, ignore_errors=True)
    tasks = TaskPool(folder / "pool.jsonl").tasks
    committed = json.loads(COMMITTED_SETS.read_text()) if COMMITTED_SETS.exists() else {}
    if key in committed and committed[key]["ids_sha256"] != ids_digest([t["task_id"] for t in tasks]):
        raise RuntimeError(
            f"the held-out set {key} built here differs from the one committed in {COMMITTED_SETS.name} (a code change "
            "altered exploration, abstraction or validation): committed results were measured on the old set. Restore "
            f"the old behaviour, or rebuild the set and every result measured on it, then re-commit its ids with "
            f"`python -m coevolve_lib heldout --commit`.")
    return key, tasks


def commit_set(key: str, tasks: list[dict], profile: str) -> None:
    """Record a set's task ids in `heldout_sets.json` (the results measured on it then stay comparable)."""
    committed = json.loads(COMMITTED_SETS.read_text()) if COMMITTED_SETS.exists() else {}
    ids = sorted(t["task_id"] for t in tasks)
    committed[key] = {"profile": profile, "size": len(ids), "ids_sha256": ids_digest(ids), "task_ids": ids}
    COMMITTED_SETS.write_text(json.dumps(committed, indent=1, sort_keys=True) + "\n")
