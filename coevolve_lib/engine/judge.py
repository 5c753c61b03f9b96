"""The LLM judge of the paper (Fig. 13): does an executed trajectory accomplish the task's query? Validation
(`envs.bfcl.validation.validate`, `envs.appworld.validation.validate_appworld`) asks it, when `SynthesisConfig.judge` is
on, after a spec passed every execution check. The reply is read with two regular expressions, never evaluated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from coevolve_lib.core.config import SynthesisConfig
from coevolve_lib.core.cost import Cost
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.safe_calls import CallParseError, parse_call
from coevolve_lib.prompts import OBSERVATION_CHARS, clip, load_prompt

MODALITY_HINT = "Tool call JSONs (name + arguments)"


def generation_config(config: SynthesisConfig) -> GenerationConfig:
    """How the synthesis stage's LLM calls (Fig. 12 abstraction, Fig. 13 judge) sample."""
    return GenerationConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature)


def tool_call_json(action: str) -> dict:
    """A BFCL-style call string as the judge shows it: {name, arguments[, positional_arguments]}."""
    try:
        call = parse_call(action)
    except CallParseError:
        return {"name": None, "raw": action}
    out = {"name": call.name, "arguments": call.kwargs_dict}
    if call.args:
        out["positional_arguments"] = list(call.args)
    return out


def judge(description: str, query: str, reference: list[str], steps: list[dict], model: ChatModel,
          config: SynthesisConfig, cost: Cost, call_json: Callable[[str], dict] = tool_call_json
          ) -> tuple[dict | None, str | None]:
    """The Fig. 13 judge on an executed trajectory: ({success, reason}, None) or (None, why it has no verdict).
    `call_json` shows one of the environment's call strings as {name, arguments}."""
    summary = "\n".join(f"step {index + 1}: {json.dumps(call_json(call), default=str)} -> "
                        f"{clip(obs, OBSERVATION_CHARS)}"
                        for index, step in enumerate(steps)
                        for call, obs in zip(step["calls"], step["observations"])) or "(no calls)"
    final = next((o for step in reversed(steps) for o in reversed(step["observations"])), "(no observation)")
    prompt = load_prompt("judge").format(
        task_description=description, query=query,
        ground_truth=json.dumps([call_json(a) for a in reference], default=str), modality_hint=MODALITY_HINT,
        trajectory_summary=summary, final_observation=clip(final, OBSERVATION_CHARS))
    generation = cost.ask(model, prompt, generation_config(config))
    if generation.error:
        return None, f"api_error: {generation.error}"
    verdict = parse_judge(generation.text)
    if verdict is None:
        return None, f"unparsable: {clip(generation.text, 200)!r}"
    return verdict, None


# `\W*` alone matches what `\W*\[?\s*` did (`[` and whitespace are `\W`) without retrying every split of a
# whitespace run (16 s on 32k characters); each pattern backtracks only over the run after its keyword: linear.
JUDGE_SUCCESS_RE = re.compile(r"success\W*(true|false)\b", re.IGNORECASE)
JUDGE_REASON_RE = re.compile(r"reason\W*:\s*\[?(.*)", re.IGNORECASE | re.DOTALL)


def parse_judge(text: str) -> dict | None:
    """`Success: true/false` (brackets and markdown tolerated) and `Reason: ...`; None when there is no verdict."""
    found = JUDGE_SUCCESS_RE.findall(text or "")
    if len({v.lower() for v in found}) != 1:  # none, or contradicting verdicts
        return None
    reason = JUDGE_REASON_RE.search(text)
    reason = reason.group(1).strip().rstrip("]").strip() if reason else ""
    return {"success": found[0].lower() == "true", "reason": reason}
