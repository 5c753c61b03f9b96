"""The records a round makes of a task, whatever its environment: the task spec an abstraction drafts (taskspec/v1),
the verdict of a spec that was not executed (the "w/o validation" ablation), and the pool task an accepted spec
becomes (task/v1). Content names them: equal content, equal id."""

from __future__ import annotations

import hashlib
import json

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost


def content_id(initial_config: dict, query: str, actions: list[str]) -> str:
    """The content hash that names a spec and its pool task: equal content, equal id."""
    blob = json.dumps([initial_config, query, list(actions)], sort_keys=True, ensure_ascii=False, default=str)
    return "syn-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def task_spec(draft: dict, source: dict, abstraction: str) -> dict:
    """The taskspec/v1 record of an abstraction draft (every environment's abstraction makes these)."""
    return {
        "schema": "taskspec/v1",
        "spec_id": content_id(source["initial_config"], draft["query"], draft["action_sequence"]),
        "intent": draft["intent"],
        "query": draft["query"],
        "action_sequence": draft["action_sequence"],
        "completion_criterion": draft["completion_criterion"],
        "initial_config": source["initial_config"],
        "involved_classes": list(source["involved_classes"]),
        "data_version": source["data_version"],
        "source": {"task_id": source["task_id"], "signal_id": source.get("signal_id"),
                   "signal_type": source.get("signal_type"), "context_id": source.get("context_id"),
                   "run_ids": draft["run_ids"]},
        "abstraction": abstraction,
    }


def unique_specs(specs, cost: Cost) -> list[dict]:
    """`specs` (an iterable of taskspec/v1 records) each once by content (`spec_id`), in order; a repeat is skipped
    and counted in `cost` as `duplicate`."""
    kept, seen = [], set()
    for spec in specs:
        if spec["spec_id"] in seen:
            cost.skip("duplicate")
            continue
        seen.add(spec["spec_id"])
        kept.append(spec)
    return kept


def verdict(spec: dict, task_id: str, reference_actions: list[str], reasons: list[str], accepted_as: str,
            detail: str = "", observations: list[str] = (), cost: Cost | None = None, judge: dict | None = None,
            judge_error: str | None = None) -> dict:
    """The verdict/v1 record of a spec: accepted when no `reasons` (then its reason is `accepted_as`, e.g.
    "objective_met"), else rejected for the first of them. `task_id` and `reference_actions` name the pool task an
    accepted spec becomes."""
    return {"schema": "verdict/v1", "spec_id": spec["spec_id"], "accepted": not reasons,
            "reason": reasons[0] if reasons else accepted_as, "reasons": list(reasons), "detail": detail,
            "observations": list(observations), "judge": judge, "judge_error": judge_error, "task_id": task_id,
            "reference_actions": list(reference_actions), "cost": (cost or Cost()).as_dict(skipped=False)}


def accept_unvalidated(spec: dict, config: SynthesisConfig, known_task_ids: set | None = None) -> dict:
    """The verdict of the "w/o validation" ablation (Table 11, `synthesis.validate: false`): nothing is executed; the
    spec is kept as abstracted ("unvalidated") unless it is a duplicate or shorter than `min_calls`."""
    actions = list(spec["action_sequence"])
    task_id = content_id(spec["initial_config"], spec["query"], actions)
    reasons = (["duplicate"] if spec["spec_id"] in (known_task_ids or ()) or task_id in (known_task_ids or ()) else [])
    reasons += ["too_short"] if len(actions) < config.min_calls else []
    return verdict(spec, task_id, actions, reasons, "unvalidated",
                   detail="validation off (synthesis.validate: false): not executed")


CARRIED_FIELDS = ("answer_from",)
"""An environment's own fields of a task, which a spec carries into its pool task and a task re-posed from a pool task
(Reflexion) carries on (AppWorld's `answer_from`: what the task's answer is read from)."""


def carried_fields(record: dict) -> dict:
    """The `CARRIED_FIELDS` that `record` (a spec or a pool task) holds."""
    return {name: record[name] for name in CARRIED_FIELDS if name in record}


def to_pool_task(spec: dict, verdict: dict, pool_version: int, provenance_extra: dict | None = None) -> dict:
    """The task/v1 record of an accepted spec (its reference actions are the verdict's, see `validate`)."""
    if not verdict["accepted"] or verdict["spec_id"] != spec["spec_id"]:
        raise ValueError(f"spec {spec['spec_id']} has no accepting verdict (got {verdict['reason']!r})")
    source = spec["source"]
    return {
        "schema": "task/v1",
        "task_id": verdict["task_id"],
        "query": spec["query"],
        "intent": spec["intent"],
        "initial_config": spec["initial_config"],
        "involved_classes": spec["involved_classes"],
        "data_version": spec["data_version"],
        "reference_actions": verdict["reference_actions"],
        "completion_criterion": spec["completion_criterion"],
        **carried_fields(spec),
        "pool_version": pool_version,
        "provenance": {"signal": source.get("signal_id"), "context": source.get("context_id"),
                       "runs": source.get("run_ids", []), "spec": spec["spec_id"], "verdict": verdict["reason"],
                       "origin_task": source.get("task_id"), "signal_type": source.get("signal_type"),
                       "abstraction": spec.get("abstraction"), **(provenance_extra or {})},
    }
