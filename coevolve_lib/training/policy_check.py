"""What a starting policy gives GRPO on a run's pool (`python -m coevolve_lib warm-start` prints it): sampled success
and the share of D_0 groups with mixed outcomes (the only groups with an advantage), token entropy, and on each
held-out set what sampling reaches beyond greedy decoding."""

from __future__ import annotations

from coevolve_lib.core.models import HFChatModel
from coevolve_lib.rollout.agent import rollout_phase, run_rollouts
from coevolve_lib.rollout.evaluation import task_outcomes


def token_entropy(model, records: list[dict], temperature: float) -> float | None:
    """Mean entropy (nats) of the policy's next-token distribution at `temperature` over the tokens it generated in
    token-level rollout `records`: the quantity TRL logs as `entropy` during GRPO. A warm start near 0 is
    overconfident: its K samples of a task are nearly the same episode, so few groups carry an advantage."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for record in records:
            prompt, completion = record["prompt_ids"], record["completion_ids"]
            mask = torch.tensor(record["completion_mask"], dtype=torch.bool)
            if not mask.any():
                continue
            ids = torch.tensor([prompt + completion], device=model.model.device)
            logits = model.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / max(temperature, 1e-6)
            log_probs = logits.log_softmax(-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1).cpu()[mask]
            total, count = total + float(entropy.sum()), count + int(mask.sum())
    return round(total / count, 4) if count else None


RL_GATE = {"d0_tasks_mixed_%": (20.0, 100.0), "d0_sampled_success_%": (10.0, 60.0)}
"""What a warm start should give GRPO on D_0 at K = 8 (issue: learning visible): at least a fifth of the groups with
mixed outcomes (an advantage), and a mean success with room to rise and to fall."""


def check_policy(engine, policy_path: str, samples: int = 8, temperature: float | None = None, seed: int = 0,
                 max_completion_tokens: int | None = None, progress: bool = True) -> dict:
    """What a starting policy gives GRPO on the run's pool: `samples` episodes per D_0 task at `temperature` (None:
    the profile's rollout temperature): mean success, the share of tasks with mixed outcomes (the groups that carry an
    advantage) and the policy's token entropy on those episodes; on each held-out set greedy success, pass@`samples`
    and the greedy failures that some sample solves (`<set>_reached_%`, of the whole set: about what GRPO can add
    there by sharpening what sampling already finds); and whether `RL_GATE` holds."""
    settings = engine.config.rollout
    temperature = settings.temperature if temperature is None else temperature
    rollout = rollout_phase(settings, temperature=temperature, seed=seed, token_level=True,
                             max_completion_tokens=max_completion_tokens)
    model = HFChatModel(policy_path)
    d0 = [t for t in engine.pool.tasks if t["pool_version"] == 0]
    records = run_rollouts(model, engine.rollout_tasks(d0), rollout, engine.environment.new_episode,
                           samples_per_task=samples, progress=progress)
    sampled: dict[str, list[int]] = {t["task_id"]: [] for t in d0}
    for record in records:
        sampled[record["task_id"]].append(int(record["success"]))
    episodes = [o for per_task in sampled.values() for o in per_task]
    check = {"d0_tasks": len(d0), "samples": samples, "temperature": temperature,
             "d0_sampled_success_%": round(100 * sum(episodes) / len(episodes), 2),
             "d0_tasks_mixed_%": round(100 * sum(0 < sum(o) < len(o) for o in sampled.values()) / len(sampled), 2),
             "d0_tasks_all_failed_%": round(100 * sum(sum(o) == 0 for o in sampled.values()) / len(sampled), 2),
             "token_entropy": token_entropy(model, records, temperature)}
    greedy = rollout_phase(settings, temperature=0.0, token_level=True, max_completion_tokens=max_completion_tokens)
    for name, (key, tasks) in engine.heldout_sets().items():
        greedy_outcomes = task_outcomes(model, tasks, greedy, engine.environment, progress=progress)
        solved = {task_id: o[0] for task_id, o in greedy_outcomes.items()}
        drawn = task_outcomes(model, tasks, rollout, engine.environment, samples=samples, progress=progress)
        reached = sum(any(o) and not solved[task_id] for task_id, o in drawn.items())
        check[f"{name}_set"] = key
        check[f"{name}_greedy_success_%"] = round(100 * sum(solved.values()) / len(tasks), 2)
        check[f"{name}_pass@{samples}_%"] = round(100 * sum(any(o) for o in drawn.values()) / len(tasks), 2)
        check[f"{name}_reached_%"] = round(100 * reached / len(tasks), 2)
    check["rl_gate"] = {name: low <= check[name] <= high for name, (low, high) in RL_GATE.items()}
    return check
