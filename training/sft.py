"""SFT stage: fine-tune a LoRA adapter on good conversations from the lake with TRL's `SFTTrainer`.

The shape follows `trl/scripts/sft.py`: select rows (I/O), build the dataset, hand it to
`SFTTrainer` with a PEFT `LoraConfig`, save. trajlake adds three things around it:

1. Tokenisation the way replay builds a conversation (`ChatRenderer.conversation_ids`, with
   the one chat template replay and serving use), tools rendered from the stored JSON and
   tool-call arguments as objects, so the loss covers exactly the tokens a policy samples
   (`assistant_masks`). Rows go to TRL pre-tokenised; packing, truncation and labels stay TRL's.
2. Bookkeeping: a `runs` row per logged step, a non-finite loss guard, checkpoints under
   `<output_dir>/checkpoints` and resume from the newest one (`training.run`).
3. A run record (`trajlake_run.json`, written last) beside the adapter in
   `<output_dir>/adapter`, carrying lineage and hyperparameters for `publish`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from store.lake import Lake
from training.chat.render import ChatRenderer
from training.datasets import SFTSelection, select_sft
from training.distributed import on_writer, shared_snapshot
from training.errors import TrainingError
from training.lora import trainable_policy
from training.metrics import NonFiniteLossGuard, ProgressLog, RunsTableCallback
from training.models.adapters import peft_wrapping
from training.run import (
    CHECKPOINTS,
    TrainResult,
    check_adapter_dir,
    check_base_model,
    load_tokenizer,
    parent_record,
    start_run,
    train_and_record,
)
from training.sft_config import TrajlakeSFTConfig
from training.sft_trainer import TreePackedSFTTrainer

# --- dataset ------------------------------------------------------------------------------------


def tokenize_conversations(rows: Sequence[dict[str, Any]], tokenizer: Any) -> dict[str, list[list[int]]]:
    """Token ids and assistant masks of each conversation (1 = a token a policy samples, trained on).

    The ids are what a replay of the conversation would hold and the mask is exactly the
    sampled tokens (each assistant turn through its EOS; `ChatRenderer.conversation_ids`),
    rendered with the one template every use shares (`chat_template_for`). Rows without a
    single assistant token are an error naming the trajectory.
    """
    renderer = ChatRenderer(tokenizer)
    input_ids: list[list[int]] = []
    masks: list[list[int]] = []
    for row in rows:
        ids, mask = renderer.conversation_ids(row["messages"], row.get("tools"))
        if 1 not in mask:
            raise TrainingError(
                f"trajectory `{row.get('trajectory_id')}` has no assistant tokens after templating; "
                "check that its assistant messages have content or tool calls"
            )
        input_ids.append(ids)
        masks.append(mask)
    return {"input_ids": input_ids, "assistant_masks": masks}


def sft_dataset(selection: SFTSelection, tokenizer: Any) -> Any:
    """A `datasets.Dataset` of pre-tokenised conversations TRL's `SFTTrainer` takes as is."""
    from datasets import Dataset

    return Dataset.from_dict(tokenize_conversations(selection.rows, tokenizer))


def packing_efficiency(dataset: Any, max_length: int) -> float:
    """Bin fill of a packed dataset: real tokens / (packed rows x `max_length`).

    This is the share of real tokens if every packed row were padded to `max_length`. With
    TRL's default `bfd` packing the collator is padding-free (a batch is one flattened
    sequence with position ids), so no pad token is processed at all and real / processed
    tokens is 1.0; bin fill still tells how well conversations fill the rows.
    """
    lengths = [len(ids) for ids in dataset["input_ids"]]
    if not lengths:
        return 0.0
    return sum(lengths) / (len(lengths) * max(max_length, max(lengths)))


# --- the stage ----------------------------------------------------------------------------------


def train_sft(
    lake: Lake | str,
    sql: str,
    base_model: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    config: TrajlakeSFTConfig | None = None,
    *,
    adapter: str | os.PathLike[str] | None = None,
    resume: bool = False,
    as_of: Mapping[str, int] | None = None,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Fine-tune a LoRA adapter on the conversations `sql` selects; returns where it went.

    The selection and configuration are checked before any model is loaded. Each logged
    step is a row of the `runs` table (stage `sft`). `adapter`: an adapter folder to continue
    (its run record becomes this run's parent), instead of a fresh LoRA on `base_model`.
    With `resume=True` training continues
    from the newest checkpoint under `<output_dir>/checkpoints`. `as_of` reads the lake at
    the table versions of an earlier lineage (`training.lineage.as_of_versions`).
    """
    lake = Lake.of(lake)
    base_model = str(base_model)
    output_dir = Path(output_dir)
    # the config first: under torchrun / accelerate launch, making it joins the process group
    # the caller's config stays as given: this run's output folder goes on a copy
    checkpoints = str(output_dir / CHECKPOINTS)
    config = copy.deepcopy(config) if config is not None else TrajlakeSFTConfig(output_dir=checkpoints)
    config.output_dir = checkpoints
    adapter = str(adapter) if adapter is not None else None
    check_adapter_dir(adapter)
    selection = select_sft(lake, sql, as_of=shared_snapshot(lake, as_of))
    check_base_model(base_model)  # after the data checks, before the run writes a file
    run_id = on_writer(
        start_run,
        output_dir,
        "sft",
        config.run_id,
        resume,
        {"base_model": base_model, "adapter": adapter, "sql": sql},
    )

    tokenizer = load_tokenizer(base_model)
    dataset = sft_dataset(selection, tokenizer)
    guard = NonFiniteLossGuard()
    runs = RunsTableCallback(lake, run_id, "sft")
    model, peft_config = trainable_policy(base_model, adapter, config, bf16=bool(config.bf16))
    with peft_wrapping():  # the trainer wraps the model in a fresh LoRA adapter (or trains `adapter`)
        trainer = TreePackedSFTTrainer(
            model=model,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[runs, guard, ProgressLog("sft"), *callbacks],
        )
    max_length = config.max_length or 1024
    report = {
        "conversations": len(selection.rows),
        "packed_rows": len(trainer.train_dataset),  # type: ignore[arg-type]  # SFTTrainer made a Dataset
        "packing_bin_fill": packing_efficiency(trainer.train_dataset, max_length) if config.packing else None,
        "padding_free": bool(getattr(trainer, "padding_free", False)),
    }
    return train_and_record(
        trainer,
        guard,
        stage="sft",
        run_id=run_id,
        output_dir=output_dir,
        base_model=base_model,
        config=config,
        lineage=selection.lineage.to_dict(),
        resume=resume,
        report=report,
        parent=parent_record(adapter) if adapter else None,
    )
