"""The supervised warm start shared by the environments (a kit addition, off in the paper profiles): its data (validated
synthetic tasks from unguided explorations, `warm_start_tasks`), the fine-tuning loop (`train_sft`), the cache of
built warm starts and the copies the kit ships (`cached_warm_start`, `shipped_warm_start`, `ship_warm_start`). Each
environment renders its tasks' reference solutions as conversations and names its sources and recipe
(`envs/bfcl/warm_start.py`, `envs/appworld/warm_start.py`).

A GRPO group of a policy that never succeeds has zero advantage everywhere: nothing is learned and no boundary or
forgetting signal can fire. The paper starts from instruct models that already score 13-43% on BFCL; the tiny
profiles get a comparable start from a warm start.

Training is a plain PyTorch loop (`train_sft`), stated up front because TRL is used elsewhere: on the tiny model it is
about twice as fast as TRL's `SFTTrainer` with the same threads (docs/log.md). Loss on all tokens by default (the query
and the observations hold the names to copy; assistant-only loss succeeded far less often in the prototype,
shared/reference/tiny-model-feasibility.md), batches of similar length, AdamW, linear warm-up, then a cosine decay
that ends exactly at the last step (mid-schedule models are far worse).

A tiny profile's warm start is too long to build at every setup (docs/log.md), so the kit ships it
(`coevolve_lib/data/warm_start/<profile>/`, see `shipped_warm_start`), with the command that regenerates it: `python -m
coevolve_lib warm-start --profile <profile> --ship`.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import replace
from pathlib import Path

from tqdm.auto import tqdm

from coevolve_lib.core.config import ExploreConfig, WarmStartConfig
from coevolve_lib.core.paths import CACHE_DIR, LIBRARY_DATA, profile_label
from coevolve_lib.core.records import config_hash, file_sha256, write_json_atomic
from coevolve_lib.engine.feedback import FeedbackConfig, synthesize_initial
from coevolve_lib.engine.pool import TaskPool


def warm_start_tasks(sources: list, work_dir: str | Path, config: WarmStartConfig, synthesis,
                     environment) -> list[dict]:
    """The warm start's validated synthetic tasks (task/v1 records): `config.data_seeds` unguided explorations
    of the `sources` environments through `environment` (its targets and round stages),
    abstracted with `synthesis` (query style) but `data_min_calls`..`data_max_calls` calls long. Each seed's tasks are
    cached under `work_dir/seed_<n>/` (seconds per seed)."""
    lengths = replace(synthesis, min_calls=config.data_min_calls, max_calls=config.data_max_calls)
    tasks = []
    for seed in range(config.first_data_seed, config.first_data_seed + config.data_seeds):
        seed_dir = Path(work_dir) / f"seed_{seed}"
        pool = TaskPool(seed_dir / "pool.jsonl")
        if not (seed_dir / "round" / "report.json").exists():
            explore = ExploreConfig(runs=config.data_runs, calls_per_run=config.data_calls_per_run, seed=seed)
            synthesize_initial(sources, pool, seed_dir / "round", FeedbackConfig(explore=explore, synthesis=lengths),
                               environment.target, environment.round_stages(), size=10**9, progress=False)
        tasks += pool.tasks
    return tasks


def length_grouped_batches(lengths: list[int], batch_size: int, rng: random.Random, window: int = 50):
    """Endless batches of indices: shuffle, sort each window of `window` batches by length, cut into batches,
    shuffle the batches (little padding, order still random)."""
    while True:
        order = list(range(len(lengths)))
        rng.shuffle(order)
        batches = []
        for start in range(0, len(order), batch_size * window):
            chunk = sorted(order[start:start + batch_size * window], key=lengths.__getitem__)
            batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        rng.shuffle(batches)
        yield from batches


def learning_rate_at(step: int, config: WarmStartConfig) -> float:
    """Linear warm-up to the peak, then cosine decay to `final_lr_ratio` of it, reached at step `config.max_steps`."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return config.learning_rate * (config.final_lr_ratio + (1 - config.final_lr_ratio) * cosine)


def assistant_labeled(tokenizer, conversation: dict, max_length: int) -> tuple[list[int], list[int]]:
    """(token ids, labels) of a conversation with the loss on the assistant messages only (their text and the
    end-of-turn token; labels -100 elsewhere). Each message's framing is tokenized on its own, as token-level
    rollouts see it: the first prompt, then each reply, then each environment continuation (`HFChatModel.
    continuation_ids`); the template must be prefix-preserving."""
    messages, tools = conversation["messages"], conversation.get("tools")
    render = lambda upto, prompt: tokenizer.apply_chat_template(  # noqa: E731
        messages[:upto], tools=tools, add_generation_prompt=prompt, tokenize=False)
    ids, labels, done = [], [], ""
    end_of_turn = tokenizer.eos_token
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = render(index, True)
        reply = render(index + 1, False)
        reply = reply[:reply.index(end_of_turn, len(prompt)) + len(end_of_turn)]
        if not (prompt.startswith(done) and reply.startswith(prompt)):
            raise ValueError("the chat template is not prefix-preserving: no assistant-only labels")
        context = tokenizer(prompt[len(done):], add_special_tokens=False)["input_ids"]
        answer = tokenizer(reply[len(prompt):], add_special_tokens=False)["input_ids"]
        ids += context + answer
        labels += [-100] * len(context) + answer
        done = reply
    return ids[:max_length], labels[:max_length]


def train_sft(model_path: str | Path, conversations: list[dict], out_dir: str | Path, config: WarmStartConfig,
              progress: bool = True, assistant_only: bool = False) -> dict:
    """Fine-tune the model at `model_path` on `conversations` ({"messages", "tools"}), loss on all tokens, or with
    `assistant_only` on the assistant tokens (`assistant_loss`); save it (with its tokenizer) to `out_dir`. Returns
    {"examples", "steps", "tokens", "seconds", "tokens_per_s", "loss"} (`loss`: the mean training loss of every 50
    steps; with `assistant_only` also "vocabulary", the tokens the data holds)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(config.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).to(device)
    examples, targets = [], []
    for conversation in conversations:
        if assistant_only:
            ids, labels = assistant_labeled(tokenizer, conversation, config.max_length)
            targets.append(labels)
        else:
            ids = tokenizer.apply_chat_template(conversation["messages"], tools=conversation.get("tools"),
                                                tokenize=True, return_dict=True)["input_ids"]
        examples.append(list(ids)[:config.max_length])
    vocabulary = None
    if assistant_only:
        vocabulary = DataVocabulary(model, sorted({token for ids in examples for token in ids}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(0.9, config.adam_beta2),
                                  weight_decay=0.0)
    batches = length_grouped_batches([len(e) for e in examples], config.batch_size, random.Random(config.seed))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    losses, window, tokens = [], [], 0
    start = time.perf_counter()
    for step in tqdm(range(config.max_steps), desc="warm start", unit="step", disable=not progress):
        indices = next(batches)
        batch = [examples[i] for i in indices]
        width = max(map(len, batch))
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in batch], device=device)
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch], device=device)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, config)
        if assistant_only:
            labels = torch.tensor([targets[i] + [-100] * (width - len(targets[i])) for i in indices], device=device)
            loss = assistant_loss(model, input_ids, mask, labels, vocabulary)
        else:
            loss = model(input_ids=input_ids, attention_mask=mask,
                         labels=input_ids.masked_fill(mask == 0, -100)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens += int(mask.sum())
        window.append(loss.item())
        if len(window) == 50 or step == config.max_steps - 1:
            losses.append(round(sum(window) / len(window), 4))
            window = []
    seconds = time.perf_counter() - start
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"examples": len(examples), "steps": config.max_steps, "tokens": tokens, "seconds": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds) if seconds else None, "loss": losses,
            **({"vocabulary": len(vocabulary.ids)} if vocabulary else {})}


class DataVocabulary:
    """The tokens a fine-tuning set holds, in a model whose output rows of every other token are zero (set here):
    those tokens' logits are 0 whatever the input, so a softmax over the data's tokens plus one term for the others,
    `log(their count)`, is the full softmax, exactly, at the cost of the data's few thousand rows instead of all
    151,936 (the whole head made a format warm start's step slow: docs/log.md). The zero rows get no
    gradient and stay zero (a tied embedding's: their tokens never occur as input either)."""

    def __init__(self, model, ids: list[int]):
        import torch

        if getattr(model.get_output_embeddings(), "bias", None) is not None:
            raise ValueError("an output head with a bias gives its zero rows a logit other than 0")
        head = model.get_output_embeddings().weight
        self.ids = torch.tensor(ids, device=head.device)
        self.index = torch.full((head.shape[0],), -1, dtype=torch.long, device=head.device)
        self.index[self.ids] = torch.arange(len(ids), device=head.device)
        with torch.no_grad():
            head[self.index < 0] = 0.0
        self.outside = float(math.log(head.shape[0] - len(ids)))
        """log of the number of zero rows: their exp(0) terms in the softmax's normaliser."""


def assistant_loss(model, input_ids, attention_mask, labels, vocabulary: DataVocabulary):
    """Next-token cross-entropy at the labelled positions, the output head applied to those positions and to the
    data's tokens only (`DataVocabulary`: the same loss as over the whole head)."""
    import torch

    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    targets = labels[:, 1:]
    chosen = targets != -100
    states = hidden[:, :-1][chosen]
    logits = states @ model.get_output_embeddings().weight[vocabulary.ids].T
    outside = logits.new_full((logits.shape[0], 1), vocabulary.outside)
    log_probs = torch.cat([logits.float(), outside], dim=1).log_softmax(dim=1)
    return -log_probs.gather(1, vocabulary.index[targets[chosen]][:, None]).mean()


# ------------------------------------------------------------------------------------------- shipped warm starts

SHIPPED_DIR = LIBRARY_DATA / "warm_start"
"""Warm starts the kit ships, one folder per profile: the model files and `manifest.json` (recipe, its key, the
sha256 of every file, the build summary and the command that regenerates it)."""
RECIPE_VERSION = 1
"""Part of every recipe: bump it when a code change alters what a recipe builds (data or training loop)."""
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")


def shipped_warm_start(profile: str, recipe_key: str) -> Path | None:
    """The shipped warm start of `profile` when it was built from the recipe `recipe_key`; None when there is none or
    its recipe differs (the caller then builds one). A file whose hash differs from the manifest is an error."""
    folder = SHIPPED_DIR / profile_label(profile)
    if not (folder / "manifest.json").exists():
        return None
    manifest = json.loads((folder / "manifest.json").read_text())
    if manifest["recipe_key"] != recipe_key:
        return None
    for name, digest in manifest["files"].items():
        if not (folder / name).exists() or file_sha256(folder / name) != digest:
            raise RuntimeError(
                f"{folder / name} is missing or its sha256 differs from {folder / 'manifest.json'}: the shipped warm "
                f"start is damaged (a Git LFS pointer or a hand edit?). Restore it with `git checkout -- {folder}` or "
                f"rebuild it with `{manifest['command']}`.")
    return folder


def ship_warm_start(built: str | Path, profile: str, recipe: dict, recipe_key: str, summary: dict,
                    command: str) -> Path:
    """Copy the model files of a built warm start to SHIPPED_DIR/<profile> with their manifest."""
    folder = SHIPPED_DIR / profile_label(profile)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    files = {}
    for name in MODEL_FILES:
        if (Path(built) / name).exists():
            shutil.copy2(Path(built) / name, folder / name)
            files[name] = file_sha256(folder / name)
    manifest = {"recipe_key": recipe_key, "recipe": recipe, "files": files, "summary": summary, "command": command}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return folder


def cached_warm_start(profile: str, recipe: dict, build, use_shipped: bool = True) -> str:
    """The model folder of a warm-start `recipe`: the shipped copy of `profile` (when `use_shipped` and built from
    the same recipe), else the cached one under `.cache/warm_start/<recipe key>`, else `build(folder)` run into a
    `.partial` folder that is moved into the cache when it finishes (a build cut short is started afresh next time).
    `build` returns the build's summary, written beside the model as `warm_start.json`."""
    key = config_hash(recipe)
    shipped = shipped_warm_start(profile, key) if use_shipped else None
    if shipped is not None:
        return str(shipped)
    out = CACHE_DIR / "warm_start" / key
    if not (out / "warm_start.json").exists():
        partial = out.with_name(key + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        summary = build(partial)
        write_json_atomic(partial / "warm_start.json", {**summary, "recipe_key": key, "recipe": recipe})
        shutil.rmtree(out, ignore_errors=True)
        os.replace(partial, out)
    return str(out)
