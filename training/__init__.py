"""Training: SFT, then GRPO on stored, scored groups (TRL + PEFT), and publishing the LoRA adapters.

Replay, the stage that samples the groups GRPO learns from, has its own package
(`training.replay`); nothing in it imports the trainers, and the trainers import nothing of
it. What both use lives in two shared packages that neither owns: `training.chat` (the one
chat rendering and template choice) and `training.models` (known models by name, policy
names, adapter files and PEFT wrapping). The rest of `training/`:

- `sft` + `sft_config`, `grpo` + `grpo_config`: the two stages, TRL trainers configured;
- `datasets` (SFT conversations and GRPO groups selected by SQL), `advantages`, `lineage`;
- `lora` (adapter shape vLLM accepts), `device` (what the hardware does natively),
  `checkpointing` (activation checkpointing under transformers' current name);
- `run` (run folder, checkpoints, run record), `metrics` (per-step `runs` rows, the
  non-finite loss guard);
- `registry`, `publish`, `serving`: versions, the publish step, vLLM checks and hot-load;
- `tiny`: the tiny local model tests and the demo build offline.

Public surface (imported on first use, so `import training.replay` never loads TRL):

- `train_sft(lake, sql, base_model, output_dir, TrajlakeSFTConfig(...)) -> TrainResult`
- `train_grpo(lake, sql, base_model, adapter, output_dir, TrajlakeGRPOConfig(...)) -> TrainResult`
- `training.publish.publish(lake, adapter_dir, PublishConfig(...), aliases=..., gate=EvalGate(...))`
- `resolve_adapter(lake, "name:alias")`, `read_manifest(path)`, `check_vllm_compatible(path)`
- `build_tiny_model(path)`, `tiny_model_path()`
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "train_sft": "training.sft",
    "TrajlakeSFTConfig": "training.sft_config",
    "train_grpo": "training.grpo",
    "TrajlakeGRPOConfig": "training.grpo_config",
    "TrainResult": "training.run",
    "PublishConfig": "training.publish",
    "EvalGate": "training.publish",
    "PublishedAdapter": "training.publish",
    "resolve_adapter": "training.registry",
    "read_manifest": "training.registry",
    "check_vllm_compatible": "training.serving",
    "load_into_vllm": "training.serving",
    "build_tiny_model": "training.tiny",
    "tiny_model_path": "training.tiny",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module `training` has no attribute `{name}`")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
