"""The training loop on TRL's GRPOTrainer with the tiny model: parameters move, rounds grow the pool, a run killed
mid-round resumes to the same end, configs reject bad values. Small sizes: a few seconds per run."""

import json
from dataclasses import replace

import pytest
import torch
from helpers import EveryFailure, small_run  # noqa: F401 (registers the every_failure signal)
from safetensors.torch import load_file

import coevolve_lib.cli.train as train_cli
import coevolve_lib.training.loop as train_lib
from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.config import BUDGET_REASONS
from coevolve_lib.core.paths import MODELS_DIR
from coevolve_lib.core.records import read_jsonl
from coevolve_lib.core.user_yaml import parse_overrides
from coevolve_lib.engine.data_engine import DataEngine
from coevolve_lib.engine.pool import TaskPool
from coevolve_lib.envs.bfcl.environment import BFCLEnvironment
from coevolve_lib.envs.bfcl.validation import validate
from coevolve_lib.profiles import ConfigError, run_config
from coevolve_lib.training import checkpoints, rollout_func, trl_patches

SMALL = {
    "environment": {"warm_start": {"enabled": False}},
    "data_engine": {"d0_size": 8, "max_targets": 2,
                    "explore": {"runs": 1, "calls_per_run": 4},
                    "heldout": {"new_tasks": {"size": 5, "runs": 1}, "new_envs": {"size": 6, "runs": 1}}},
    "rollout": {"max_new_tokens": 12, "max_steps_per_episode": 2, "tool_docs": "none"},
    "training": {"max_steps": 5, "tasks_per_step": 2, "group_size": 2, "feedback_every": 2, "draw_factor": 1,
                 "eval_every": None, "eval_pool_tasks": 32, "max_completion_tokens": 64, "eval_limit": 1,
                 "learning_rate": 1e-3},
}


class Killed(BaseException):
    """Stands for the process dying: a BaseException, as KeyboardInterrupt is (the kit contains what an environment
    raises, never a kill)."""


def _run(tmp_path, name, **extra):
    return small_run(SMALL, tmp_path, name, **extra)


def test_grpo_steps_change_the_parameters(tmp_path, monkeypatch):
    # A random-init policy never succeeds, so every real reward is 0 and GRPO has no advantage to follow. This
    # test swaps in a reward that differs within every group (the second sample scores 1) to check the wiring:
    # rollouts -> TRL loss on the generated tokens only -> optimizer. The tiny profile's run uses the real reward.
    monkeypatch.setattr(train_lib, "environment_reward",
                        lambda completions, **kw: [float(i % 2) for i in range(len(completions))])
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "none", "training.max_steps": 2})
    train_lib.train(run, out, progress=False)
    before = load_file(MODELS_DIR / "tiny" / "model.safetensors")
    after = load_file(out / "final" / "model.safetensors")
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) > len(before) // 2, f"only {len(changed)} of {len(before)} tensors changed"
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["train/episodes"] == 4 and "trl/loss" in r for r in rows)


def test_episode_budget_hits_are_counted_in_the_metrics(tmp_path):
    """A one-character reply budget ends every episode of the step at `reply_cap`; the metrics count them."""
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "none", "training.max_steps": 1,
                                        "rollout.budget.max_reply_chars": 1})
    train_lib.train(run, out, progress=False)
    [row] = read_jsonl(out / "metrics.jsonl")
    assert row["budget/reply_cap"] == row["train/episodes"] == 4
    assert all(row[f"budget/{reason}"] == 0 for reason in BUDGET_REASONS if reason != "reply_cap")
    records = read_jsonl(out / "rollouts" / "step_00001.jsonl")
    assert {(r["terminated"], r["success"], len(r["steps"])) for r in records} == {("reply_cap", False, 0)}


def test_select_groups_puts_groups_with_an_advantage_first_and_keeps_draw_order():
    groups = [[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]
    assert rollout_func.select_groups(groups, 2) == [1, 3]
    assert rollout_func.select_groups(groups, 3) == [0, 1, 3]  # topped up with the first uniform group
    assert rollout_func.select_groups(groups, 5) == [0, 1, 2, 3, 4]
    assert rollout_func.select_groups([[0.5, 0.5], [0.2, 0.7]], 1) == [1]  # any difference in reward counts


def test_dynamic_sampling_trains_on_a_share_of_the_drawn_groups_and_keeps_every_episode(tmp_path, monkeypatch):
    # The random-init policy never succeeds; a reward that differs within the groups of about half the tasks (those
    # whose id ends in an even hex digit) lets the test see the selection.
    def half_mixed(record, task):
        return float(record["sample_index"] == 0 and int(record["task_id"][-1], 16) % 2 == 0)

    monkeypatch.setitem(BFCLEnvironment.rewards, "prefix", half_mixed)
    run, out = _run(tmp_path, "run", **{"training.max_steps": 2, "training.pool_updates": "none",
                                        "training.draw_factor": 3, "training.reward": "prefix"})
    train_lib.train(run, out, progress=False)
    rows = read_jsonl(out / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:
        records = read_jsonl(out / "rollouts" / f"step_{row['step']:05d}.jsonl")
        assert row["train/groups"] == 6 and row["train/groups_trained"] == 2 and len(records) == 12
        groups = list(dict.fromkeys(r["group_id"] for r in records))
        rewards = [[r["reward"] for r in records if r["group_id"] == g] for g in groups]
        expected = {groups[i] for i in rollout_func.select_groups(rewards, 2)}
        assert {r["group_id"] for r in records if r["trained"]} == expected  # mixed groups first
        uniform = sum(len(set(g)) == 1 for g in rewards)
        assert row["train/zero_std_drawn"] == round(uniform / 6, 4)
        assert row["trl/frac_reward_zero_std"] == pytest.approx(row["train/zero_std_trained"])
    assert any(r["train/zero_std_trained"] < r["train/zero_std_drawn"] for r in rows)


def test_num_iterations_reuses_each_batch_of_rollouts_and_records_it_once(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.max_steps": 4, "training.pool_updates": "none",
                                        "training.num_iterations": 2})
    summary = train_lib.train(run, out, progress=False)
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all("trl/loss" in r for r in rows)
    assert [r.get("train/episodes") for r in rows] == [4, None, 4, None]  # rollouts at steps 1 and 3 only
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step_00001.jsonl", "step_00003.jsonl"]
    assert summary["eval_curve"][-1]["step"] == 4 and summary["eval_curve"][-1]["pool/size"] == 8


def test_rollouts_hand_trl_the_generated_tokens_with_environment_tokens_masked(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.max_steps": 1, "training.pool_updates": "none",
                                        "training.reward": "prefix"})
    train_lib.train(run, out, progress=False)
    records = read_jsonl(out / "rollouts" / "step_00001.jsonl")
    record = records[0]
    assert record["step"] == 1 and record["group_id"].startswith("1/") and record["model_tokens"] > 0
    assert "completion_ids" not in record  # token ids go to TRL, not to disk
    # The prefix reward is what GRPO optimises; `score` and `success` stay the checker's verdict.
    assert all(r["score"] == float(r["success"]) and 0.0 <= r["reward"] <= 1.0 for r in records)
    rows = read_jsonl(out / "metrics.jsonl")
    assert rows[0]["train/reward"] == round(sum(r["reward"] for r in records) / len(records), 4)


def test_feedback_rounds_grow_the_pool_and_metrics_cover_every_step(tmp_path):
    run, out = _run(tmp_path, "run", **{"data_engine.signals.enabled": ["every_failure"]})
    summary = train_lib.train(run, out, progress=False)
    pool = TaskPool(out / "pool.jsonl")
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["feedback/round"] for r in rows if "feedback/round" in r] == [1, 2]  # after steps 2 and 4, not 5
    assert len(pool) > 8 and pool.version == 2
    assert summary["pool_size_end"] == len(pool) and summary["signals_total"]["every_failure"] == 20
    assert summary["rounds"][0]["tasks_added"] > 0 and 0 < summary["time"]["feedback_ratio"] < 1
    # tasks added by round 1 are sampled from step 3 on, never before
    new_ids = {t["task_id"] for t in pool.tasks if t["pool_version"] == 1}
    sampled = [(r["step"], r["task_id"]) for k in (1, 2) for r in read_jsonl(out / "rollouts" / f"step_{k:05d}.jsonl")]
    assert not any(task_id in new_ids for _, task_id in sampled)
    assert summary["eval_before"]["step"] == 0 and summary["eval_after"]["step"] == 5
    # held-out success every F = 2 steps and at the end, the BFCL val split only before and after training
    assert [e["step"] for e in summary["eval_curve"]] == [0, 2, 4, 5]
    assert all(e["eval/new_envs_n"] == 6 and e["eval/new_envs_set"] and e["eval/new_tasks_n"] == 5
               for e in summary["eval_curve"])
    assert [e["step"] for e in summary["eval_curve"] if "eval/val_success" in e] == [0, 5]
    assert [e["pool/size"] for e in summary["eval_curve"]][0] == 8


def test_random_exploration_rounds_draw_pool_tasks_and_explore_unguided(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "random"})
    summary = train_lib.train(run, out, progress=False)
    pool = TaskPool(out / "pool.jsonl")
    d0 = {t["task_id"] for t in pool.tasks if t["pool_version"] == 0}
    for round_index in (1, 2):
        targets = json.loads((out / f"round_{round_index:03d}" / "targets.json").read_text())
        assert len(targets) == 2 and set(targets) <= {t["task_id"] for t in pool.tasks}
        report = json.loads((out / f"round_{round_index:03d}" / "report.json").read_text())
        assert report["signal_types"] == {"unguided": 2}
    assert set(json.loads((out / "round_001" / "targets.json").read_text())) <= d0
    assert [r["round"] for r in summary["rounds"]] == [1, 2] and summary["pool_updates"] == "random"
    added = [t for t in pool.tasks if t["pool_version"] > 0]
    assert added and all(t["provenance"]["signal"] is None for t in added)


def test_static_runs_have_no_rounds(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "none"})
    summary = train_lib.train(run, out, progress=False)
    assert summary["rounds"] == [] and not list(out.glob("round_00[1-9]"))
    assert summary["pool_size_start"] == summary["pool_size_end"] == 8


def test_a_run_killed_mid_round_resumes_to_the_same_pool_and_step(tmp_path, monkeypatch):
    extra = {"data_engine.signals.enabled": ["every_failure"]}
    run, reference_dir = _run(tmp_path, "reference", **extra)
    train_lib.train(run, reference_dir, progress=False)
    reference = TaskPool(reference_dir / "pool.jsonl")

    run, out = _run(tmp_path, "killed", **extra)

    def validate_then_die(spec, *args, **kwargs):
        if (out / "round_002").exists():  # round 2 has chosen and explored its targets: die at its first verdict
            raise Killed
        return validate(spec, *args, **kwargs)

    monkeypatch.setattr(DataEngine, "round_stages",
                        lambda engine: replace(engine.environment.round_stages(), validate=validate_then_die))
    with pytest.raises(Killed):
        train_lib.train(run, out, progress=False)
    monkeypatch.undo()
    assert checkpoints.latest_checkpoint(out / "trainer").name == "checkpoint-2"
    assert not (out / "round_002" / "report.json").exists()

    summary = train_lib.train(run, out, progress=False)
    resumed = TaskPool(out / "pool.jsonl")
    assert summary["steps"] == 5 and [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert [t["task_id"] for t in resumed.tasks] == [t["task_id"] for t in reference.tasks]
    assert len(resumed.ids) == len(resumed.tasks) and resumed.version == reference.version == 2


def test_a_finished_run_is_not_overwritten_without_resume(tmp_path):
    run, out = _run(tmp_path, "run", **{"training.max_steps": 2, "training.pool_updates": "none"})
    train_lib.train(run, out, progress=False)
    with pytest.raises(ConfigError, match="already holds a run"):
        train_lib.train(run, out, resume=False, progress=False)


def test_a_damaged_last_checkpoint_is_passed_over_for_the_one_before(tmp_path, capsys, caplog):
    """An emptied trainer_state.json or a file cut short in the last checkpoint used to stop the resume with a
    traceback in TRL; it now resumes from the checkpoint before it (issue 22), or says in one line what to do."""
    extra = {"training.max_steps": 2, "training.pool_updates": "none", "training.save_every": 1}
    run, out = _run(tmp_path, "run", **extra)
    train_lib.train(run, out, progress=False)
    (out / "trainer" / "checkpoint-2" / "trainer_state.json").write_text("")
    with caplog.at_level("WARNING"):
        assert train_lib.train(run, out, progress=False)["steps"] == 2
    assert "checkpoint-2: trainer_state.json is not JSON; resuming from checkpoint-1 instead" in caplog.text
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    assert checkpoints.checkpoint_damage(out / "trainer" / "checkpoint-2") is None  # step 2 trained and saved again

    # Issue 29: the finished run's last metrics line damaged. Resuming from checkpoint-2 trained nothing and rewrote
    # the summary from the one row left (1 step, the pool after round 1); now checkpoint-2 is passed over as damaged
    # and step 2 trained again, exactly, so the run keeps its steps, rows and pool.
    summary, pool = json.loads((out / "summary.json").read_text()), (out / "pool.jsonl").read_text()
    rows = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join([*rows[:-1], rows[-1][:40]]) + "\n")
    caplog.clear()
    with caplog.at_level("WARNING"):
        again = train_lib.train(run, out, progress=False)
    assert "checkpoint-2: metrics.jsonl has no row of step 2, which it trained (a damaged line); resuming from " \
        "checkpoint-1 instead" in caplog.text
    assert again["steps"] == summary["steps"] == 2 and again["pool_size_end"] == summary["pool_size_end"]
    assert (out / "pool.jsonl").read_text() == pool
    untimed = lambda row: {k: v for k, v in row.items() if "time" not in k and not k.endswith("_s")}  # noqa: E731
    assert [untimed(r) for r in read_jsonl(out / "metrics.jsonl")] == [untimed(json.loads(r)) for r in rows]

    for name in ("checkpoint-1/model.safetensors", "checkpoint-2/optimizer.pt"):  # every checkpoint cut short
        path = out / "trainer" / name
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    settings = {**checkpoints.flat(SMALL), **extra}
    argv = ["train", "--out", str(out), *[part for key, value in settings.items()
                                          for part in ("--set", f"{key}={json.dumps(value)}")]]
    capsys.readouterr()  # what the training runs printed
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint-2: optimizer.pt is cut short (no zip directory), and no earlier " \
        "checkpoint is whole: delete " in err and "to train the run again from its first step" in err


def test_a_run_folder_refuses_another_configuration_and_keeps_its_own(tmp_path, capsys):
    """Another seed on a finished run's folder used to exit 0, train nothing and relabel the run (issue 22)."""
    run, out = _run(tmp_path, "run", **{"training.max_steps": 2, "training.pool_updates": "none"})
    train_lib.train(run, out, progress=False)
    recorded = (out / "run_config.json").read_text()
    other, _ = _run(tmp_path, "run", **{"training.max_steps": 2, "training.pool_updates": "none", "training.seed": 1})
    with pytest.raises(ConfigError, match=r"another configuration \(training.seed 0 -> 1\)"):
        train_lib.train(other, out, progress=False)
    argv = ["train", "--out", str(out), "--set", "training.max_steps=2", "--set", "training.pool_updates=none",
            "--set", "training.seed=1"]
    assert cli(argv) == 2 and "holds a run of another configuration" in capsys.readouterr().err
    assert (out / "run_config.json").read_text() == recorded
    assert train_lib.train(run, out, progress=False)["steps"] == 2  # its own configuration resumes (nothing to do)
    # Issue 29: a run_config.json that no longer says its configuration (damaged, or an older kit's) is refused in
    # one line by every configuration, its own included: without it, another seed would relabel the run.
    for text in ("[]", "{}", "", json.dumps({k: v for k, v in json.loads(recorded).items() if k != "config"})):
        (out / "run_config.json").write_text(text)
        for config in (run, other):
            with pytest.raises(ConfigError, match="run_config.json does not say which configuration the run in"):
                train_lib.train(config, out, progress=False)


def test_run_config_rejects_unknown_fields_and_bad_batches():
    with pytest.raises(ConfigError, match="training.max_stepz: unknown field"):
        run_config("tiny", ["training.max_stepz=3"])
    with pytest.raises(ConfigError, match="unknown profile section"):
        run_config("tiny", ["trainin.max_steps=3"])
    with pytest.raises(ConfigError, match="whole groups"):
        run_config("tiny", ["training.tasks_per_step=3", "training.launch.num_processes=2"])
    with pytest.raises(ConfigError, match="training.pool_updates: unknown pool update 'sometimes'; registered: "
                                          ".*'curriculum'.*'signals'"):
        run_config("tiny", ["training.pool_updates=sometimes"])
    with pytest.raises(ConfigError, match="not of the form"):
        parse_overrides(["training.max_steps"])
    assert run_config("tiny", ["training.max_steps=7"]).training.max_steps == 7


def test_cli_dry_run_prints_the_plan(capsys, tmp_path):
    assert train_cli.main(["--profile", "tiny", "--dry-run", "--out", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["grpo_config"]["num_generations"] == plan["batch"]["group_size"]


def test_prefix_reward_counts_reference_calls_reproduced_in_order():
    from coevolve_lib.envs.bfcl.rewards import prefix_reward

    task = {"reference_actions": ["cd(folder='a')", "mkdir(dir_name='b')", "ls()"]}
    steps = lambda *calls: [{"calls": [c]} for c in calls]  # noqa: E731
    assert prefix_reward({"success": True, "steps": []}, task) == 1.0
    assert prefix_reward({"success": False, "steps": steps("cd(folder='a')", "ls()")}, task) == 1 / 4
    same_call_other_order = "mkdir(dir_name='b')"
    assert prefix_reward({"success": False, "steps": steps("cd(folder='a')", same_call_other_order)}, task) == 2 / 4
    too_many = steps("cd(folder='a')", "mkdir(dir_name='b')", "ls()", "ls()", "pwd()", "pwd()")
    assert prefix_reward({"success": False, "steps": too_many}, task) == 3 / 7
    assert prefix_reward({"success": False, "steps": steps("not a call")}, task) == 0.0
    assert prefix_reward({"success": False, "steps": steps("cd(a='x', b=1)")},
                         {"reference_actions": ["cd(b=1, a='x')"]}) == 1 / 2  # argument order does not matter


def test_the_smoke_scale_shrinks_sizes_over_overrides_and_keeps_the_warm_start(monkeypatch, tmp_path):
    from coevolve_lib.engine.data_engine import DataEngine

    normal = run_config("tiny", ["training.max_steps=20"])
    monkeypatch.setenv("COEVOLVE_SCALE", "smoke")
    smoke = run_config("tiny", ["training.max_steps=20"])
    assert normal.training.max_steps == 20 and smoke.training.max_steps == 2
    assert smoke.data_engine.heldout.new_tasks.size < normal.data_engine.heldout.new_tasks.size
    assert smoke.data_engine.heldout.new_envs.size < normal.data_engine.heldout.new_envs.size
    assert smoke.model == normal.model
    recipes = [DataEngine(run.data_engine, tmp_path / name, "bfcl").environment.warm_start_recipe()
               for run, name in ((normal, "a"), (smoke, "b"))]
    assert recipes[0] == recipes[1]
    # the scale only shrinks: an AppWorld profile keeps its episode batch (4 live servers); its held-out sets are capped
    appworld = run_config("tiny-appworld")
    assert {name: cfg.size for name, cfg in appworld.data_engine.heldout.sets().items()} == {"new_envs": 2}
    assert appworld.rollout.batch_size == 4
    assert appworld.training.group_size == 4 and appworld.evaluation.limit == 2  # capped; None (all) becomes 2
    with pytest.raises(ConfigError, match="training.max_steps: Input should be a valid integer"):
        run_config("tiny", ["training.max_steps=abc"])  # a bad value is not hidden by the cap
    # a multi-process (GPU) profile keeps its batch, which must divide over its processes
    assert run_config("paper-qwen3-4b").training.tasks_per_step == 32
    monkeypatch.setenv("COEVOLVE_SCALE", "huge")
    with pytest.raises(ValueError, match="unknown COEVOLVE_SCALE"):
        run_config("tiny")


def test_report_to_loggers_get_the_kits_columns():
    """The kit's numeric columns reach the trainer's `report_to` callbacks (transformers.integrations), beside TRL's
    own logs. A stand-in sink records what it gets (tensorboard/wandb are not installed here; checked by hand with
    tensorboard, docs/log.md)."""
    from types import SimpleNamespace

    from transformers import TrainerCallback

    received = []

    class Sink(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            received.append(logs)

    Sink.__module__ = "transformers.integrations.integration_utils"  # where the report_to callbacks live
    row = {"step": 1, "train/reward": 0.5, "pool/size": 8, "trl/loss": 0.1, "eval/new_tasks_set": "k", "x/flag": True}
    loop = SimpleNamespace(on_log=lambda step, logs: row if "loss" in logs else None,
                           trainer=SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[Sink(), object()])))
    callback = train_lib._callback(loop)
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs={"grad_norm": 1.0})  # not a step's logs
    callback.on_log(None, SimpleNamespace(global_step=1), None, logs={"loss": 0.1})
    assert received == [{"train/reward": 0.5, "pool/size": 8}]


def test_a_resumed_mixture_of_experts_gets_its_trained_experts_back(tmp_path):
    """transformers saves a MoE block's fused experts in the hub's per-expert layout, which the Trainer's own resume
    (`load_state_dict(strict=False)`) skips; `load_saved_weights` restores every tensor."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                            num_experts=4, num_experts_per_tok=2)
    torch.manual_seed(0)
    trained = Qwen3MoeForCausalLM(config)
    trained.save_pretrained(tmp_path)
    saved_names = set(load_file(tmp_path / "model.safetensors"))
    assert not any(name.endswith("experts.gate_up_proj") for name in saved_names)  # why the Trainer's load skips them
    torch.manual_seed(1)
    fresh = Qwen3MoeForCausalLM(config)
    experts = lambda model: model.model.layers[0].mlp.experts.gate_up_proj  # noqa: E731
    assert not torch.equal(experts(fresh), experts(trained))
    checkpoints.load_saved_weights(fresh, tmp_path)
    assert all(torch.equal(fresh.state_dict()[name], tensor) for name, tensor in trained.state_dict().items())


def test_the_trainers_own_resume_path_restores_a_mixture_of_experts(tmp_path):
    """The same fix, through the trainer the loop builds (`trainer_class`): the checkpoint written by its
    `save_model`, read back by `_load_from_checkpoint`, the method `Trainer.train(resume_from_checkpoint=...)`
    calls. Without the kit's override the Trainer's own load leaves the experts at their fresh values."""
    from datasets import Dataset
    from transformers import AutoTokenizer, Qwen3MoeConfig, Qwen3MoeForCausalLM
    from trl import GRPOConfig

    config = Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32, moe_intermediate_size=8,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                            num_experts=4, num_experts_per_tok=2)
    tokenizer = AutoTokenizer.from_pretrained(MODELS_DIR / "tiny")

    def trainer(seed):
        torch.manual_seed(seed)
        args = GRPOConfig(output_dir=str(tmp_path / f"trainer_{seed}"), use_cpu=True, per_device_train_batch_size=2,
                          num_generations=2, max_steps=1, report_to="none", save_strategy="no")
        return trl_patches.trainer_class()(model=Qwen3MoeForCausalLM(config), reward_funcs=[lambda **_: [0.0]],
                                          args=args, train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}),
                                          processing_class=tokenizer)

    trained, fresh = trainer(0), trainer(1)
    trained.save_model(str(tmp_path / "checkpoint"))
    experts = lambda t: t.model.model.layers[0].mlp.experts.gate_up_proj  # noqa: E731
    assert not torch.equal(experts(fresh), experts(trained))
    fresh._load_from_checkpoint(str(tmp_path / "checkpoint"))
    assert all(torch.equal(fresh.model.state_dict()[name], tensor)
               for name, tensor in trained.model.state_dict().items())


def test_full_weights_without_their_config_are_a_damaged_checkpoint(tmp_path):
    """A resume reads full weights with `from_pretrained` (`load_saved_weights`), which needs config.json."""
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2)}, tmp_path / "model.safetensors")
    assert checkpoints.checkpoint_damage(tmp_path) == "config.json is missing beside the model weights"
    (tmp_path / "config.json").write_text("{}")
    assert checkpoints.checkpoint_damage(tmp_path) is None


def test_a_pool_update_plugin_that_raises_adds_nothing_and_training_goes_on(tmp_path, caplog, monkeypatch):
    """Issue 47: an outside pool update that raised stopped the run with a traceback (its rerun died there too)."""
    from coevolve_lib.engine.pool_updates import base

    monkeypatch.setattr(base, "POOL_UPDATES", dict(base.POOL_UPDATES))  # the reference is kept there
    run, out = _run(tmp_path, "run", **{"training.pool_updates": "helpers:RaisingPoolUpdate"})
    summary = train_lib.train(run, out, progress=False)
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and summary["pool_size_end"] == summary["pool_size_start"]
    errors = [r["feedback/pool_update_error"] for r in rows if "feedback/pool_update_error" in r]
    assert errors == ["RuntimeError: injected fault: the pool update raised"] * 2  # after steps 2 and 4
    assert "pool update helpers:RaisingPoolUpdate raised RuntimeError" in caplog.text
