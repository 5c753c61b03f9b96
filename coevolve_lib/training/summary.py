"""A training run's headline numbers, read back from its folder (metrics.jsonl, run_config.json, eval/): the reward
curve, signals per feedback round, pool growth, times and evaluations, written to summary.json."""

from __future__ import annotations

import json
from pathlib import Path

from coevolve_lib.core.llm_calls import record_path, recording_report
from coevolve_lib.core.records import read_jsonl, write_json_atomic


def summarize(out_dir: str | Path) -> dict:
    """The run's headline numbers from its folder: reward curve, signals per round, pool growth, times, evals."""
    out_dir = Path(out_dir)
    rows = read_jsonl(out_dir / "metrics.jsonl")
    run_info = json.loads((out_dir / "run_config.json").read_text())
    cfg = run_info["training"]
    signal_types = sorted({k.split("/", 1)[1] for r in rows for k in r if k.startswith("signals/")})
    per_round = []
    for r in rows:
        if "feedback/round" in r:
            window = [x for x in rows if r["step"] - cfg["feedback_every"] < x["step"] <= r["step"]]
            per_round.append({"round": r["feedback/round"], "step": r["step"],
                              "signals": {t: sum(x.get(f"signals/{t}", 0) for x in window) for t in signal_types},
                              "targets": r["feedback/targets"], "tasks_added": r["feedback/tasks_added"],
                              "rejected": r["feedback/rejected"],
                              "rejection_reasons": r.get("feedback/rejection_reasons", {}),
                              "heldout_leaks": r.get("feedback/heldout_leaks", 0),
                              "pool_size_after": r.get("pool/size_after_round"),
                              "seconds": r["feedback/seconds"],
                              **({"counts": r["feedback/counts"]} if "feedback/counts" in r else {})})
    evals = sorted(({k: v for k, v in json.loads(p.read_text()).items() if k == "step" or k.startswith("eval/")}
                    for p in (out_dir / "eval").glob("step_*.json")), key=lambda e: e["step"])
    pool_size, size = {}, rows[0].get("pool/size") if rows else None
    for r in rows:  # a step that reused earlier rollouts (num_iterations > 1) keeps the last size seen
        size = pool_size[r["step"]] = r.get("pool/size", size)
    last = rows[-1] if rows else {}
    summary = {
        "profile": run_info["profile"], "model": run_info["model"], "seed": cfg["seed"],
        "steps": last.get("step", 0), "max_steps": cfg["max_steps"],
        "tasks_per_step": cfg["tasks_per_step"], "group_size": cfg["group_size"],
        "draw_factor": cfg.get("draw_factor", 1), "learning_rate": cfg["learning_rate"],
        "feedback_every": cfg["feedback_every"], "pool_updates": cfg["pool_updates"],
        "reward_curve": [r.get("train/reward") for r in rows],
        "mixed_groups_curve": [r.get("train/groups_mixed") for r in rows],
        # GRPO's health per step: zero-variance share of the drawn and the trained groups, and the policy's entropy
        "zero_std_drawn_curve": [r.get("train/zero_std_drawn") for r in rows],
        "zero_std_trained_curve": [r.get("train/zero_std_trained") for r in rows],
        "entropy_curve": [r.get("trl/entropy") for r in rows],
        "signals_total": {t: sum(r.get(f"signals/{t}", 0) for r in rows) for t in signal_types},
        "rounds": per_round,
        "pool_size_start": rows[0].get("pool/size") if rows else None,
        "pool_size_end": (per_round[-1]["pool_size_after"] if per_round
                          else rows[-1].get("pool/size") if rows else None),
        "time": {"train_s": last.get("time/train_s_total"), "feedback_s": last.get("time/feedback_s_total"),
                 "eval_s": last.get("time/eval_s_total"), "feedback_ratio": last.get("time/feedback_ratio"),
                 **run_info.get("timings_before_training", {})},
        "eval_before": evals[0] if evals and evals[0]["step"] == 0 else None,
        "eval_after": evals[-1] if evals and evals[-1]["step"] > 0 else None,
        "eval_curve": [{**e, "pool/size": pool_size.get(e["step"], rows[0].get("pool/size") if rows else None)}
                       for e in evals],
    }
    data_engine = run_info.get("config", {}).get("data_engine", {})
    if data_engine.get("llm_calls") == "record":  # what the recording holds: replies, or mostly errors
        summary["llm_calls"] = recording_report(record_path(out_dir, data_engine.get("llm_record")))
    write_json_atomic(out_dir / "summary.json", summary)
    return summary
