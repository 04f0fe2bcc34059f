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

Public surface, each name imported from its module (this package imports nothing, so
`import training.replay` never loads TRL):

- `training.sft.train_sft(lake, sql, base_model, output_dir, TrajlakeSFTConfig(...)) -> TrainResult`
  (`training.sft_config.TrajlakeSFTConfig`, `training.run.TrainResult`)
- `training.grpo.train_grpo(lake, sql, base_model, adapter, output_dir, TrajlakeGRPOConfig(...))`
  (`training.grpo_config.TrajlakeGRPOConfig`)
- `training.publish.publish(lake, adapter_dir, PublishConfig(...), aliases=..., gate=EvalGate(...))`
- `training.registry.resolve_adapter(lake, "name:alias")`, `read_manifest(path)`;
  `training.serving.check_vllm_compatible(path)`, `load_into_vllm`
- `training.tiny.build_tiny_model(path)`, `tiny_model_path()`
"""
