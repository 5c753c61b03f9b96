"""The paper profiles (configs/paper-*.yaml) resolve to the paper's Table 9 run, and their launch commands are ones
accelerate 1.15 accepts. Dry runs only: nothing loads a model, and no GPU or deepspeed is needed."""

import itertools
import json
import shlex

import pytest
import yaml

from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.profiles import CONFIGS_DIR, ConfigError, run_config

PAPER_PROFILES = sorted(p.stem for p in CONFIGS_DIR.glob("paper-*.yaml") if not p.stem.endswith("-appworld"))
"""The BFCL runs; `paper-qwen3-4b-appworld` is the same run on AppWorld (test_appworld_paper_profile_plan)."""

# The paper (§4.2): 1 node x 8 GPUs with rollout TP 1 for the 4B/7B models, 2 nodes x 8 with TP 2 for 30B-A3B.
EXPECTED = {
    "paper-qwen2.5-7b": {"model": "Qwen/Qwen2.5-7B-Instruct", "machines": 1, "processes": 8, "tp": 1, "vllm": False},
    "paper-qwen3-4b": {"model": "Qwen/Qwen3-4B-Instruct-2507", "machines": 1, "processes": 8, "tp": 1, "vllm": False},
    # 30B-A3B's own rollouts are vLLM's, colocated: the kit's local engines would not fit a 96 GB GPU (issue 46)
    "paper-qwen3-30b-a3b": {"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "machines": 2, "processes": 16, "tp": 2,
                            "vllm": True},
}


def dry_run(capsys, *argv) -> tuple[int, dict | None, str]:
    code = cli(["train", "--dry-run", *argv])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err  # printed, refused or not


def test_the_three_paper_profiles_exist():
    assert PAPER_PROFILES == sorted(EXPECTED)


def test_appworld_paper_profile_plan(capsys, tmp_path, monkeypatch):
    """The Qwen3-4B run on AppWorld: the BFCL profile's training and explorer, AppWorld's Test-Normal split, and a note
    when the split needs official data that is not there."""
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    code, plan, err = dry_run(capsys, "--profile", "paper-qwen3-4b-appworld", "--out", str(tmp_path))
    assert code == 0, err
    _, bfcl, _ = dry_run(capsys, "--profile", "paper-qwen3-4b", "--out", str(tmp_path))
    assert plan["environment"]["name"] == "appworld" and plan["environment"]["split"] == "test_normal"
    assert bfcl["environment"] == {"name": "bfcl", "data_version": "v3", "category": "multi_turn_base", "split": "val",
                                 "classes": None, "warm_start": False}
    assert plan["policy_model"] == "Qwen/Qwen3-4B-Instruct-2507" and plan["explorer_model"] == "openai:qwen3-max"
    assert ((plan["schedule"], plan["batch"], plan["grpo_config"])
            == (bfcl["schedule"], bfcl["batch"], bfcl["grpo_config"]))
    assert plan["rollout"]["max_steps_per_episode"] == 30
    assert any("no AppWorld data root is set" in note for note in plan["notes"])
    monkeypatch.setenv("APPWORLD_ROOT", str(tmp_path))
    _, plan, _ = dry_run(capsys, "--profile", "paper-qwen3-4b-appworld", "--out", str(tmp_path))
    assert plan["environment"]["data"] == f"APPWORLD_ROOT={tmp_path}"
    assert not any("data root" in note for note in plan["notes"])


def test_appworld_refuses_what_its_data_engine_lacks(capsys):
    code, _, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "evaluation.environment_name=appworld")
    # issue 47: the profile's BFCL environment section was dropped silently; now named, unless replaced on purpose
    assert code == 2 and "evaluation.environment_name=appworld replaces the profile's environment bfcl, whose " \
        "environment section (category, data_version, warm_start) is not appworld's settings" in err
    on_appworld = ["--profile", "paper-qwen3-4b", "--set", "evaluation.environment_name=appworld", "--set",
                   "environment={}", "--set", "evaluation.split=dev"]
    # the LLM abstraction, the judge and the unvalidated ablation run on AppWorld too
    code, plan, err = dry_run(capsys, *on_appworld, "--set", "data_engine.synthesis.validate=false")
    assert code == 0 and plan["environment"]["name"] == "appworld", err
    code, _, err = dry_run(capsys, *on_appworld, "--set", "data_engine.d0_source_split=all")
    assert code == 2
    assert "evaluation.environment_name=appworld needs data_engine.d0_source_split=train" in err
    assert "ArgsKwargs" not in err
    for baseline in ("reflexion", "rest"):  # Table 10's baselines run on AppWorld (tests/test_appworld_loop.py)
        code, _, err = dry_run(capsys, "--profile", "tiny-appworld", "--set", f"training.pool_updates={baseline}")
        assert code == 0, err
    code, _, err = dry_run(capsys, "--profile", "tiny-appworld", "--set", "evaluation.split=val")
    assert code == 2 and "'val' is a BFCL split" in err
    # held-out set (a) shares the warm start's start states, whose data is not screened against it
    code, _, err = dry_run(capsys, "--profile", "tiny-appworld", "--set", "data_engine.heldout.new_tasks.size=4")
    assert code == 2 and "data_engine.heldout.new_tasks.size=0 with the warm start on" in err
    warm_start_off = ["--set", "environment.warm_start.enabled=false"]
    code, _, err = dry_run(capsys, "--profile", "tiny-appworld", "--set", "data_engine.heldout.new_tasks.size=4",
                           *warm_start_off)
    assert code == 0, err


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_dry_run_plan_matches_table_9(profile, capsys, tmp_path):
    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path))
    assert code == 0, err
    want = EXPECTED[profile]
    assert plan["policy_model"] == want["model"]
    assert plan["explorer_model"] == "openai:qwen3-max"
    assert plan["environment"]["warm_start"] is False
    assert plan["schedule"] == {"max_steps": 120, "pool_updates": "signals", "feedback_every": 10,
                                "feedback_rounds": 11, "d0_size": 100}  # none after the last step

    batch = plan["batch"]
    assert (batch["tasks_per_step"], batch["group_size"], batch["completions_per_step"]) == (32, 8, 256)
    assert (batch["machines"], batch["processes"]) == (want["machines"], want["processes"])
    per_device, accumulation = batch["per_device_train_batch_size"], batch["gradient_accumulation_steps"]
    assert per_device * want["processes"] * accumulation == 256
    assert (256 // want["processes"]) % 8 == 0  # every process rolls out whole groups

    grpo = plan["grpo_config"]
    assert grpo["num_generations"] == 8
    assert grpo["per_device_train_batch_size"] == per_device
    assert grpo["gradient_accumulation_steps"] == accumulation
    assert grpo["learning_rate"] == 1e-6 and grpo["lr_scheduler_type"] == "constant"
    assert grpo["optim"] == "adamw_torch"
    assert (grpo["epsilon"], grpo["epsilon_high"], grpo["beta"]) == (0.2, 0.28, 1e-3)
    assert grpo["loss_type"] == "dapo"  # token mean over the group, Eq. (1)
    assert grpo["temperature"] == 0.9 and grpo["max_completion_length"] == 4096
    assert grpo["max_steps"] == 120 and grpo["save_steps"] == 10
    assert grpo["bf16"] is True and grpo["gradient_checkpointing"] is True
    # vLLM rollouts (training.use_vllm): off for 4B / 7B, where TRL builds no vLLM engine; colocated for 30B-A3B
    assert grpo["use_vllm"] is want["vllm"]
    if want["vllm"]:
        assert (grpo["vllm_mode"], grpo["vllm_max_model_length"]) == ("colocate", 12288)
    else:
        assert not any(key.startswith("vllm_") for key in grpo)
    assert plan["training_memory"]["recipe"]["fits"] is True  # on the profile's own GPUs (96 GB)
    assert grpo["output_dir"] == str(tmp_path / "trainer")

    rollout = plan["rollout"]
    assert rollout["max_steps_per_episode"] == 30 and rollout["max_completion_tokens"] == 4096
    assert rollout["generation"]["temperature"] == 0.9 and rollout["tool_docs"] == "full"
    assert plan["lora"] is None

    command = shlex.split(plan["commands"]["train"])
    assert command[:3] == ["accelerate", "launch", "--config_file"]
    config_file = REPO_ROOT / command[3]
    assert config_file.is_file()
    assert command[3] == plan["launch"]["accelerate_config"]
    assert command[command.index("--num_processes") + 1] == str(want["processes"])
    assert command[command.index("--num_machines") + 1] == str(want["machines"])
    assert command[command.index("-m") + 1:] == ["coevolve_lib", "train", "--profile", profile, "--out", str(tmp_path)]
    if want["machines"] > 1:
        assert "--machine_rank" in command and "--main_process_ip" in command
    assert "OPENAI_BASE_URL" in plan["commands"]["explorer_env"]
    assert not any("does not exist" in note for note in plan["notes"])

    # The accelerate config agrees with the profile's launch section.
    accelerate = yaml.safe_load(config_file.read_text())
    assert (accelerate["num_machines"], accelerate["num_processes"]) == (want["machines"], want["processes"])
    assert accelerate["mixed_precision"] == "bf16"


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_paper_profile_sections(profile):
    assert len((CONFIGS_DIR / f"{profile}.yaml").read_text().splitlines()) <= 40  # only what differs from _paper
    run = run_config(profile)
    ev, bfcl = run.evaluation, run.environment
    assert (bfcl["data_version"], bfcl["category"], ev.split, ev.limit) == ("v3", "multi_turn_base", "val", None)
    assert ev.environment == run.data_engine.environment == bfcl
    assert ev.temperature == 0.0 and ev.rollout == run.rollout == run.data_engine.rollout
    assert (run.rollout.tool_docs == "full" and run.rollout.max_steps_per_episode == 30
            and run.rollout.temperature == 0.9)
    assert ev.model == EXPECTED[profile]["model"]
    de = run.data_engine
    assert de.d0_size == 100 and de.d0_source_split == "train"
    assert (de.explore.explorer, de.explore.context_builder, de.synthesis.abstraction) == ("llm", "llm", "llm")
    assert de.synthesis.min_calls == 3 and de.synthesis.judge is True
    assert bfcl["warm_start"]["enabled"] is False
    assert de.signals.enabled == ("forgetting", "boundary", "rare")
    assert de.signals.success_threshold == 0.5 and de.signals.rare_theta == 5.0
    tr = run.training
    assert tr.pool_updates == "signals" and not tr.lora.enabled and tr.dtype == "bfloat16"
    # vLLM rollouts: the 30B-A3B profile's own (colocated), opt-in for the others; the paper's rollout TP is vLLM's
    assert (tr.use_vllm, tr.vllm_mode) == ((True, "colocate") if EXPECTED[profile]["vllm"] else (False, "server"))
    assert tr.vllm_tensor_parallel_size == EXPECTED[profile]["tp"]
    assert EXPECTED[profile]["processes"] % tr.vllm_tensor_parallel_size == 0


def test_launch_commands_pass_accelerate_validation(capsys, tmp_path):
    """Each printed command parses and validates with the installed accelerate (DeepSpeed and FSDP alike)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    # FSDP is for vLLM rollouts only (tests/test_multiprocess.py: local rollouts under FSDP are refused)
    cases = [(p, []) for p in PAPER_PROFILES] + [
        ("paper-qwen3-4b", ["--set", "training.launch.accelerate_config=configs/accelerate/fsdp2_1x8.yaml",
                            "--set", "training.use_vllm=true"])]
    for (profile, extra), name in itertools.product(cases, ["train", "train_vllm_colocate", "train_vllm_server"]):
        code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path), *extra)
        assert code == 0, err
        command = plan["commands"][name].replace("$NODE_RANK", "1").replace("$MASTER_ADDR", "10.0.0.1")
        command = shlex.split(command)
        if command[0].startswith("CUDA_VISIBLE_DEVICES="):  # the server-mode split of the GPUs
            command = command[1:]
        args = launch_command_parser().parse_args(command[2:])
        args, _, _ = _validate_launch_command(args)
        assert args.module and args.training_script == "coevolve_lib"
        processes = EXPECTED[profile]["processes"]
        assert args.num_processes == (processes if name != "train_vllm_server" else processes // 2)
        assert args.mixed_precision == "bf16"
        if extra:
            assert args.use_fsdp and not args.use_deepspeed
        else:
            assert args.use_deepspeed and int(args.zero_stage) == 3
            # left to the profile's GRPOConfig ("auto"): no second source for these two
            assert args.gradient_accumulation_steps is None and args.gradient_clipping is None


@pytest.mark.parametrize("path", sorted((CONFIGS_DIR / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_use_only_known_keys(path):
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    ClusterConfig.from_yaml_file(str(path))  # rejects unknown top-level keys
    # Sub-section keys become launch arguments (accelerate ignores unknown ones silently, so check them here).
    known = vars(launch_command_parser().parse_args(["x.py"]))
    raw = yaml.safe_load(path.read_text())
    for key in raw.get("deepspeed_config") or {}:
        assert key in known, f"{path.name}: deepspeed_config.{key} is not an accelerate option"
    for key in raw.get("fsdp_config") or {}:
        assert (key if key.startswith("fsdp_") else f"fsdp_{key}") in known, f"{path.name}: fsdp_config.{key}"


def test_bad_override_is_rejected_clearly(capsys):
    code, _, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "training.no_such_field=1")
    assert code == 2
    assert "training.no_such_field: unknown field; valid: " in err and "tasks_per_step" in err


def test_batch_that_does_not_split_over_the_processes_fails_clearly(capsys):
    code, _, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "training.tasks_per_step=3")
    assert code == 2
    assert "24 completions must split into whole groups over 8 process(es)" in err
    # the same batch on one process splits; one 96 GB GPU cannot hold it in one micro-batch: the plan is printed,
    # the recipe refused in one line, naming one that fits
    code, plan, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "training.tasks_per_step=3",
                              "--set", "training.launch.num_processes=1", "--set",
                              "training.gradient_accumulation_steps=1")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "fits: " in err
    assert plan["batch"]["per_device_train_batch_size"] == 24


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_dry_run_prints_the_vllm_launch_commands(profile, capsys, tmp_path):
    """Colocate: the profile's own launch with vLLM on. Server: `trl vllm-serve` on the TP GPUs after those of a
    training launch on the most processes that still split a step into whole groups, with the same micro-batch."""
    from trl.scripts.vllm_serve import make_parser

    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path))
    assert code == 0, err
    want, commands = EXPECTED[profile], plan["commands"]
    # vLLM's context: the longest first prompt (8,192) + the episode's 4,096 tokens, never the model's 262,144
    colocate = (commands["train"] + " --set training.use_vllm=true --set training.vllm_mode=colocate "
                "--set training.vllm_max_model_length=12288")
    if profile == "paper-qwen2.5-7b":  # its micro-batches of 8 do not fit beside vLLM's share: 8 of 4 fit
        colocate += " --set training.gradient_accumulation_steps=8"
    assert commands["train_vllm_colocate"] == colocate  # 30B-A3B's profile holds its own 0.35 share and split
    for name in ("train", "train_vllm_colocate", "train_vllm_server"):  # every printed recipe fits its GPUs
        sets = shlex.split(commands[name])
        sets = [sets[i + 1] for i, part in enumerate(sets) if part == "--set"]
        code, printed, err = dry_run(capsys, "--profile", profile, *(p for s in sets for p in ("--set", s)))
        assert code == 0 and printed["training_memory"]["recipe"]["fits"], (name, err)

    serve_env, *serve = shlex.split(commands["vllm_server"])
    assert serve[:2] == ["trl", "vllm-serve"]
    args, rest = make_parser(prog="trl vllm-serve").parse_args_and_config(serve[2:], return_remaining_strings=True)
    assert (args.model, args.tensor_parallel_size, args.port, rest) == (want["model"], want["tp"], 8000, [])
    assert args.max_model_len == 12288
    train_env, *train = shlex.split(commands["train_vllm_server"])
    processes = int(train[train.index("--num_processes") + 1])
    # every GPU the training leaves serves as a replica (4B / 7B: 3 of 8 were idle; 30B-A3B: 6 of 16)
    server_gpus = want["processes"] - processes
    assert args.data_parallel_size * args.tensor_parallel_size == server_gpus
    assert f"{args.data_parallel_size} replica(s)" in next(n for n in plan["notes"] if "server mode" in n)
    assert f"0 of {want['processes']} GPUs idle" in next(n for n in plan["notes"] if "server mode" in n)
    # the micro-batch that fits the training GPUs: 4B as the profile's (8), 7B and 30B-A3B smaller (4 and 2)
    micro_batch = {"paper-qwen3-4b": 8, "paper-qwen2.5-7b": 4, "paper-qwen3-30b-a3b": 2}[profile]
    accumulation = 256 // (processes * micro_batch)
    # 4B / 7B: 4 training GPUs and the server on GPU 4 of the node; 30B-A3B: node 0 trains, the server on node 1
    assert processes == 8 if want["machines"] > 1 else processes == 4
    assert train_env == "CUDA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(processes))
    first = 0 if want["machines"] > 1 else processes  # on node 1, or after the training's GPUs on node 0
    assert serve_env == "CUDA_VISIBLE_DEVICES=" + ",".join(str(i) for i in range(first, first + server_gpus))
    sets = [train[i + 1] for i, part in enumerate(train) if part == "--set"]
    assert sets[:4] == ["training.use_vllm=true", "training.vllm_mode=server",
                        f"training.launch.num_processes={processes}",
                        f"training.gradient_accumulation_steps={accumulation}"]
    if want["machines"] > 1:
        assert sets[4:] == ["training.launch.num_machines=1", "training.vllm_server_host=$VLLM_SERVER_HOST"]
        assert "--machine_rank" not in train and any("VLLM_SERVER_HOST=<node 1" in note for note in plan["notes"])
    # The server-mode run resolves, with that micro-batch, and TRL gets the vLLM settings.
    code, server_plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path),
                                     *(part for setting in sets for part in ("--set", setting)))
    assert code == 0, err
    assert server_plan["batch"]["per_device_train_batch_size"] == micro_batch
    grpo = server_plan["grpo_config"]
    assert grpo["use_vllm"] is True and grpo["vllm_mode"] == "server" and grpo["vllm_server_port"] == 8000
    assert grpo["vllm_importance_sampling_correction"] is False  # the rollouts return no sampling logprobs
    assert grpo["generation_kwargs"] == {"max_tokens": 1024}  # vLLM's cap per reply: rollout.max_new_tokens
    assert server_plan["rollout"]["engine"] == "vllm"


def test_the_tiny_profile_has_no_vllm_commands(capsys, tmp_path):
    code, plan, err = dry_run(capsys, "--profile", "tiny", "--out", str(tmp_path))
    assert code == 0, err
    assert set(plan["commands"]) == {"train"}


@pytest.mark.parametrize("profile", ["tiny", "paper-qwen3-4b"])
def test_use_vllm_loads_and_dry_runs_without_vllm(profile, capsys):
    """The vllm package is checked when training starts (tests/test_vllm_engine.py), not when a profile loads."""
    fitting = ["--set", "training.gradient_accumulation_steps=8"] if profile != "tiny" else []  # beside 0.4 of a GPU
    code, plan, err = dry_run(capsys, "--profile", profile, "--set", "training.use_vllm=true", "--set",
                              "training.vllm_mode=colocate", "--set", "training.vllm_gpu_memory_utilization=0.4",
                              *fitting)
    assert code == 0, err
    grpo = plan["grpo_config"]
    assert (grpo["use_vllm"], grpo["vllm_mode"], grpo["vllm_gpu_memory_utilization"]) == (True, "colocate", 0.4)
    assert plan["rollout"]["engine"] == "vllm"


def test_vllm_settings_are_validated(capsys):
    code, _, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "training.vllm_mode=remote")
    assert code == 2 and "vllm_mode" in err
    code, _, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--set", "training.use_vllm=true", "--set",
                           "training.vllm_mode=colocate", "--set", "training.vllm_tensor_parallel_size=3")
    assert code == 2 and "must divide the 8 training process(es)" in err
    code, _, err = dry_run(capsys, "--profile", "tiny", "--set", "rollout.engine=vllm")
    assert code == 2 and "set training.use_vllm=true and keep rollout.engine=auto" in err


def test_an_environment_spells_its_settings_canonically_so_equal_settings_hash_alike():
    """BFCL's `base` is `multi_turn_base` (`Environment.normalized`): the same run, the same run folder."""
    from coevolve_lib.studies.run import run_hash

    short = run_config("tiny", ["environment.category=base"])
    assert short.environment["category"] == "multi_turn_base" and run_hash(short) == run_hash(run_config("tiny"))


def test_a_multi_process_cpu_command_runs_as_printed(capsys, tmp_path):
    """The printed `accelerate launch` keeps the user's overrides and names no config file that does not exist
    (`--config_file default` was refused by accelerate); it asks for `--multi_gpu`, accelerate's launcher of several
    processes, on CPU too (`--cpu` started one process). tests/test_multiprocess.py runs it (issue 22)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    overrides = ["training.launch.num_processes=2", 'data_engine.signals.enabled=["boundary"]']
    code, plan, err = dry_run(capsys, "--profile", "tiny", "--out", str(tmp_path), *[p for o in overrides
                                                                                    for p in ("--set", o)])
    assert code == 0, err
    command = shlex.split(plan["commands"]["train"])
    assert command[:3] == ["accelerate", "launch", "--multi_gpu"] and "--config_file" not in command
    assert "--cpu" not in command
    assert command[-4:] == ["--set", overrides[0], "--set", overrides[1]]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(command[2:]))
    assert args.multi_gpu and args.num_processes == 2 and args.module and args.training_script == "coevolve_lib"
    # the command's own arguments load the same config as the dry run did
    assert run_config("tiny", overrides).training.launch.num_processes == 2


# Each backbone's size from its hub config.json (core/paper_models.py; parameters counted by the transformers class
# itself in test_paper_models.py): bf16 weights, KV bytes per token at TP 1.
BACKBONES = {"paper-qwen3-4b": (4.02, 147_456), "paper-qwen2.5-7b": (7.62, 57_344),
             "paper-qwen3-30b-a3b": (30.53, 98_304)}


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_every_vllm_recipe_fits_its_gpu_share(profile, capsys, tmp_path):
    """Issue 28: each vLLM recipe names a context length, and the backbone's weights (over its TP group), vLLM's
    overhead and the KV cache of one sequence of that length fit the share of a 96 GB GPU the recipe gives vLLM:
    what vLLM checks before it starts. The model's own 262,144-token context would not fit colocated."""
    from coevolve_lib.core.paper_models import kv_bytes_per_token, paper_model, parameter_count

    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path))
    assert code == 0, err
    model = paper_model(EXPECTED[profile]["model"]).config
    billions, kv_token = BACKBONES[profile]
    assert round(parameter_count(model) / 1e9, 2) == billions and kv_bytes_per_token(model) == kv_token
    tp = EXPECTED[profile]["tp"]
    for recipe, memory in plan["vllm_memory"].items():
        share = memory["gpu_memory_utilization"] * 96
        weights, sequence = billions * 2 / tp, kv_bytes_per_token(model, tp) * 12288 / 1e9
        assert memory["max_model_len"] == 12288 and memory["fits"] is True
        assert abs(memory["weights_gb"] - weights) < 0.01 and weights + 2.0 + sequence <= share, (recipe, memory)
        if recipe == "colocate" and model["max_position_embeddings"] == 262_144:  # the 2507 checkpoints' own
            # context would not have fitted the colocated share (Qwen2.5-7B's 32,768 does)
            declared = kv_bytes_per_token(model, tp) * model["max_position_embeddings"] / 1e9
            assert weights + 2.0 + declared > share
    assert set(plan["vllm_memory"]) == {"colocate", "server"}


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_the_plan_states_the_checkpoints_disk(profile, capsys, tmp_path):
    """Issue 46: a 4B run's checkpoints took ~110 GB and 30B-A3B's ~0.9 TB, stated nowhere. The plan counts 16 bytes
    a parameter per full-weight checkpoint (the gathered bf16 weights, the engine's bf16 shards, fp32 Adam state),
    `save_total_limit` of the 12 saves kept, and the final bf16 model; LoRA keeps adapters only."""
    from coevolve_lib.core.paper_models import paper_model, parameter_count

    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path))
    assert code == 0, err
    billions = parameter_count(paper_model(EXPECTED[profile]["model"]).config) / 1e9
    disk = plan["checkpoint_disk"]
    assert (disk["checkpoints_saved"], disk["checkpoints_kept"]) == (12, 2)  # 120 steps, a save after each round
    assert abs(disk["per_checkpoint_gb"] - 16 * billions) < 0.1 and abs(disk["final_gb"] - 2 * billions) < 0.1
    assert abs(disk["kept_gb"] - 34 * billions) < 0.2 and abs(disk["peak_gb"] - 50 * billions) < 0.2
    assert any(note.startswith(f"disk: {disk['per_checkpoint_gb']:g} GB per checkpoint") for note in plan["notes"])
    code, lora, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path), "--set",
                              "training.lora.enabled=true")
    assert code == 0, err
    assert 0 < lora["checkpoint_disk"]["per_checkpoint_gb"] < disk["per_checkpoint_gb"] / 100


@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_the_plan_sizes_the_collective_timeout_from_the_rounds(profile, capsys, tmp_path):
    """Issue 28: a round's explorer calls run far past NCCL's 10 minutes. Issue 46: sized from every call at its
    deadline, the timeout was 52 h (4B) and a hang idled every GPU that long; a round now has a deadline of its own
    (`data_engine.round_deadline_s`, pinned in test_feedback), and the timeout is that and a margin."""
    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path))
    assert code == 0, err
    assert plan["collectives"] == {"timeout_s": 3600, "round_deadline_s": 1800.0, "margin_s": 1800}
    code, plan, _ = dry_run(capsys, "--profile", profile, "--set", "training.process_group_timeout_s=7200")
    assert plan["collectives"]["timeout_s"] == 7200


GPUS = {"h100-80gb": 80, "h200": 141}
"""The GPUs a user is likely to have besides the paper's H20 (96 GB): `train --gpu`."""


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("profile", PAPER_PROFILES)
def test_the_plan_fits_the_gpus_users_have_or_names_a_recipe_that_does(profile, gpu, capsys, tmp_path):
    """Issue 46: 30B-A3B fitted no printed recipe on 80 GB GPUs and nothing said so. The plan estimates each recipe's
    memory per GPU (`training.memory`); a recipe that does not fit is refused in one line naming one that does, and
    that one, applied as named, plans without refusal."""
    size = ["--gpu", gpu]
    code, plan, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path), *size)
    memory = plan["training_memory"]
    assert len(memory["table"]) == 9 and all(row["gpu_memory_gb"] == GPUS[gpu] for row in memory["table"])
    assert f"{gpu}; training.launch.gpu_memory_gb" in plan["notes"][0]  # the plan says which GPUs it is for
    assert f"--set training.launch.gpu_memory_gb={GPUS[gpu]}" in plan["commands"]["train"]  # runs as printed
    if code == 0:
        assert memory["recipe"]["fits"] and "fits_instead" not in memory
        return
    assert code == 1 and len(err.strip().splitlines()) == 1 and not memory["recipe"]["fits"]
    named = memory["fits_instead"]["set"]
    assert f"fits: {memory['fits_instead']['recipe']}" in err and "--set " + " --set ".join(named) in err
    code, fitted, err = dry_run(capsys, "--profile", profile, "--out", str(tmp_path), *size,
                                *(part for setting in named for part in ("--set", setting)))
    assert code == 0, err
    assert fitted["training_memory"]["recipe"]["total_gb"] == memory["fits_instead"]["total_gb"] <= GPUS[gpu]


def test_30b_a3b_has_a_recipe_that_fits_one_node_of_80_gb_gpus(capsys, tmp_path):
    one_node = ["--set", "training.launch.gpu_memory_gb=80", "--set", "training.launch.num_machines=1", "--set",
                "training.launch.num_processes=8", "--set", "training.launch.accelerate_config="
                "configs/accelerate/zero3_1x8.yaml"]
    code, plan, err = dry_run(capsys, "--profile", "paper-qwen3-30b-a3b", "--out", str(tmp_path), *one_node)
    assert code == 1, "its own recipe (ZeRO-3 with colocated vLLM) does not fit 8 x 80 GB"
    instead = plan["training_memory"]["fits_instead"]
    assert "training.launch.offload_optimizer=true" in instead["set"]  # the optimizer state to CPU memory
    code, plan, err = dry_run(capsys, "--profile", "paper-qwen3-30b-a3b", "--out", str(tmp_path), *one_node,
                              *(part for setting in instead["set"] for part in ("--set", setting)))
    assert code == 0, err
    command = shlex.split(plan["commands"]["train"])
    assert command[command.index("--offload_optimizer_device") + 1] == "cpu"  # DeepSpeed's own accelerate option


def test_the_memory_estimate_counts_what_zero3_shards(capsys, tmp_path):
    """The persistent terms against the ZeRO paper's accounting (bf16 weights and gradients, 12 bytes of fp32
    optimizer state, a parameter), sharded over the processes; the offload recipe moves the 12 to CPU memory."""
    from coevolve_lib.core.paper_models import paper_model, parameter_count

    code, plan, err = dry_run(capsys, "--profile", "paper-qwen3-4b", "--out", str(tmp_path))
    billions = parameter_count(paper_model(EXPECTED["paper-qwen3-4b"]["model"]).config) / 1e9
    assert code == 0, err
    own = plan["training_memory"]["recipe"]
    assert (own["weights_gb"], own["gradients_gb"], own["optimizer_gb"], own["reference_gb"]) == tuple(
        round(bytes_ * billions / 8, 1) for bytes_ in (2, 2, 12, 2))
    offload = next(row for row in plan["training_memory"]["table"] if row["recipe"].startswith("zero3_offload, local"))
    assert offload["optimizer_gb"] == 0.0 and offload["cpu_optimizer_gb_per_process"] == round(12 * billions / 8, 1)
    terms = sum(own[f"{term}_gb"] for term in ("weights", "gradients", "optimizer", "reference", "vllm", "reserve"))
    assert abs(own["total_gb"] - terms - max(own["rollout_phase_gb"], own["training_phase_gb"])) < 0.3  # rounding


def test_a_run_whose_recipe_does_not_fit_its_gpus_stops_before_loading(monkeypatch, tmp_path):
    import coevolve_lib.training.loop as loop

    monkeypatch.setattr(loop, "gpu_visible", lambda: True)
    run = run_config("paper-qwen2.5-7b", ["training.launch.gpu_memory_gb=80"])
    with pytest.raises(ConfigError, match="fits: zero3, local rollouts, gradient_accumulation_steps 8"):
        loop.train(run, tmp_path / "run")
    assert not (tmp_path / "run").exists()
