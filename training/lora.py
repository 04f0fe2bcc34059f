"""The LoRA adapter shape shared by the SFT and GRPO stages, kept inside what vLLM can serve.

vLLM refuses ranks outside its `--max-lora-rank` set, `modules_to_save`, DoRA, biases and
PiSSA-style inits (`training.publish.vllm_problems` checks a saved adapter the same way),
so `LoraFields.lora_config()` only builds adapters it accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from store.errors import check_settings
from training.errors import BadHyperparameter
from training.models.adapters import peft_wrapping
from training.models.known import resolve_model

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
        check_settings(
            self,
            (
                "lora_r",
                self.lora_r in VLLM_LORA_RANKS,
                f"a rank vLLM can serve: one of {', '.join(map(str, VLLM_LORA_RANKS))}",
            ),
            ("lora_alpha", self.lora_alpha > 0, "positive"),
            ("lora_dropout", 0.0 <= self.lora_dropout < 1.0, "in [0, 1)"),
            error=BadHyperparameter,
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


def trainable_policy(
    base_model: str, adapter: str | None, lora: LoraFields, *, bf16: bool
) -> tuple[Any, Any]:
    """The model to train and the PEFT config to pass TRL: the base model (a known name resolved to
    its fetched folder, `training.models.known`) and a new adapter's config, or, continuing from
    `adapter`, that adapter loaded trainable (and None)."""
    base_model = resolve_model(base_model)
    if adapter is None:
        return base_model, lora.lora_config()
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.bfloat16 if bf16 else torch.float32)
    with peft_wrapping():
        return PeftModel.from_pretrained(model, adapter, is_trainable=True), None
