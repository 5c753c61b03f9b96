"""Where the kit changes TRL's behaviour, each for a stated reason: a GRPOTrainer that reloads full weights strictly,
and completion-only scoring through the output head on CPU."""

from __future__ import annotations

from pathlib import Path

from coevolve_lib.core.models import hub_offline, missing_model_message
from coevolve_lib.training.checkpoints import load_saved_weights


def trainer_class():
    from peft import PeftModel
    from trl import GRPOTrainer

    class CoEvolveGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer resuming full weights with `load_saved_weights`; DeepSpeed, FSDP and LoRA checkpoints
        (their own formats) keep the Trainer's path."""

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            if self.is_deepspeed_enabled or self.is_fsdp_enabled or isinstance(self.model, PeftModel):
                return super()._load_from_checkpoint(resume_from_checkpoint, model)
            load_saved_weights(self.model, Path(resume_from_checkpoint))

    return CoEvolveGRPOTrainer


FULL_SCORING_MAX_VOCAB = 32_768
"""Vocabularies up to this size keep TRL's own CPU scoring (`score_completions_only`)."""


def vocabulary_size(model_path: str) -> int:
    """The output head's width of a model folder or cached hub model, read from its config."""
    from transformers import AutoConfig

    local_only = hub_offline()
    try:
        config = AutoConfig.from_pretrained(model_path, local_files_only=local_only)
    except OSError as exc:  # not a folder, not in the hub cache: the first load of a run's model, so say it here
        raise FileNotFoundError(missing_model_message(model_path, local_only, exc)) from None
    return config.get_text_config().vocab_size


def score_completions_only() -> None:
    """Have TRL 1.16 score only the completion positions through the output head on CPU, as it does on CUDA. Where
    Triton is missing it scores every position of a sequence (fixed tile shapes for compilers such as Neuron's) and
    throws the prompt's scores away: on CPU, with no compiler, a 1,400-token prompt cost each sequence ~11 s per pass
    through a 151,936-token head (a Qwen stand-in), for the 60-odd positions the loss reads. The loss is the same;
    the gradient differs in float rounding (4e-7 in the tiny model's weights after 3 steps). Called for vocabularies
    over `FULL_SCORING_MAX_VOCAB` only: the kit's tiny model (4,102 tokens) keeps TRL's path, which costs it little
    and which its committed results were measured with."""
    import trl.trainer.utils as trl_utils

    if not getattr(trl_utils._use_triton, "completions_only", False):
        on_accelerator = trl_utils._use_triton

        def use_compact_path(device) -> bool:
            return device.type == "cpu" or on_accelerator(device)

        use_compact_path.completions_only = True
        trl_utils._use_triton = use_compact_path
