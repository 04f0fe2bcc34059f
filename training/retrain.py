"""Retraining an adapter without erased data: its recorded stages again, on the current tables.

An adapter's run record keeps, per stage and along the chain of adapters it continued
(oldest first), the stage (`sft`, `grpo`), its selection SQL and its hyperparameters. After
`trajlake forget` the same selections no longer return the erased rows, so running the
same stages again from the base model gives an adapter that never saw them. Stages that
continued a published adapter are retrained too (its weights saw what it saw). The new
adapter is a training run like any other: publish it to replace the marked one.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from store.lake import Lake
from training.errors import TrainingError
from training.registry import resolve_adapter
from training.run import TrainResult, read_run_record


def recorded_stages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The stage records along a run record's parent chain, oldest first."""
    chain = []
    node: dict[str, Any] | None = record
    while isinstance(node, dict):
        if node.get("stage") in ("sft", "grpo"):
            chain.append(node)
        node = node.get("parent")
    return list(reversed(chain))


def stage_config(config_class: type, hyperparameters: dict[str, Any], output_dir: Path) -> Any:
    """`config_class` with the recorded hyperparameters it declares (the others are not settings)."""
    names = {f.name for f in dataclasses.fields(config_class)}
    values = {k: v for k, v in hyperparameters.items() if k in names}
    return config_class(output_dir=str(output_dir), **values)


def retrain(
    lake: Lake | str, ref: str, output_dir: str | os.PathLike[str], *, base_model: str | None = None
) -> TrainResult:
    """Run again the stages adapter `ref` (`name`, `name:version`, `name:alias`) was trained with,
    on the lake's current tables, from the base model; returns the last stage's result."""
    from training.grpo import train_grpo
    from training.grpo_config import TrajlakeGRPOConfig
    from training.sft import train_sft
    from training.sft_config import TrajlakeSFTConfig

    lake = Lake.of(lake)
    row = resolve_adapter(lake, ref)
    record = read_run_record(row["path"]) if Path(str(row["path"])).exists() else None
    stages = recorded_stages(record or {})
    if not stages:
        raise TrainingError(
            f"`{row['name']}:{row['version']}` has no run record of trajlake stages at `{row['path']}`; "
            "nothing to retrain from (train it again with `trajlake train`)"
        )
    base = base_model or row["base_model"]
    out = Path(output_dir)
    adapter: str | None = None
    results: list[TrainResult] = []
    for i, stage in enumerate(stages):
        sql = (stage.get("lineage") or {}).get("sql")
        if not sql:
            raise TrainingError(f"stage {i + 1} (`{stage['stage']}`) of `{ref}` recorded no selection SQL")
        folder = out / f"{i + 1}-{stage['stage']}"
        hyperparameters = stage.get("hyperparameters") or {}
        if stage["stage"] == "sft":
            config = stage_config(TrajlakeSFTConfig, hyperparameters, folder)
            results.append(train_sft(lake, sql, base, folder, config, adapter=adapter))
        else:
            config = stage_config(TrajlakeGRPOConfig, hyperparameters, folder)
            results.append(train_grpo(lake, sql, base, adapter, folder, config))
        adapter = str(results[-1].adapter_dir)
    return results[-1]
