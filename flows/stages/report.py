"""The report stage: the lake's HTML report after a pipeline run (`flows.report`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flows.config.sections import PipelineSettings, ScoreSettings
from flows.stages.common import base_model, work_dir
from flows.stages.score import training_reward
from store.lake import Lake
from training.replay.samplers import SamplerConfig


@dataclass(frozen=True)
class PipelineReport:
    """Where the report went and how much of the lake it shows."""

    path: str
    rounds: int
    groups_shown: int  # in the group viewer
    groups: int  # scored replayed groups in the viewer's window


def write_pipeline_report(
    lake: Lake, *, sampler: SamplerConfig, pipeline: PipelineSettings, score: ScoreSettings
) -> PipelineReport:
    """Write `<work dir>/report.html` for the lake: the run's rounds, evaluation, lineage and groups
    (the groups' rewards: the one training reads; their tokens decoded with the base model's tokenizer)."""
    from flows.report import build_report

    model = base_model(sampler)
    path, data = build_report(
        str(lake.root),
        str(work_dir(lake, pipeline, "report.html")),
        reward=training_reward(score),
        tokenizer=model if Path(model).is_dir() else None,  # a hub id is not fetched for a report
        title="trajlake pipeline report",
    )
    return PipelineReport(
        path=str(path),
        rounds=len(data.rounds),
        groups_shown=len(data.groups.groups) if data.groups else 0,
        groups=data.groups.total if data.groups else 0,
    )
