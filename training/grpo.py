"""GRPO stage: select stored, scored groups from the lake, train on them with
`training.grpo_trainer.StoredGroupsGRPOTrainer` (or its opt-in layer
`training.grpo_tree_trainer.TreePackedGRPOTrainer` when tree packing or the sampler gap is on),
and record the run and its lineage."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from store.lake import Lake
from training.datasets import select_grpo
from training.distributed import on_writer, shared_snapshot
from training.grpo_config import TrajlakeGRPOConfig
from training.grpo_rows import (
    bound_staleness,
    cut_to_max_length,
    drop_equal_reward_groups,
    fit_batch_to_rows,
    grpo_dataset,
)
from training.grpo_trainer import StoredGroupsGRPOTrainer as StoredGroupsGRPOTrainer  # re-exported
from training.grpo_trainer import stored_reward
from training.grpo_tree_trainer import grpo_trainer_class
from training.lora import trainable_policy
from training.metrics import NonFiniteLossGuard, ProgressLog, RunsTableCallback
from training.models.adapters import peft_wrapping
from training.run import (
    CHECKPOINTS,
    TrainResult,
    check_adapter_dir,
    check_base_model,
    last_checkpoint,
    load_tokenizer,
    parent_record,
    start_run,
    train_and_record,
)


def train_grpo(
    lake: Lake | str,
    sql: str,
    base_model: str | os.PathLike[str],
    adapter: str | os.PathLike[str] | None,
    output_dir: str | os.PathLike[str],
    config: TrajlakeGRPOConfig | None = None,
    *,
    resume: bool = False,
    as_of: Mapping[str, int] | None = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train (or continue) a LoRA adapter with GRPO on the stored groups `sql` selects
    (`store.selections.GRPO_TRAJECTORIES`: every replayed trajectory with token data outside the val scenarios).

    `adapter` is the adapter folder to continue from (the SFT stage's output), or None
    for a fresh LoRA on `base_model`. Selection, token data and configuration are
    checked before any model is loaded. Each logged step is a `runs` row (stage `grpo`);
    with `resume=True` training continues from the newest checkpoint. `as_of` reads the
    lake at the table versions of an earlier lineage. The policy's logits are divided by
    the temperature the groups recorded when they were sampled (`config.temperature` only
    for rows that recorded none).
    """
    lake = Lake.of(lake)
    base_model = str(base_model)
    adapter = str(adapter) if adapter is not None else None
    output_dir = Path(output_dir)
    # the caller's config stays as given: this run's output folder and temperature go on a copy
    checkpoints = str(output_dir / CHECKPOINTS)
    config = copy.deepcopy(config) if config is not None else TrajlakeGRPOConfig(output_dir=checkpoints)
    config.output_dir = checkpoints
    check_adapter_dir(adapter)
    as_of = shared_snapshot(lake, as_of)  # every rank selects from the same table versions
    stale = 0
    if config.max_staleness is not None:
        sql, stale = bound_staleness(lake, sql, base_model, adapter, config.max_staleness, as_of)
    selection = select_grpo(
        lake,
        sql,
        reward_name=config.reward_name,
        scale_rewards=config.reward_scaling,
        min_group_size=config.min_group_size,
        as_of=as_of,
    )
    if selection.temperature is not None:
        config.temperature = (
            selection.temperature
        )  # the groups' own, not a setting that may have changed since
    examples = [cut_to_max_length(e, config.max_completion_length) for e in selection.examples]
    skipped_equal = 0
    if config.skip_equal_reward_groups:
        examples, skipped_equal = drop_equal_reward_groups(examples, selection.report.equal_reward_groups)
    config, batch_note = fit_batch_to_rows(config, len(examples))
    check_base_model(base_model)  # after the data checks, before the run writes a file
    run_id = on_writer(
        start_run,
        output_dir,
        "grpo",
        config.run_id,
        resume,
        {"base_model": base_model, "adapter": adapter, "sql": sql},
    )

    tokenizer = load_tokenizer(base_model)
    model, peft_config = trainable_policy(base_model, adapter, config, bf16=bool(config.bf16))
    guard = NonFiniteLossGuard()
    report = {
        "groups": selection.report.groups,
        "trajectories": selection.report.trajectories,
        "equal_reward_groups": len(selection.report.equal_reward_groups),
        "dropped_small_groups": len(selection.dropped_small_groups),
        "truncated": sum(e.truncated for e in examples),
        "skipped_equal_reward_trajectories": skipped_equal,
        "stale_trajectories": stale,
        "temperature": config.temperature,
        **batch_note,
    }
    runs = RunsTableCallback(
        lake, run_id, "grpo", extra={"equal_reward_groups": report["equal_reward_groups"]}
    )
    with peft_wrapping():  # the trainer wraps the model in a fresh LoRA adapter (or a ref copy)
        trainer = grpo_trainer_class(config)(
            model=model,
            reward_funcs=stored_reward,
            args=config,
            train_dataset=grpo_dataset(examples),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[runs, guard, ProgressLog("grpo"), *callbacks],
        )
    if config.vllm_importance_sampling_correction and not (resume and last_checkpoint(output_dir)):
        started = time.perf_counter()
        trainer.store_round_start_logprobs()
        report["round_start_logprobs_s"] = round(time.perf_counter() - started, 3)  # not in train_runtime
    parent = parent_record(adapter) if adapter else None
    return train_and_record(
        trainer,
        guard,
        stage="grpo",
        run_id=run_id,
        output_dir=output_dir,
        base_model=base_model,
        config=config,
        lineage=selection.lineage.to_dict(),
        resume=resume,
        report=report,
        parent=parent,
    )
