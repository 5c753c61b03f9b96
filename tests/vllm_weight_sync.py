"""Run by tests/test_vllm.py in `.venv-vllm/` (its own process: vLLM's engine and TRL's process group live in it):
one GRPO step with TRL's colocated vLLM on the CPU, then TRL's weight sync, then vLLM's greedy replies read against
the trained policy and against the initial weights.

    python tests/vllm_weight_sync.py OUT_DIR [--without-workaround]

Prints one JSON line. "Greedy under a model" is read position by position, teacher-forced: the gap between the model's
largest logit and the logit of the token vLLM chose (0 where vLLM chose an argmax). A greedy sequence is compared this
way, not token for token with transformers' own greedy sequence, because this small policy has exact ties (a top-2
logit margin of 0.0 measured) that two argmax implementations may break differently, after which the sequences part."""

import json
import sys

from coevolve_lib.core.paths import LIBRARY_DATA

POLICY = LIBRARY_DATA / "warm_start" / "tiny"
PROMPTS = ["List the files in the current folder.", "Create a folder named reports.", "Show the last lines of log.txt.",
           "Copy notes.txt to backup.", "Count the words in essay.md.", "Move draft.md into archive.",
           "Find every file named todo.", "Sort the lines of names.txt."]
NEW_TOKENS = 16


def largest_gap(model, prompt_ids: list[int], completion: list[int]) -> float:
    """The largest gap, over the completion's positions, between `model`'s largest logit and the chosen token's."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + completion])).logits[0, len(prompt_ids) - 1:-1]
    chosen = logits.gather(1, torch.tensor(completion)[:, None])[:, 0]
    return (logits.max(dim=1).values - chosen).max().item()


def main(out_dir: str, workaround: bool) -> None:
    import functools

    import torch
    import vllm
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from trl.generation import vllm_generation
    from vllm import SamplingParams

    from coevolve_lib.rollout.vllm_cpu import keep_weights_loadable

    torch.manual_seed(0)
    # TRL builds its colocated engine with vLLM's `dtype="auto"`, which downcasts a float32 checkpoint to bfloat16;
    # float32 here, as the trained policy it is compared with (TRL's GRPOConfig takes no dtype for vLLM)
    vllm_generation.LLM = functools.partial(vllm.LLM, dtype="float32")
    applied = keep_weights_loadable() if workaround else False
    args = GRPOConfig(output_dir=out_dir, use_cpu=True, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=256,
                      max_steps=1, per_device_train_batch_size=8, num_generations=8, max_completion_length=NEW_TOKENS,
                      learning_rate=1e-3, beta=0.0, bf16=False, logging_steps=1, save_strategy="no", report_to=[],
                      model_init_kwargs={"dtype": "float32"})  # float32 as vLLM (TRL's default is bf16 autocast)

    def length_reward(completions, **kwargs):  # differs within a group: a non-zero advantage, so the weights move
        return [float(len(completion)) for completion in completions]

    trainer = GRPOTrainer(model=str(POLICY), reward_funcs=[length_reward], args=args,
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}))
    tokenizer, llm = trainer.processing_class, trainer.vllm_generation.llm
    prompt_ids = [tokenizer(prompt)["input_ids"] for prompt in PROMPTS]
    greedy = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)

    def vllm_greedy():
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], greedy, use_tqdm=False)
        return [list(out.outputs[0].token_ids) for out in outputs]

    before = vllm_greedy()
    trainer.train()
    trainer.vllm_generation.sync_weights()  # what TRL does before each rollout phase
    after = vllm_greedy()
    # Both policies read afresh from disk: the trainer's model object carries accelerate's wrappers after train()
    trainer.save_model(f"{out_dir}/trained")
    initial, trained = (AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
                        for path in (str(POLICY), f"{out_dir}/trained"))
    moved = max((p - q).abs().max().item() for p, q in zip(trained.parameters(), initial.parameters(), strict=True))
    print(json.dumps({
        "workaround_applied": applied, "largest_weight_change": moved, "vllm_before": before, "vllm_after": after,
        "gap_before_under_initial": max(largest_gap(initial, p, c) for p, c in zip(prompt_ids, before)),
        "gap_after_under_trained": max(largest_gap(trained, p, c) for p, c in zip(prompt_ids, after)),
        "gap_after_under_initial": max(largest_gap(initial, p, c) for p, c in zip(prompt_ids, after))}))


if __name__ == "__main__":
    main(sys.argv[1], "--without-workaround" not in sys.argv[2:])
