"""Activation checkpointing under its current name.

transformers 5.2x renamed `gradient_checkpointing` to `activation_checkpointing`: setting
the old name warns (FutureWarning, removed in v6). TRL 1.16's configs still default the
old name to True, so every SFT or GRPO config warned on every run. `CheckpointingFields`
moves that default to the new name; the old one stays None unless someone sets it (then
transformers warns, rightly, and still honours it). A transformers from before the rename
reads only the old name, which then carries the same value.

Left unset, the device decides (`training.device.recompute_activations`): off on a CPU, where
recomputing the forward pass made SmolLM2's SFT and GRPO steps ~25% slower and host memory
holds the activations; on elsewhere, as in TRL. Loss and gradients are the same either way
(`tests/training/test_checkpointing.py`). Either name set by the user always wins.

PEFT's probe of the old name, which warns whenever PEFT wraps a model, is hidden by
`training.models.adapters.peft_wrapping` (samplers wrap adapters too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from training.device import recompute_activations


@dataclass
class CheckpointingFields:
    """Overrides of TRL's checkpointing fields: unset, off on a CPU and on elsewhere, under the current name."""

    activation_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass instead of keeping them: less memory, "
            "~25% slower steps. Unset: off when training on a CPU (host memory holds the activations; "
            "SmolLM2-135M's SFT and GRPO steps were 1.23x and 1.27x faster without), on with an "
            "accelerator (TRL's choice)."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Deprecated name of `activation_checkpointing` (transformers warns when set)."},
    )

    def resolve_checkpointing(self) -> None:
        """Call before `TrainingArguments.__post_init__`: neither name set means the device's default
        (`recompute_activations`), under the new name."""
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = recompute_activations(bool(getattr(self, "use_cpu", False)))
        if self.gradient_checkpointing is None and not renamed():
            # transformers before the rename (vLLM's environment holds one) reads only the old name
            self.gradient_checkpointing = bool(self.activation_checkpointing)


def renamed() -> bool:
    """Whether this transformers has `activation_checkpointing` (5.2x on); older ones know only the old name."""
    from transformers import TrainingArguments

    return "activation_checkpointing" in TrainingArguments.__dataclass_fields__
