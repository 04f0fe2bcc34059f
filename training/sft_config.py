"""Configuration of the SFT stage: TRL's `SFTConfig` plus the few fields trajlake adds.

Everything TRL and transformers offer (learning rate, batch sizes, `packing`,
`save_steps`, `report_to="wandb"|"tensorboard"`, ...) is inherited unchanged; the fields
below only add the LoRA shape (kept inside what vLLM can serve) and run bookkeeping.
`LoraFields` is shared with the GRPO config so both stages build adapters the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from store.errors import check_settings
from training.checkpointing import CheckpointingFields
from training.device import bf16_supported, claim_cpu
from training.errors import BadHyperparameter
from training.lora import LoraFields


@dataclass
class TrajlakeSFTConfig(LoraFields, CheckpointingFields, SFTConfig):  # type: ignore[misc]  # bool | None: unset means "on" (CheckpointingFields)
    """`SFTConfig` with trajlake's LoRA fields and defaults suited to training on lake conversations.

    Defaults that differ from TRL's: bf16 only where the hardware does it natively;
    `logging_steps=1` (every optimizer step lands in the `runs` table),
    `save_strategy="steps"` with `save_steps=50` (resumable), and `report_to="none"` (set
    `"wandb"` or `"tensorboard"` to mirror the metrics there). Activation checkpointing is
    on, as in TRL, under its current name (`training.checkpointing`).
    """

    packing: bool = field(
        default=False,
        metadata={
            "help": "Pack conversations into full rows (padding-free bfd). Off by default: without a "
            "FlashAttention varlen kernel padded batches were faster on a CPU (~6x) and on an H200 (1.8x)."
        },
    )
    tree_packing: bool | None = field(
        default=None,
        metadata={
            "help": "Forward each batch's conversations once as a prefix tree (unset: on, unless `packing` is): "
            "what they share before their first trained token (system prompt, tool definitions) is computed once, "
            "with a mask that lets each token see only its own conversation (loss and gradients equal the "
            "unpacked ones; `training.sft_trainer`). The share of tokens saved is logged per step; a model "
            "whose attention takes no mask is trained unpacked."
        },
    )
    logging_steps: float = field(default=1, metadata={"help": "Log (and write to `runs`) every N steps."})
    save_steps: float = field(
        default=50, metadata={"help": "Checkpoint every N steps (resume from the latest)."}
    )
    report_to: str | list[str] | None = field(
        default="none", metadata={"help": "Also report to these integrations (wandb, tensorboard, ...)."}
    )

    def __post_init__(self) -> None:
        self.check_lora()
        self.resolve_checkpointing()
        if self.bf16 is None and not self.fp16:
            self.bf16 = bf16_supported()  # TRL defaults to bf16, which CPUs and older GPUs reject
        explicit_tree_packing = self.tree_packing
        if self.tree_packing is None:
            self.tree_packing = not self.packing
        check_settings(
            self,
            ("learning_rate", self.learning_rate > 0, "positive"),
            ("max_length", self.max_length is None or self.max_length >= 8, ">= 8 (room for a conversation)"),
            (
                "tree_packing",
                not (explicit_tree_packing and self.packing),
                "off when `packing` is on (two ways to pack a batch)",
            ),
            error=BadHyperparameter,
        )
        claim_cpu(self)  # several processes on CPUs: one data-parallel run (training.distributed)
        super().__post_init__()
