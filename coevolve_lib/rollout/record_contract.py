"""The rollout record contract: what every environment's rollout/v1 record must hold (docs/records.md), checked as
an episode hands its record over (`run_rollouts`), so a broken environment fails in one line, naming the field."""

from __future__ import annotations

from coevolve_lib.core.results import type_names

ROLLOUT_FIELDS = {"task_id": str, "sample_index": int, "messages": list, "steps": list, "score": (int, float),
                  "success": bool, "terminated": (str, type(None))}
"""What every rollout record must hold, whatever its environment (what the training loop, the signals and evaluation
read; docs/records.md's rollout/v1): `steps` is a list of `{"calls": [str, ...], ...}` and `score` lies in [0, 1].
Token-level records also hold `prompt_ids`, `completion_ids` and `completion_mask` (lists of ints, the last two of
one length)."""
TOKEN_FIELDS = ("prompt_ids", "completion_ids", "completion_mask")


def rollout_problem(record, token_level: bool) -> str | None:
    """The first way `record` breaks the rollout contract (`ROLLOUT_FIELDS`), as `field: what`; None if it keeps it."""
    if not isinstance(record, dict):
        return f"the record is a {type(record).__name__}, not a mapping"
    for name, types in ROLLOUT_FIELDS.items():
        if name not in record:
            return f"{name}: missing"
        if isinstance(record[name], bool) is not (types is bool) or not isinstance(record[name], types):
            return f"{name}: {type(record[name]).__name__} {record[name]!r:.60}, not {type_names(types)}"
    if not 0.0 <= record["score"] <= 1.0:
        return f"score: {record['score']!r}, not in [0, 1]"
    for index, step in enumerate(record["steps"]):
        if not (isinstance(step, dict) and isinstance(step.get("calls"), list)
                and all(isinstance(call, str) for call in step["calls"])):
            return f"steps[{index}]: not a mapping with `calls`, a list of call strings"
    if token_level:
        for name in TOKEN_FIELDS:
            if not (isinstance(record.get(name), list) and all(type(i) is int for i in record[name])):
                return f"{name}: missing or not a list of token ids (token-level rollouts)"
        if len(record["completion_ids"]) != len(record["completion_mask"]):
            return "completion_mask: not as long as completion_ids"
    return None
