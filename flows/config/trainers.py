"""`[train.sft]` and `[train.grpo]`: TRL's arguments stay TRL's. The tables hold overrides of the
few TRL fields a user sets in trajlake.toml; TRL's config (trajlake's subclass) declares their
types, defaults and help, and checks them when a trainer's config is built, so reading the
configuration never imports TRL."""

from __future__ import annotations

import importlib
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, field_validator

from store.errors import SettingError

# The TRL fields a user sets in `[train.sft]` / `[train.grpo]` (TRL declares hundreds).
SFT_FIELDS = (
    "num_train_epochs",
    "max_steps",
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "packing",
    "tree_packing",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "seed",
    "activation_checkpointing",
    "save_steps",
    "report_to",
)
GRPO_FIELDS = (
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "warmup_steps",
    "max_completion_length",
    "mask_truncated_completions",
    "skip_equal_reward_groups",
    "max_staleness",
    "measure_sampler_gap",
    "tree_packing",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "lora_r",
    "seed",
    "activation_checkpointing",
    "save_steps",
    "report_to",
)
TRAINERS = {
    "sft": ("training.sft_config", "TrajlakeSFTConfig", SFT_FIELDS),
    "grpo": ("training.grpo_config", "TrajlakeGRPOConfig", GRPO_FIELDS),
}


# Their command-line spelling where it is not the field's (`--lr`).
TRAIN_FLAGS = {
    "num_train_epochs": "--epochs",
    "learning_rate": "--lr",
    "per_device_train_batch_size": "--batch-size",
}


class TrainSettings(BaseModel):
    """`[train.sft]` and `[train.grpo]`: overrides of TRL's declared fields, built by TRL's config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sft: dict[str, Any] = {}
    grpo: dict[str, Any] = {}

    @field_validator("sft", "grpo")
    @classmethod
    def _known_fields(cls, values: dict[str, Any], info: Any) -> dict[str, Any]:
        allowed = TRAINERS[info.field_name][2]
        for name in values:
            if name not in allowed:
                raise SettingError(
                    f"unknown key; `train.{info.field_name}` has: {', '.join(allowed)}", field=name
                )
        return values

    def sft_config(self, output_dir: str, **extra: Any) -> Any:
        """TRL's `SFTConfig` (trajlake's subclass) from these values, then `extra` (imports TRL)."""
        return self.trainer_config("sft", output_dir=output_dir, **extra)

    def grpo_config(self, output_dir: str, **extra: Any) -> Any:
        """TRL's `GRPOConfig` (trajlake's subclass) from these values, then `extra` (imports TRL)."""
        return self.trainer_config("grpo", output_dir=output_dir, **extra)

    def trainer_config(self, trainer: str, **extra: Any) -> Any:
        """The trainer's config: each value validated against the type TRL declares for it."""
        module, name, _ = TRAINERS[trainer]
        cls = getattr(importlib.import_module(module), name)
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for key, raw in getattr(self, trainer).items():
            try:
                values[key] = TypeAdapter(hints[key]).validate_python(raw)
            except ValidationError as exc:
                raise SettingError(exc.errors()[0]["msg"], field=f"{trainer}.{key}") from None
        try:
            return cls(**{**values, **extra})
        except (ValueError, TypeError) as exc:
            failed = exc.field if isinstance(exc, SettingError) else None
            raise SettingError(str(exc), field=f"{trainer}.{failed}" if failed else trainer) from None
