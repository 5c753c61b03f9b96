"""Validation by execution (paper section 3.3, Fig. 13): a task spec's action sequence is executed in fresh
environments and accepted or rejected (verdict/v1); an accepted spec becomes a pool task (task/v1).

The kit replays the calls itself instead of asking an LLM agent to execute them, so validation is exact and free; the
optional LLM judge of Fig. 13 (`judge`) then checks that the execution answers the query.
"""

from __future__ import annotations

import json

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel
from coevolve_lib.core.safe_calls import CallParseError, parse_call
from coevolve_lib.engine.judge import judge
from coevolve_lib.engine.tasks import content_id, verdict
from coevolve_lib.envs.bfcl.benchmark import is_error_observation, start_env

COMPLETION_CRITERION = "the environment state and the outputs equal those of the reference actions"
"""The completion criterion validation checks: the checker compares state and outputs with the reference actions."""
EMPTY_OUTPUTS = {"", "None", "null", "{}", "[]", "true", "false", "True", "False"}
"""Outputs that tell the user nothing (BFCL setters return None)."""


def _informative(observation: str) -> bool:
    """A successful output that says something: not None/empty, not a JSON object of empty values only."""
    if is_error_observation(observation) or observation.strip() in EMPTY_OUTPUTS:
        return False
    try:
        value = json.loads(observation)
    except (ValueError, RecursionError):
        return True
    return not (isinstance(value, dict) and all(v in ("", None, [], {}) for v in value.values()))


def replay(source: dict, actions: list[str]) -> tuple[dict, list[str], list[bool], dict]:
    """Execute `actions` one per step in a fresh env: (initial state, observations, per-step state change, final)."""
    env = start_env(source)
    initial = state = env.state()
    observations, changed = [], []
    for action in actions:
        observations += env.execute(action)
        after = env.state()
        changed.append(after != state)
        state = after
    env.close()
    return initial, observations, changed, state


def validate(spec: dict, config: SynthesisConfig, model: ChatModel | None = None,
             known_task_ids: set | None = None) -> dict:
    """Execute the spec's action sequence in fresh environments and decide (verdict/v1).

    Rejection reasons (all that apply are listed in `reasons`; `reason` is the first):
    "duplicate" (its spec id or resulting task id is in `known_task_ids`), "too_short" (< min_steps calls),
    "invalid_call" (a call `safe_calls` rejects against the involved classes' methods), "nondeterministic" (two
    executions in two fresh environments end in different states or outputs), "call_error" (a call failed, see
    `is_error_observation`, and the positive-reward rule below does not hold), "no_effect" (no state change and no
    informative output), "judge_rejected" (the optional Fig. 13 judge said false).

    Accepted with "objective_met" when every call succeeds. Accepted with "positive_reward" (the paper keeps a
    failed execution when the environment still returns a positive reward) under the kit's reading for BFCL,
    whose environment gives no reward of its own but whose checker rewards reaching the reference state:
    some calls fail, yet the environment reaches a state different from the initial one, a re-execution
    reproduces it, and the successful calls alone (at least min_steps of them) reach that same state. The task
    then keeps only the successful calls as its `reference_actions`, so the checker never asks an agent to
    reproduce an error message.

    Extra fields beyond the record doc: `reasons`, `task_id` and `reference_actions` of the pool task it would
    become, `judge_error` (why a judge verdict is missing: API error or unparsable reply) and judge `cost`.
    """
    known = known_task_ids or set()
    actions = list(spec["action_sequence"])
    reasons, details = [], []
    if len(actions) < config.min_calls:
        reasons.append("too_short")
        details.append(f"{len(actions)} calls < min_calls {config.min_calls}")
    env = start_env(spec)
    invalid = []
    for index, action in enumerate(actions):
        try:
            parse_call(action, env.method_names)
        except CallParseError as e:
            invalid.append(index)
            details.append(f"call {index} rejected: {e}")
    env.close()
    if invalid:
        reasons.append("invalid_call")
    initial, observations, _, final = replay(spec, actions)
    _, observations_again, _, final_again = replay(spec, actions)
    if (observations, final) != (observations_again, final_again):
        reasons.append("nondeterministic")
        details.append("two executions from the same initial state differ")
    changed = final != initial
    failed = [i for i, o in enumerate(observations) if i not in invalid and is_error_observation(o)]
    reference, positive = actions, False
    if failed:
        succeeded = [a for i, a in enumerate(actions) if i not in failed and i not in invalid]
        *_, final_succeeded = replay(spec, succeeded)
        positive = changed and final_succeeded == final and len(succeeded) >= config.min_calls
        details.append(f"calls {failed} failed; " + ("the successful calls alone reach the same changed state"
                                                      if positive else "no reproducible positive outcome"))
        if positive:
            reference = succeeded
        else:
            reasons.append("call_error")
    if not changed and not any(_informative(o) for o in observations):
        reasons.append("no_effect")
        details.append("no state change and no informative output")
    task_id = content_id(spec["initial_config"], spec["query"], reference)
    if spec["spec_id"] in known or task_id in known:
        reasons.insert(0, "duplicate")
        details.insert(0, "already in the pool")
    judged, judge_error, cost = None, None, Cost()
    if config.judge and model is not None and not reasons:
        steps = [{"calls": [a], "observations": [o]} for a, o in zip(actions, observations)]
        judged, judge_error = judge(spec["intent"], spec["query"], actions, steps, model, config, cost)
        if judged is not None and not judged["success"]:
            reasons.append("judge_rejected")
            details.append(f"judge: {judged['reason']}")
    return verdict(spec, task_id, reference, reasons, "positive_reward" if positive else "objective_met",
                   "; ".join(details), observations, cost, judged, judge_error)
