"""What every stage resolves the same way: the lake, the base model, the working folders.

Stages take the sections of the settings they read (`settings.select`, `settings.pipeline`, ...),
never the whole `Settings`, and the lake the flow opened once (`lake_of`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.config.sections import LakeSettings, PipelineSettings
from store.errors import LakeUnusable, SettingError
from store.lake import Lake, open_lake
from training.replay.samplers import SamplerConfig


class StageError(SettingError):
    """A stage cannot run with this configuration or lake state; `field` names the key at fault."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"`{key}`: {detail}", field=key)


def lake_of(settings: LakeSettings) -> Lake:
    """The lake `[lake]` names, checked as every command checks its `--lake` (`store.lake.open_lake`):
    how a flow (or a command running stages) opens its lake, once, for every stage it runs."""
    try:
        return open_lake(settings.path, sql_lake_only=settings.sql_lake_only)
    except LakeUnusable as exc:
        raise StageError("lake.path", str(exc)) from None


def base_model(sampler: SamplerConfig) -> str:
    """The configured base model (`sampler.model`); unset, a `StageError` naming the setting.

    There is no fallback: a pipeline without a base model would train and publish an
    adapter of some stand-in model, which is worse than not running. The demo and the
    tests name their tiny model explicitly.
    """
    model = sampler.model
    if not model:
        raise StageError(
            "sampler.model",
            "no base model is set: name a model folder or hub id in `[sampler] model` of trajlake.toml "
            "(or $TRAJLAKE_SAMPLER__MODEL; for vllm-server, the served base model's name)",
        )
    return str(model)


def loadable_base_model(sampler: SamplerConfig) -> str:
    """`base_model`, checked to load before a run ingests, rewrites or trains anything."""
    from training.errors import TrainingError
    from training.run import check_base_model

    model = base_model(sampler)
    try:
        check_base_model(model)
    except TrainingError as exc:
        raise StageError("sampler.model", str(exc)) from None
    return model


def sampler_for(sampler: SamplerConfig, adapter: str | None) -> Any:
    """The configured sampler on the base model, sampling through `adapter` (None: the base model)."""
    return sampler.build(adapter, model=base_model(sampler))


def work_dir(lake: Lake, pipeline: PipelineSettings, *parts: str) -> Path:
    """Checkpoints and adapters: `pipeline.work_dir`, else `<lake>/_work` (kept out of the tables)."""
    if pipeline.work_dir:
        root = Path(pipeline.work_dir)
    elif lake.is_local:
        root = Path(lake.root) / "_work"
    else:
        raise StageError(
            "pipeline.work_dir", f"the lake `{lake.root}` is remote: set a local folder for checkpoints"
        )
    return root.joinpath(*parts)


def run_dir(lake: Lake, pipeline: PipelineSettings, pipeline_run: str, *parts: str) -> Path:
    """A pipeline run's own folder of checkpoints and adapters: `<work>/<pipeline run id>/...`."""
    if not pipeline_run:
        raise StageError("pipeline_run", "no pipeline run id: a training stage needs its run's folder")
    return work_dir(lake, pipeline, pipeline_run, *parts)
