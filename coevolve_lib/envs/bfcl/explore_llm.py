"""The LLM explorer of the paper (section 3.2): the Fig. 9 prompts with the Fig. 10 guidance block of the context's
signal type (or the curiosity-style block when unguided). The R runs step together, one batched model call per step;
each step is recorded as an (action, observation, run id) triplet. The reply's `<action>` is parsed with `safe_calls`,
never evaluated.
"""

from __future__ import annotations

from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.safe_calls import Call, parse_call_list
from coevolve_lib.engine.contexts import ExplorationTarget
from coevolve_lib.engine.explore import (
    NO_VALID_ACTION,
    Explorer,
    action_tags,
    guidance,
    render_history,
    run_ids,
    triplet_record,
)
from coevolve_lib.envs.bfcl.benchmark import is_error_observation, start_env
from coevolve_lib.prompts import clip, load_prompt

ACTION_FORMAT = ("Exactly one function call of the environment, written as Python with literal arguments only, "
                 "inside <action>...</action> tags, e.g. <action>cd(folder='document')</action>. "
                 "Use only the functions listed in the environment description.")


def describe_environment(target: ExplorationTarget) -> str:
    """The `{initial_obs}` of Fig. 9: the classes, each function's signature and one-line description, the task."""
    lines = [f"Environment classes: {', '.join(target.involved_classes)}.", "Available functions:"]
    for doc in target.tool_docs():
        params = (doc.get("parameters") or {}).get("properties", {})
        required = set((doc.get("parameters") or {}).get("required", []))
        signature = ", ".join(f"{p}: {s.get('type', 'string')}{'' if p in required else ' (optional)'}"
                              for p, s in params.items())
        text = doc.get("description", "").split("Tool description:")[-1].strip()
        lines.append(f"- {doc['name']}({signature}): {clip(text.split('. ')[0].rstrip('.'), 160)}.")
    lines += ["", "The environment starts in the state of this task:", target.description]
    return "\n".join(lines)


def parse_action(text: str, allowed_names) -> tuple[Call | None, str, str]:
    """(call or None, the action text, the rejection reason) of one explorer reply; the last <action> tag wins."""
    tags = action_tags(text or "")
    if not tags:
        return None, clip((text or "").strip(), 500), "no <action>...</action> tag in the reply"
    action = tags[-1].strip().strip("`").strip()
    calls, errors = parse_call_list(action, allowed_names)
    if errors or len(calls) != 1:
        return None, clip(action, 500), errors[0] if errors else f"expected one call, got {len(calls)}"
    return calls[0], action, ""


class LLMExplorer(Explorer):
    """The Fig. 9 prompts with the Fig. 10 guidance; the R runs step together, one batched model call per step."""

    name = "llm"

    def __init__(self, model: ChatModel):
        super().__init__()
        self.model = model

    def explore(self, target, context, config):
        system = load_prompt("explore_system").format(action_format=ACTION_FORMAT)
        block, initial_obs = guidance(context), describe_environment(target)
        generation = GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)
        runs = [{"index": k, "run_id": run_id, "env": start_env(target.source()), "steps": []}
                for k, run_id in enumerate(run_ids(target, context, config.runs))]
        triplets = []
        for step in range(config.calls_per_run):
            live = [run for run in runs if run["env"] is not None]
            if not live:
                break
            conversations = [[{"role": "system", "content": system},
                              {"role": "user", "content": load_prompt("explore_user").format(
                                  exploration_guidance=block, initial_obs=initial_obs,
                                  history_text=render_history(run["steps"]))}] for run in live]
            for run, reply in zip(live, self.cost.generate(self.model, conversations, generation)):
                if reply.error:  # the endpoint is failing even after its retries: end this run
                    self.cost.skip("model_error")
                    run["env"].close()
                    run["env"] = None
                    continue
                call, action, reason = parse_action(reply.text, run["env"].method_names)
                if call is None:
                    self.cost.skip("no_valid_action")
                    observation, valid = f"{NO_VALID_ACTION}: {reason}", False
                else:
                    [observation] = run["env"].execute([call])
                    action, valid = call.to_source(), not is_error_observation(observation)
                run["steps"].append((action, observation))
                triplets.append((run["index"], triplet_record(target, context, run["run_id"], step, action, observation,
                                                        valid, self.name)))
        for run in runs:
            if run["env"] is not None:
                run["env"].close()
        return [t for _, t in sorted(triplets, key=lambda item: (item[0], item[1]["step"]))]
