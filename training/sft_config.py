"""Configuration of the SFT stage: TRL's `SFTConfig` plus the few fields trajlake adds.

Everything TRL and transformers offer (learning rate, batch sizes, `packing`,
`save_steps`, `report_to="wandb"|"tensorboard"`, ...) is inherited unchanged; the fields
below only add the LoRA shape (kept inside what vLLM can serve) and run bookkeeping.
`LoraFields` is shared with the GRPO config so both stages build adapters the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import SFTConfig

from training.errors import BadHyperparameter

# vLLM's `--max-lora-rank` accepts exactly these values (vllm/config/lora.py).
VLLM_LORA_RANKS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_TARGET_MODULES: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)


def bf16_supported() -> bool:
    """Whether bf16 mixed precision can run here (a CUDA device that supports it)."""
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


@dataclass
class LoraFields:
    """LoRA adapter shape shared by the SFT and GRPO stages (vLLM-servable by construction)."""

    # Parameters that shape the LoRA adapter
    lora_r: int = field(
        default=16,
        metadata={
            "help": f"LoRA rank; must be one of vLLM's ranks {VLLM_LORA_RANKS} and <= the server's --max-lora-rank (16 by default)."
        },
    )
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (scale = alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input during training."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "Modules to adapt; default: the attention and MLP projections of Qwen/Llama-style models."
        },
    )
    # Bookkeeping
    run_id: str | None = field(
        default=None, metadata={"help": "Id of this run in the lake's `runs` table (generated when empty)."}
    )

    def check_lora(self) -> None:
        """Reject adapter shapes vLLM would refuse, before any work starts."""
        if self.lora_r not in VLLM_LORA_RANKS:
            raise BadHyperparameter(
                f"`lora_r` = {self.lora_r} is not a rank vLLM can serve; pick one of {', '.join(map(str, VLLM_LORA_RANKS))}",
                name="lora_r",
                value=self.lora_r,
            )
        if self.lora_alpha <= 0:
            raise BadHyperparameter(
                f"`lora_alpha` must be positive; got {self.lora_alpha}",
                name="lora_alpha",
                value=self.lora_alpha,
            )
        if not 0.0 <= self.lora_dropout < 1.0:
            raise BadHyperparameter(
                f"`lora_dropout` must be in [0, 1); got {self.lora_dropout}",
                name="lora_dropout",
                value=self.lora_dropout,
            )

    def lora_config(self) -> Any:
        """The PEFT `LoraConfig`: bias none, no DoRA, no modules_to_save, default init (all vLLM-compatible)."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=list(self.lora_target_modules or DEFAULT_TARGET_MODULES),
            bias="none",
            use_dora=False,
            modules_to_save=None,
            task_type="CAUSAL_LM",
        )

    def lora_hyperparameters(self) -> dict[str, Any]:
        return {
            "lora_r": self.lora_r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "lora_target_modules": list(self.lora_target_modules or DEFAULT_TARGET_MODULES),
        }


@dataclass
class TrajlakeSFTConfig(LoraFields, SFTConfig):
    """`SFTConfig` with trajlake's LoRA fields and defaults suited to training on lake conversations.

    Defaults that differ from TRL's: `packing=True` (best-fit decreasing, sequences kept
    apart through position ids), `logging_steps=1` (every optimizer step lands in the
    `runs` table), `save_strategy="steps"` with `save_steps=50` (resumable), and
    `report_to="none"` (set `"wandb"` or `"tensorboard"` to mirror the metrics there).
    """

    packing: bool = field(default=True, metadata={"help": "Pack conversations into full rows (bfd)."})
    logging_steps: float = field(default=1, metadata={"help": "Log (and write to `runs`) every N steps."})
    save_steps: float = field(
        default=50, metadata={"help": "Checkpoint every N steps (resume from the latest)."}
    )
    report_to: str | list[str] | None = field(
        default="none", metadata={"help": "Also report to these integrations (wandb, tensorboard, ...)."}
    )

    def __post_init__(self) -> None:
        self.check_lora()
        if self.bf16 is None and not self.fp16:
            self.bf16 = bf16_supported()  # TRL defaults to bf16, which CPUs and older GPUs reject
        if self.learning_rate <= 0:
            raise BadHyperparameter(
                f"`learning_rate` must be positive; got {self.learning_rate}",
                name="learning_rate",
                value=self.learning_rate,
            )
        if self.max_length is not None and self.max_length < 8:
            raise BadHyperparameter(
                f"`max_length` = {self.max_length} leaves no room for a conversation",
                name="max_length",
                value=self.max_length,
            )
        super().__post_init__()
