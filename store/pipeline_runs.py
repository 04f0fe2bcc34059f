"""Pipeline runs: what each run of the whole loop started from, learned from and decided.

A scheduled pipeline runs night after night on one lake. Each run leaves one row in `runs`
(stage `pipeline`, step 0): written when it starts (`status = "running"`) and rewritten
when it ends: `"finished"`, or `"failed"` with the reason (`error`) when a step raised. A run
whose process died before it could say so stays `"running"`; once a later run has started,
the report calls it "did not finish". The next run
reads the newest finished one to know where the new data begins (`data_until`), which
adapter it may start from, and what the gate decided last time; the report lists them as
the lake's nights.

A gate decision taken outside a pipeline run (`trajlake publish` with its gate) leaves a
`GateDecision` row (stage `publish`), so every decision about production is in `runs` and
in the report's pipeline runs, whoever took it.

The rows' metrics hold a `PipelineRun` or a `GateDecision` as JSON; this module is the one
place those shapes are written and read.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from store.catalog import connect
from store.lake import Lake
from store.rows import utc_now
from store.vocabulary import equals
from store.writer import write

PipelineStatus = Literal["running", "finished", "failed"]
StartFrom = Literal["production", "base"]
STAGE = "pipeline"
PUBLISH_STAGE = "publish"


@dataclass
class PipelineRun:
    """One run of the pipeline, as recorded in `runs` (stage `pipeline`)."""

    run_id: str  # `pipeline-<flow run id>`: a retried flow run keeps it, and its work folder
    started_at: str  # ISO time, UTC
    status: PipelineStatus = "running"
    flow_run_id: str | None = None
    start_from: StartFrom = "production"
    # the adapter the run continued ("name:vN" and its folder); None: the base model
    start_adapter: str | None = None
    start_adapter_path: str | None = None
    sft: bool = False  # whether the run trained an SFT stage
    # what the run learned from: rows new since `since` (None: everything selected)
    since: str | None = None
    # where "new" begins: the previous finished run's `data_until` (None: the first run). A run
    # trains only when its replay selection holds a scenario made since then, whatever its window
    new_since: str | None = None
    data_until: str | None = None  # ISO time after its scenarios were made: the next run's "new"
    previous_run: str | None = None
    table_versions: dict[str, int] = field(default_factory=dict)  # the lake when the run started
    finished_at: str | None = None
    training_runs: list[str] = field(default_factory=list)  # run ids of its SFT/GRPO stages
    training_steps: int = 0  # optimiser steps those runs took in this pipeline run
    adapter: str | None = None  # the trained candidate's folder
    published: str | None = None  # "name:vN"
    promoted: bool | None = None
    decision: str | None = None  # the gate's decision in words, with its numbers
    eval_run_id: str | None = None
    # the train scenarios its replay selection held, by what production said of them: `scenarios`,
    # `rated_right`, `failures` (rated wrong), `failures_labelled` (their expected from a label),
    # `failures_unlabelled` (no expected: only a reward needing none scores them), `unrated`
    learned_from: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why a failed run failed: the step and the exception, in one line

    @property
    def since_time(self) -> datetime | None:
        """Where the run's data begins, as a time (None: everything selected)."""
        return datetime.fromisoformat(self.since) if self.since else None

    def to_row(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step": 0,
            "stage": STAGE,
            "metrics": json.dumps(asdict(self), sort_keys=True),
            "at": utc_now(),
        }

    @classmethod
    def from_metrics(cls, metrics: str) -> PipelineRun:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in json.loads(metrics).items() if k in known})


@dataclass
class GateDecision:
    """A publish gate's decision taken outside a pipeline run (`trajlake publish`), as recorded in
    `runs` (stage `publish`): the candidate, what the gate said, and what was published."""

    run_id: str  # `publish-<uuid>`
    at: str  # ISO time, UTC
    candidate: str  # the adapter folder the gate judged
    decision: str  # the gate's decision in words, with its numbers
    promoted: bool
    published: str | None = None  # "name:vN"; None: nothing was published
    eval_run_id: str | None = None
    command: str = "trajlake publish"

    def to_row(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "step": 0,
            "stage": PUBLISH_STAGE,
            "metrics": json.dumps(asdict(self), sort_keys=True),
            "at": utc_now(),
        }


def record_gate_decision(lake: Lake | str | os.PathLike[str], decision: GateDecision) -> None:
    """Write a gate decision taken outside a pipeline run."""
    write(lake, "runs", [decision.to_row()])


def gate_decisions(lake: Lake | str | os.PathLike[str]) -> list[GateDecision]:
    """Every gate decision taken outside a pipeline run, oldest first."""
    known = {f.name for f in fields(GateDecision)}
    decisions = [
        GateDecision(**{k: v for k, v in json.loads(m).items() if k in known})
        for m in _metrics_of(lake, PUBLISH_STAGE)
    ]
    return sorted(decisions, key=lambda d: (d.at, d.run_id))


def _metrics_of(lake: Lake | str | os.PathLike[str], stage: str) -> list[str]:
    lake = Lake.of(lake)
    if not lake.has_table("runs"):
        return []
    with connect(lake, read_only=True) as con:
        rows = con.execute(
            f"SELECT metrics FROM runs WHERE {equals('stage', stage, table='runs')} ORDER BY run_id"
        ).fetchall()
    return [m for (m,) in rows]


def record_pipeline_run(lake: Lake | str | os.PathLike[str], run: PipelineRun) -> None:
    """Write (or rewrite) the run's row: one row per pipeline run, its latest state."""
    write(lake, "runs", [run.to_row()])


def pipeline_runs(lake: Lake | str | os.PathLike[str]) -> list[PipelineRun]:
    """Every recorded pipeline run, oldest first."""
    runs = (PipelineRun.from_metrics(m) for m in _metrics_of(lake, STAGE))
    return sorted(runs, key=lambda r: (r.started_at, r.run_id))


def last_finished_run(lake: Lake | str | os.PathLike[str]) -> PipelineRun | None:
    """The newest finished pipeline run, if any."""
    finished = [r for r in pipeline_runs(lake) if r.status == "finished"]
    return finished[-1] if finished else None


def learning_since(previous: PipelineRun | None, window_days: float) -> datetime | None:
    """Where a run's data begins: what the previous finished run had not seen, plus `window_days`
    before it; None (everything) for the first run or a negative window.

    >>> run = PipelineRun("pipeline-1", "2026-11-26T03:00:00+00:00", data_until="2026-11-26T03:01:00+00:00")
    >>> learning_since(run, 1.0).isoformat()
    '2026-11-25T03:01:00+00:00'
    """
    if previous is None or previous.data_until is None or window_days < 0:
        return None
    return datetime.fromisoformat(previous.data_until) - timedelta(days=window_days)
