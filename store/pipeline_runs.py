"""Pipeline runs: what each run of the whole loop started from, learned from and decided.

A scheduled pipeline runs night after night on one lake. Each run leaves one row in `runs`
(stage `pipeline`, step 0): written when it starts (`status = "running"`) and rewritten
when it ends (`"finished"`), so a run that died stays visibly unfinished. The next run
reads the newest finished one to know where the new data begins (`data_until`), which
adapter it may start from, and what the gate decided last time; the report lists them as
the lake's nights.

The row's metrics hold a `PipelineRun` as JSON; this module is the one place that shape is
written and read.
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

PipelineStatus = Literal["running", "finished"]
StartFrom = Literal["production", "base"]
STAGE = "pipeline"


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


def record_pipeline_run(lake: Lake | str | os.PathLike[str], run: PipelineRun) -> None:
    """Write (or rewrite) the run's row: one row per pipeline run, its latest state."""
    write(lake, "runs", [run.to_row()])


def pipeline_runs(lake: Lake | str | os.PathLike[str]) -> list[PipelineRun]:
    """Every recorded pipeline run, oldest first."""
    lake = Lake.of(lake)
    if not lake.has_table("runs"):
        return []
    with connect(lake, read_only=True) as con:
        rows = con.execute(
            f"SELECT metrics FROM runs WHERE {equals('stage', STAGE, table='runs')} ORDER BY run_id"
        ).fetchall()
    return sorted((PipelineRun.from_metrics(m) for (m,) in rows), key=lambda r: (r.started_at, r.run_id))


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
