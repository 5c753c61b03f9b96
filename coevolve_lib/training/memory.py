"""What a paper run holds, from the backbone's hub config (`core.paper_models`): vLLM's share of a GPU
(`vllm_memory`), the training side's memory on each GPU by recipe (`memory_plan`), and the checkpoints' disk
(`checkpoint_disk`). `--dry-run` prints them (`plan.py`), and a run whose recipe does not fit its
`training.launch.gpu_memory_gb` is refused in one line naming one that does (`memory_refusal`).

The training side's estimate, per GPU (bf16 mixed precision with AdamW, the ZeRO paper's accounting; GB = 10^9 bytes):

    persistent  weights 2 B/param, gradients 2, optimizer 12 (fp32 master weights, Adam's two moments), all three
                sharded over the training processes (ZeRO-3, FSDP); `zero3_offload` keeps the optimizer's 12 in CPU
                memory; `lora` keeps the frozen base's 2 (sharded) and trains the adapters' 16 only. GRPO's reference
                model (beta > 0): 2, sharded (LoRA's reference is the base itself). A colocated vLLM: its share of the
                GPU (`colocate_utilization`).
    rollouts    `local` (the kit's engines on the training model): ZeRO-3 gathers the whole bf16 model on every GPU
                to generate, and the KV cache of the process's rollout batch, each sequence as long as vLLM's
                context (`TrainConfig.vllm_context`); vLLM: nothing more here (colocated: its share above; a server:
                GPUs of its own).
    training    ZeRO-3's working set (two decoder layers gathered, one computing and one prefetched, and the output
                head), and the activations of one micro-batch (`per_device_train_batch_size` sequences, each as long
                as vLLM's context, padded): with gradient checkpointing each layer's input and one layer's
                recomputed internals (attention 4 x hidden, MLP 3 x its active width, forward and backward), and the
                completion tokens' logits (bf16, TRL keeps only the completions') with one sequence's fp32
                log-softmax.
    reserve     `RESERVE_GB`: CUDA context, NCCL buffers, allocator fragmentation.

Rollouts and training take turns, so a GPU holds the persistent part, the larger of the two phases, and the reserve.
An estimate from the worst case of each term (every sequence at full length): a recipe it says fits can still meet a
fragmented allocator, and one it refuses may run on short episodes; the table shows each term, so a user can judge.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from coevolve_lib.core.config import RunConfig, TrainConfig
from coevolve_lib.core.paper_models import GB, head_dim, kv_bytes_per_token, paper_model, parameter_count

TRAINING_RECIPES = ("zero3", "zero3_offload", "lora")
"""How the weights train: all of them sharded (ZeRO-3 / FSDP), the same with the optimizer state in CPU memory
(`training.launch.offload_optimizer`), or LoRA adapters on the sharded frozen base (`training.lora.enabled`)."""
ROLLOUT_ENGINES = ("local", "vllm_colocate", "vllm_server")
"""What generates the GRPO rollouts: the kit's engines on the training model, or TRL's vLLM (`training.use_vllm`,
`training.vllm_mode`)."""
RESERVE_GB = 3.0
"""Per GPU, besides the estimated terms: the CUDA context (~0.5-1 GB), NCCL's buffers, allocator fragmentation."""
OPTIMIZER_BYTES = 12
"""fp32 master weights and Adam's two moments, per trained parameter."""
GPU_MEMORY_GB = {"h20": 96.0, "a100-40gb": 40.0, "a100-80gb": 80.0, "h100-80gb": 80.0, "h100-94gb": 94.0,
                 "h200": 141.0, "b200": 180.0, "l40s": 48.0}
"""`train --gpu NAME`: each GPU's memory in GB (10^9 bytes, as sold), set as `training.launch.gpu_memory_gb`. `h20` is
the paper's GPU and the profiles' default."""


def server_split(cfg: TrainConfig) -> TrainConfig | None:
    """The training section with a vLLM server on `vllm_tensor_parallel_size` of the profile's GPUs: the most
    training processes that leave them free and still split a step into whole groups, with gradient accumulation
    raised so that each micro-batch stays as large (None: no such split)."""
    launch = cfg.launch
    gpus_per_node = launch.num_processes // launch.num_machines
    for processes in range(launch.num_processes - cfg.vllm_tensor_parallel_size, 0, -1):
        accumulation, rest = divmod(cfg.gradient_accumulation_steps * launch.num_processes, processes)
        if rest:
            continue
        try:
            return replace(cfg, gradient_accumulation_steps=accumulation,
                           launch=replace(launch, num_processes=processes, num_machines=-(-processes // gpus_per_node)))
        except ValueError:  # the step does not split into whole groups over this many processes
            continue
    return None


VLLM_OVERHEAD_GB = 2.0
"""What vLLM keeps on a GPU beside weights and KV cache (its profiling run's activations, CUDA graphs): an estimate."""
SERVER_MEMORY_UTILIZATION = 0.9
"""`trl vllm-serve`'s default `--gpu-memory-utilization`: a server has its GPUs to itself."""


def vllm_memory(run: RunConfig, utilization: float) -> dict | None:
    """Whether vLLM fits the share `utilization` of one GPU (`training.launch.gpu_memory_gb`) for a paper backbone
    (`core.paper_models`; None for another model): bf16 weights over the tensor-parallel group, `VLLM_OVERHEAD_GB`,
    and the KV cache of at least one sequence of vLLM's context (`TrainConfig.vllm_context`): vLLM refuses to start
    without that much."""
    model = paper_model(run.model)
    if model is None:
        return None
    cfg = run.training
    tp = cfg.vllm_tensor_parallel_size
    weights = parameter_count(model.config) * 2 / tp / GB
    sequence = kv_bytes_per_token(model.config, tp) * cfg.vllm_context / GB
    share = utilization * cfg.launch.gpu_memory_gb
    free = share - weights - VLLM_OVERHEAD_GB
    return {"gpu_memory_utilization": utilization, "share_gb": round(share, 2), "weights_gb": round(weights, 2),
            "overhead_gb": VLLM_OVERHEAD_GB, "max_model_len": cfg.vllm_context,
            "kv_gb_per_sequence": round(sequence, 3), "full_length_sequences": max(0, int(free // sequence)),
            "fits": free >= sequence}


def colocate_utilization(run: RunConfig) -> float | None:
    """The share of each GPU a colocated vLLM gets: the profile's `vllm_gpu_memory_utilization` when the model fits
    it, else the smallest multiple of 0.05 that fits (None: not even 0.9, or an unknown model: the profile's)."""
    cfg = run.training
    memory = vllm_memory(run, cfg.vllm_gpu_memory_utilization)
    if memory is None or memory["fits"]:
        return cfg.vllm_gpu_memory_utilization
    needed = (memory["weights_gb"] + VLLM_OVERHEAD_GB + memory["kv_gb_per_sequence"]) / cfg.launch.gpu_memory_gb
    share = round(-(-needed // 0.05) * 0.05, 2)
    return share if share <= SERVER_MEMORY_UTILIZATION else None


CHECKPOINT_BYTES_PER_PARAMETER = 16
"""A full-weight checkpoint of a ZeRO-3 / FSDP run, per parameter: the bf16 weights gathered for `model.safetensors`
(2; `zero3_save_16bit_model`), the bf16 weight shards of the engine's own state (2), and the optimizer's fp32 master
weights and two Adam moments (12)."""
LORA_CHECKPOINT_BYTES_PER_PARAMETER = 16
"""A LoRA checkpoint, per adapter parameter: the adapter weights and the optimizer's state for them."""


def checkpoint_disk(run: RunConfig) -> dict | None:
    """What a paper backbone's run keeps on disk (`<run>/trainer/checkpoint-*` and `<run>/final`), from its hub config
    and the save settings: each checkpoint, how many the run saves and keeps (`save_total_limit`), and the peak, while
    a new checkpoint is written before the oldest is deleted. None for another model."""
    model = paper_model(run.model)
    if model is None:
        return None
    cfg = run.training
    parameters = parameter_count(model.config)
    if cfg.lora.enabled:
        checkpoint = lora_parameters(model.config, cfg.lora.r, cfg.lora.target_modules) \
            * LORA_CHECKPOINT_BYTES_PER_PARAMETER
        final = checkpoint / LORA_CHECKPOINT_BYTES_PER_PARAMETER * 2
    else:
        checkpoint, final = parameters * CHECKPOINT_BYTES_PER_PARAMETER, parameters * 2
    saved = cfg.max_steps // cfg.checkpoint_every
    kept = min(saved, cfg.save_total_limit or saved)
    return {"per_checkpoint_gb": round(checkpoint / GB, 1), "checkpoints_saved": saved, "checkpoints_kept": kept,
            "final_gb": round(final / GB, 1), "kept_gb": round((kept * checkpoint + final) / GB, 1),
            "peak_gb": round((min(kept + 1, saved) * checkpoint + final) / GB, 1)}


@dataclass(frozen=True)
class Recipe:
    """One way to run a profile: how it trains, what generates its rollouts, and its micro-batch size."""

    training: str
    rollouts: str
    gradient_accumulation_steps: int

    def settings(self, run: RunConfig) -> list[str]:
        """The `--set` overrides that turn `run` into this recipe (a colocated vLLM's share included, when the run's
        is too small for it: `colocate_utilization`)."""
        cfg = run.training
        wanted = {"training.lora.enabled": self.training == "lora",
                  "training.launch.offload_optimizer": self.training == "zero3_offload",
                  "training.use_vllm": self.rollouts != "local",
                  "training.gradient_accumulation_steps": self.gradient_accumulation_steps}
        have = {"training.lora.enabled": cfg.lora.enabled,
                "training.launch.offload_optimizer": cfg.launch.offload_optimizer,
                "training.use_vllm": cfg.use_vllm,
                "training.gradient_accumulation_steps": cfg.gradient_accumulation_steps}
        if self.rollouts != "local":
            wanted["training.vllm_mode"] = self.rollouts.removeprefix("vllm_")
            have["training.vllm_mode"] = cfg.vllm_mode if cfg.use_vllm else None
        if self.rollouts == "vllm_colocate":
            wanted["training.vllm_gpu_memory_utilization"] = colocate_utilization(run)
            have["training.vllm_gpu_memory_utilization"] = cfg.vllm_gpu_memory_utilization
        return [f"{key}={str(value).lower() if isinstance(value, bool) else value}"
                for key, value in wanted.items() if have[key] != value]

    def __str__(self) -> str:
        return (f"{self.training}, {self.rollouts} rollouts, gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps}")


def recipe_of(cfg: TrainConfig) -> Recipe:
    """The recipe a training section describes."""
    training = "lora" if cfg.lora.enabled else "zero3_offload" if cfg.launch.offload_optimizer else "zero3"
    rollouts = f"vllm_{cfg.vllm_mode}" if cfg.use_vllm else "local"
    return Recipe(training, rollouts, cfg.gradient_accumulation_steps)


def training_memory(run: RunConfig, recipe: Recipe) -> dict | None:
    """Per-GPU GB of `recipe` for `run` (the module docstring's terms, their total and whether it fits
    `gpu_memory_gb`), None for a model that is not a paper backbone or a split the processes cannot make."""
    model = paper_model(run.model)
    if model is None:
        return None
    config, cfg = model.config, run.training
    try:
        cfg = replace(cfg, gradient_accumulation_steps=recipe.gradient_accumulation_steps,
                      lora=replace(cfg.lora, enabled=recipe.training == "lora"),
                      launch=replace(cfg.launch, offload_optimizer=recipe.training == "zero3_offload"),
                      use_vllm=recipe.rollouts != "local",
                      vllm_mode=recipe.rollouts.removeprefix("vllm_") if recipe.rollouts != "local" else cfg.vllm_mode)
    except ValueError:  # the step does not split into this many micro-batches
        return None
    if recipe.rollouts == "vllm_server" and not (run.training.use_vllm and run.training.vllm_mode == "server"):
        cfg = server_split(cfg)  # the server takes GPUs of the profile's (a server-mode run's count excludes them)
        if cfg is None:
            return None
    processes, gpu = cfg.launch.num_processes, cfg.launch.gpu_memory_gb
    parameters = parameter_count(config)
    hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
    trained = lora_parameters(config, cfg.lora.r, cfg.lora.target_modules) if recipe.training == "lora" else parameters
    sharded = trained / processes if recipe.training != "lora" else trained  # LoRA's adapters are small: replicated
    rows = {"weights": 2 * parameters / processes, "gradients": 2 * sharded,
            "optimizer": 0.0 if recipe.training == "zero3_offload" else OPTIMIZER_BYTES * sharded,
            "reference": 2 * parameters / processes if cfg.beta > 0 and recipe.training != "lora" else 0.0,
            "vllm": 0.0}
    share = None
    if recipe.rollouts == "vllm_colocate":
        share = colocate_utilization(replace(run, training=cfg))
        if share is None:
            return None
        rows["vllm"] = share * gpu * GB
    sequences = cfg.per_device_batch_size
    tokens = sequences * cfg.vllm_context
    active = (config["num_experts_per_tok"] * config["moe_intermediate_size"] if "num_experts" in config
              else config["intermediate_size"])
    layer = 2 * 2 * tokens * (4 * hidden + 3 * active)  # one layer's internals, forward and backward, bf16
    activations = (tokens * hidden * 2 * layers + layer if cfg.gradient_checkpointing else layers * layer)
    logits = sequences * cfg.max_completion_tokens * vocab * 2 + cfg.max_completion_tokens * vocab * 4
    missing = 1 - 1 / processes  # the share of a gathered tensor a GPU does not hold already
    per_layer = (parameters - vocab * hidden * (1 if config["tie_word_embeddings"] else 2)) / layers
    working_set = missing * 2 * (2 * per_layer + vocab * hidden)
    rollout_phase = (missing * 2 * parameters + run.rollout.batch_size * cfg.vllm_context * kv_bytes_per_token(config)
                     if recipe.rollouts == "local" else 0.0)
    rows.update(rollout_phase=rollout_phase, training_phase=working_set + activations + logits)
    gb = {name: round(value / GB, 1) for name, value in rows.items()}
    total = sum(rows[name] for name in ("weights", "gradients", "optimizer", "reference", "vllm")) / GB \
        + max(rows["rollout_phase"], rows["training_phase"]) / GB + RESERVE_GB
    cpu = OPTIMIZER_BYTES * sharded / GB if recipe.training == "zero3_offload" else 0.0
    return {"recipe": str(recipe), "training_processes": processes, "per_device_train_batch_size": sequences,
            "vllm_gpu_memory_utilization": share,
            **{f"{name}_gb": value for name, value in gb.items()}, "reserve_gb": RESERVE_GB,
            "total_gb": round(total, 1), "gpu_memory_gb": gpu, "fits": total <= gpu,
            "cpu_optimizer_gb_per_process": round(cpu, 1)}


def lora_parameters(config: dict, rank: int, modules: list[str]) -> int:
    """LoRA adapter parameters: rank x (inputs + outputs) of each targeted attention projection, in every layer."""
    hidden, dim = config["hidden_size"], head_dim(config)
    queries, keys = config["num_attention_heads"] * dim, config["num_key_value_heads"] * dim
    shapes = {"q_proj": (hidden, queries), "k_proj": (hidden, keys), "v_proj": (hidden, keys),
              "o_proj": (queries, hidden)}
    return config["num_hidden_layers"] * rank * sum(sum(shapes[name]) for name in modules if name in shapes)


def accumulation_choices(cfg: TrainConfig) -> list[int]:
    """The gradient accumulation steps a step splits into (each micro-batch one sequence or more), smallest first."""
    per_process = cfg.tasks_per_step * cfg.group_size // cfg.launch.num_processes
    return [steps for steps in range(1, per_process + 1) if per_process % steps == 0]


def smallest_fitting(run: RunConfig, training: str, rollouts: str, least: int) -> tuple[Recipe, dict] | None:
    """The recipe (`training`, `rollouts`) at the smallest gradient accumulation from `least` on that fits the run's
    GPUs, with its memory; else the split that needs least, marked not fitting; None when no split can be made."""
    recipes = [Recipe(training, rollouts, steps) for steps in accumulation_choices(run.training) if steps >= least]
    rows = [(recipe, memory) for recipe in recipes if (memory := training_memory(run, recipe)) is not None]
    if not rows:
        return None
    return next((row for row in rows if row[1]["fits"]), min(rows, key=lambda row: row[1]["total_gb"]))


def fitting_accumulation(run: RunConfig, rollouts: str) -> int | None:
    """The smallest gradient accumulation, at least the profile's, under which its training recipe with `rollouts`
    fits its GPUs (for a server: counted over the profile's processes, before `server_split`); the profile's own for
    a model that is not a paper backbone (nothing to estimate); None when none fits."""
    cfg = run.training
    if paper_model(run.model) is None:
        return cfg.gradient_accumulation_steps
    found = smallest_fitting(run, recipe_of(cfg).training, rollouts, cfg.gradient_accumulation_steps)
    return found[0].gradient_accumulation_steps if found and found[1]["fits"] else None


def memory_plan(run: RunConfig) -> dict | None:
    """The table `--dry-run` prints: for each training recipe and rollout engine, the smallest micro-batch split that
    fits (else the split that needs least); the profile's own recipe; and, when it does not fit, the first that does
    in the order: more accumulation, the optimizer in CPU memory, vLLM colocated, a vLLM server, LoRA (`PREFERENCE`).
    None for a model that is not a paper backbone."""
    if paper_model(run.model) is None:
        return None
    cfg = run.training
    own = recipe_of(cfg)
    best = {}
    for training in TRAINING_RECIPES:
        for rollouts in ROLLOUT_ENGINES:
            least = 1 if (training, rollouts) != (own.training, own.rollouts) else own.gradient_accumulation_steps
            found = smallest_fitting(run, training, rollouts, least)
            if found is not None:
                best[training, rollouts] = found
    chosen = training_memory(run, own)
    if chosen and chosen["vllm_gpu_memory_utilization"] not in (None, cfg.vllm_gpu_memory_utilization):
        chosen["fits"] = False  # the run's own share of the GPU cannot hold vLLM's weights and one sequence
        chosen["vllm_share_too_small"] = cfg.vllm_gpu_memory_utilization
    plan = {"gpu_memory_gb": cfg.launch.gpu_memory_gb, "recipe": chosen,
            "table": [memory for _, memory in best.values()]}
    if chosen is None or not chosen["fits"]:
        order = [(own.training if training == "own" else training, own.rollouts if rollouts == "own" else rollouts)
                 for training, rollouts in PREFERENCE]
        instead = next((best[combo] for combo in order if combo in best and best[combo][1]["fits"]), None)
        plan["fits_instead"] = None if instead is None else {
            "recipe": str(instead[0]), "set": instead[0].settings(run), "total_gb": instead[1]["total_gb"]}
    return plan


PREFERENCE = [("own", "own"), ("zero3_offload", "own"), ("own", "vllm_colocate"), ("zero3_offload", "vllm_colocate"),
              ("own", "vllm_server"), ("zero3_offload", "vllm_server"), ("lora", "own"), ("lora", "vllm_colocate"),
              ("lora", "vllm_server")]
"""Where `memory_plan` looks for a recipe that fits, first to last ("own": the profile's): the fewest changes first,
LoRA last (it trains other weights than the paper)."""


def memory_refusal(run: RunConfig, plan: dict | None) -> str | None:
    """One line when the run's recipe does not fit its GPUs (naming one that does), else None."""
    if plan is None or (plan["recipe"] is not None and plan["recipe"]["fits"]):
        return None
    cfg = run.training
    recipe = plan["recipe"]
    needs = ("cannot split its step" if recipe is None else
             f"leaves vLLM {recipe['vllm_share_too_small']} of a GPU, less than its weights and one sequence need"
             if "vllm_share_too_small" in recipe else f"needs ~{recipe['total_gb']:g} GB per GPU")
    instead = plan.get("fits_instead")
    what = (f"fits: {instead['recipe']} (~{instead['total_gb']:g} GB: --set {' --set '.join(instead['set'])})"
            if instead else "no recipe fits: more GPUs (training.launch.num_processes) or larger ones")
    return (f"{run.model} on {cfg.launch.num_processes} x {cfg.launch.gpu_memory_gb:g} GB GPUs: {recipe_of(cfg)} "
            f"{needs} (the plan's estimate: training_memory); {what}")
