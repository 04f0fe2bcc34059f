"""One training run on disk, shared by the SFT and GRPO stages.

Folder layout of a run::

    <output_dir>/run.json              run id and inputs (written first; resume reuses the id)
    <output_dir>/checkpoints/checkpoint-<step>/
    <output_dir>/adapter/              adapter_config.json, adapter_model.safetensors, tokenizer,
                                       trajlake_run.json (the run record, written last)

The run record carries what `publish` needs: stages, run ids, lineage, hyperparameters
and metrics, chained through the adapter a run continued from.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from store.rows import new_run_id
from training.chat.templates import chat_template_for, template_identity
from training.distributed import is_writer, wait_for_writer
from training.errors import BadHyperparameter, NonFiniteLoss, TrainingError
from training.models.adapters import RUN_RECORD
from training.models.known import resolve_model
from training.models.policies import adapter_label

CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
RUN_STATE = "run.json"


# --- the run folder ---------------------------------------------------------------------------------


def last_checkpoint(output_dir: str | os.PathLike[str]) -> str | None:
    """The newest `checkpoint-<step>` folder under `<output_dir>/checkpoints`, if any."""
    folder = Path(output_dir) / CHECKPOINTS
    if not folder.is_dir():
        return None
    steps = []
    for child in folder.iterdir():
        name, _, step = child.name.partition("-")
        # A run killed while saving leaves a folder without trainer_state.json (saved last): skip it.
        if name == "checkpoint" and step.isdigit() and (child / "trainer_state.json").exists():
            steps.append((int(step), child))
    return str(max(steps)[1]) if steps else None


def start_run(
    output_dir: str | os.PathLike[str], stage: str, run_id: str | None, resume: bool, inputs: dict[str, Any]
) -> str:
    """Create (or, on resume, reopen) the run folder and return the run id.

    Resuming reuses the recorded run id so the `runs` table continues the same run;
    starting fresh in a folder that already holds checkpoints is refused, because mixing
    two runs' checkpoints would make "resume" resume the wrong one.
    """
    folder = Path(output_dir)
    state_path = folder / RUN_STATE
    if resume and state_path.exists():
        return str(json.loads(state_path.read_text())["run_id"])
    if not resume and last_checkpoint(folder) is not None:
        raise TrainingError(
            f"`{folder}` already holds checkpoints of an earlier run; pass `resume=True` (`--resume`) "
            "to continue it, or choose a new output folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    run_id = run_id or new_run_id(stage)
    state_path.write_text(json.dumps({"run_id": run_id, "stage": stage, **inputs}, indent=2, default=str))
    return run_id


def check_base_model(base_model: str) -> None:
    """Refuse a base model that cannot be loaded, before a run writes anything: one line naming it
    (transformers' own error is a page of traceback, after the run folder exists)."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(resolve_model(base_model))
    except (OSError, ValueError) as exc:
        if isinstance(exc, TrainingError):
            raise
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadHyperparameter(
            f"base model `{base_model}` cannot be loaded ({reason[:200]}); name a model folder holding "
            "config.json and its weights, a hub id in the local cache, or a name `trajlake model list` knows",
            field="base_model",
            value=base_model,
        ) from None


def load_tokenizer(base_model: str) -> Any:
    """The base model's tokenizer (a known model name is its fetched folder, `training.models.known`), with
    a pad token and the chat template every use renders with (`chat_template_for`): the trainers
    save it beside the adapter, so the adapter travels with the template it was trained on."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(base_model))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.chat_template:
        tokenizer.chat_template = chat_template_for(tokenizer)
    return tokenizer


def save_adapter(model: Any, tokenizer: Any, adapter_dir: Path) -> None:
    """Save only the trained adapter (never a `ref` copy TRL may hold) plus the tokenizer."""
    adapter_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(adapter_dir), selected_adapters=["default"])
    tokenizer.save_pretrained(str(adapter_dir))


def raise_non_finite(guard: Any, output_dir: str | os.PathLike[str]) -> None:
    if guard.tripped_at is None:
        return
    kept = last_checkpoint(output_dir)
    raise NonFiniteLoss(
        f"the loss became non-finite at step {guard.tripped_at} ({guard.evidence}); the run stopped and "
        f"the last good checkpoint is `{kept or 'none (it failed before the first checkpoint)'}`. "
        "Lower the learning rate or check the data, then rerun with `--resume` from that checkpoint",
        step=guard.tripped_at,
        last_checkpoint=kept,
    )


# --- the record a training run leaves next to its adapter -------------------------------------


@dataclass
class TrainResult:
    """What a training stage produced: the adapter folder and everything the publisher needs."""

    stage: str
    run_id: str
    adapter_dir: str
    base_model: str
    global_step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    lineage: dict[str, Any] = field(default_factory=dict)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    parent: dict[str, Any] | None = None  # the record of the adapter this run continued from
    report: dict[str, Any] = field(default_factory=dict)  # stage-specific: groups, packing, ...

    @property
    def stages(self) -> list[str]:
        return [*(self.parent or {}).get("stages", []), self.stage]

    @property
    def run_ids(self) -> list[str]:
        return [*(self.parent or {}).get("run_ids", []), self.run_id]

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["stages"] = self.stages
        record["run_ids"] = self.run_ids
        record["lineage_chain"] = [
            *(self.parent or {}).get("lineage_chain", []),
            {"stage": self.stage, **self.lineage},
        ]
        return record


def write_run_record(result: TrainResult) -> Path:
    """Write `trajlake_run.json` into the adapter folder, last: its presence marks the adapter complete."""
    path = Path(result.adapter_dir) / RUN_RECORD
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_record(), indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)
    return path


def read_run_record(adapter_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The run record of an adapter folder trained by trajlake, or None for a foreign adapter."""
    path = Path(adapter_dir) / RUN_RECORD
    if not path.exists():
        return None
    return json.loads(path.read_text())


def parent_record(adapter: str | os.PathLike[str]) -> dict[str, Any]:
    """What a run continuing from `adapter` keeps as its `parent`: the adapter's run record, or for
    an adapter trajlake did not train, its folder and name (`training.models.policies.adapter_label`), so
    the staleness bound still names it once the folder has moved."""
    record = read_run_record(adapter)
    if record is not None:
        return record
    return {
        "adapter_dir": str(adapter),
        "stages": ["external"],
        "run_ids": [],
        "name": adapter_label(str(adapter)),
    }


# Hyperparameters worth recording in the manifest (the full config stays in the checkpoints).
RECORDED = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "seed",
    "max_length",
    "packing",
    "loss_type",
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "temperature",
    "importance_sampling_level",
    "num_iterations",
    "mask_truncated_completions",
    "reward_name",
)


def hyperparameters(config: Any) -> dict[str, Any]:
    """The recorded subset of a stage config, plus its LoRA shape."""
    values = {name: getattr(config, name) for name in RECORDED if hasattr(config, name)}
    values.update(config.lora_hyperparameters())
    return {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()}


def train_and_record(
    trainer: Any,
    guard: Any,
    *,
    stage: str,
    run_id: str,
    output_dir: Path,
    base_model: str,
    config: Any,
    lineage: dict[str, Any],
    resume: bool,
    report: dict[str, Any],
    parent: dict[str, Any] | None = None,
) -> TrainResult:
    """Train (from the newest checkpoint when resuming), stop on a non-finite loss, save the
    adapter, then write the run record beside it, last."""
    # The trainers' side of this module: `read_run_record` (publish, the CLI) needs no transformers.
    from training.metrics import without_raw_log_lines

    checkpoint = last_checkpoint(output_dir) if resume else None
    without_raw_log_lines(trainer)
    output = trainer.train(resume_from_checkpoint=checkpoint)
    raise_non_finite(guard, output_dir)
    adapter_dir = output_dir / ADAPTER
    if is_writer():  # several processes: rank 0 writes, the others wait for it below
        save_adapter(trainer.model, trainer.processing_class, adapter_dir)
    result = TrainResult(
        stage=stage,
        run_id=run_id,
        adapter_dir=str(adapter_dir),
        base_model=base_model,
        global_step=int(trainer.state.global_step),
        metrics=dict(output.metrics),
        # the chat template it was trained with (saved beside it): part of what the adapter is
        lineage={**lineage, "chat_template": template_identity(trainer.processing_class.chat_template)},
        hyperparameters=hyperparameters(config),
        parent=parent,
        report={**report, "resumed_from": checkpoint},
    )
    if is_writer():
        write_run_record(result)
    wait_for_writer()
    return result


def check_adapter_dir(adapter: str | None) -> None:
    """Refuse an adapter folder that would only fail after the model is loaded."""
    if adapter is not None and not (Path(adapter) / "adapter_config.json").exists():
        raise BadHyperparameter(
            f"`{adapter}` is not a PEFT adapter folder (no adapter_config.json); pass the `adapter/` folder of "
            "an SFT run, or omit it to start a fresh adapter",
            field="adapter",
            value=adapter,
        )
