"""The paper profiles rehearsed on CPU (issue 28): `python -m coevolve_lib rehearse` runs each profile's printed train
command on 2 processes with its backbone's stand-in, kills it after the first round, resumes it, and evaluates the
trained model with the multi-GPU recipe's `evaluate`. `make test` rehearses the fastest profile; `make test-paper`
(which `.ci/run` also runs) the other two."""

import json
import subprocess
import sys

import pytest

from coevolve_lib.core.paths import REPO_ROOT

ARCHITECTURES = {"paper-qwen3-4b": "Qwen3ForCausalLM", "paper-qwen2.5-7b": "Qwen2ForCausalLM",
                 "paper-qwen3-30b-a3b": "Qwen3MoeForCausalLM"}


@pytest.mark.slow
@pytest.mark.parametrize("profile", [
    "paper-qwen3-4b",
    pytest.param("paper-qwen2.5-7b", marks=pytest.mark.paper),
    pytest.param("paper-qwen3-30b-a3b", marks=pytest.mark.paper),
])
def test_a_paper_profile_rehearses_on_two_cpu_processes(profile, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "coevolve_lib", "rehearse", "--profile", profile, "--out",
                           str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "rehearsal.json").read_text())
    print(json.dumps({k: record[k] for k in ("profile", "seconds", "tool_calls_parsed", "phases")}))
    assert record["architecture"] == ARCHITECTURES[profile] and record["processes"] == 2
    assert record["steps"] == 2 and record["rounds"] == 2  # a feedback round after each step
    assert record["tool_calls_parsed"] > 0  # the stand-in's replies hold real <tool_call> blocks
    assert record["resumed"] is True and record["evaluated"] is True
    # the profile's own GRPO: all weights, beta with its reference model (TRL logs the KL), dapo, checkpointing
    grpo = record["grpo"]
    assert record["lora_trainable_params"] == 0 and grpo["weights"] == "full" and record["trainable_params"] > 0
    assert (grpo["beta"], grpo["loss_type"], grpo["gradient_checkpointing"]) == (1e-3, "dapo", True)
    assert len(grpo["trl_kl"]) == 2 and len(grpo["trl_loss"]) == 2
    # TRL adds the MoE router's load-balancing loss (coefficient 0.001) for the mixture of experts only
    assert bool(grpo["trl_aux_loss"]) == (profile == "paper-qwen3-30b-a3b")
    # the sharded round: each of the two processes explored its share of the round's targets
    assert all((tmp_path / "run" / "round_001" / f"explorations.p{i}.jsonl").exists() for i in range(2))
