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

A row holds its `PipelineRun` in the typed struct column `runs.pipeline`, a `GateDecision` in
`runs.gate` (their Arrow types: `store.schema.PIPELINE_RUN`, `GATE_DECISION`; times as
timestamps, table versions and counts as maps); this module is the one place those shapes are
written and read (`trajlake migrate` fills them on rows an older trajlake wrote as JSON text).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import pyarrow.types as pat

from store.catalog import connect
from store.errors import LegacyRows
from store.lake import Lake
from store.rows import utc_now
from store.schema import GATE_DECISION, PIPELINE_RUN
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
    # `failures_unlabelled` (no expected: only a reward needing none scores them), `unrated`;
    # `replay_failed`: its rounds' scenarios the sampler failed on (left for the next run)
    learned_from: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why a failed run failed: the step and the exception, in one line

    @property
    def since_time(self) -> datetime | None:
        """Where the run's data begins, as a time (None: everything selected)."""
        return datetime.fromisoformat(self.since) if self.since else None

    def to_row(self) -> dict[str, Any]:
        """Its `runs` row: the record in `pipeline` (no JSON copy in `metrics`)."""
        return {
            "run_id": self.run_id,
            "step": 0,
            "stage": STAGE,
            "pipeline": to_struct(asdict(self), PIPELINE_RUN_FIELDS),
            "at": utc_now(),
        }

    @classmethod
    def from_struct(cls, run_id: str, value: dict[str, Any]) -> PipelineRun:
        """The run a `runs.pipeline` value holds (as Arrow hands it to Python)."""
        return cls(run_id=run_id, **from_struct(value, PIPELINE_RUN_FIELDS))


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
        """Its `runs` row: the record in `gate` (no JSON copy in `metrics`)."""
        return {
            "run_id": self.run_id,
            "step": 0,
            "stage": PUBLISH_STAGE,
            "gate": to_struct(asdict(self), GATE_DECISION_FIELDS),
            "at": utc_now(),
        }


# The struct columns' fields: the record's fields but `run_id` (the row's key), in the column's
# order; a timestamp field is an ISO text in the record and a time in the column.
PIPELINE_RUN_FIELDS = tuple(PIPELINE_RUN)
GATE_DECISION_FIELDS = tuple(GATE_DECISION)


def to_struct(record: dict[str, Any], columns: tuple[Any, ...]) -> dict[str, Any]:
    """A record (`asdict` of a `PipelineRun` or `GateDecision`) as its struct column's value."""
    out: dict[str, Any] = {}
    for column in columns:
        value = record[column.name]
        if value is not None and pat.is_timestamp(column.type):
            value = datetime.fromisoformat(value)
        out[column.name] = value
    return out


def from_struct(value: dict[str, Any], columns: tuple[Any, ...]) -> dict[str, Any]:
    """`to_struct` undone: the record's fields but `run_id`; a map comes back as a dict."""
    out: dict[str, Any] = {}
    for column in columns:
        item = value.get(column.name)
        if isinstance(item, datetime):
            item = item.isoformat()
        elif pat.is_map(column.type):
            item = dict(item or {})
        elif isinstance(item, list) or (item is None and pat.is_list(column.type)):
            item = list(item or [])
        out[column.name] = item
    return out


def record_gate_decision(lake: Lake | str | os.PathLike[str], decision: GateDecision) -> None:
    """Write a gate decision taken outside a pipeline run."""
    write(lake, "runs", [decision.to_row()])


def gate_decisions(
    lake: Lake | str | os.PathLike[str], *, skip_unmigrated: bool = False
) -> list[GateDecision]:
    """Every gate decision taken outside a pipeline run, oldest first (`skip_unmigrated`: as
    `pipeline_runs`)."""
    decisions = [
        GateDecision(run_id=run_id, **from_struct(value, GATE_DECISION_FIELDS))
        for run_id, value in _records_of(lake, PUBLISH_STAGE, "gate", skip_unmigrated)
    ]
    return sorted(decisions, key=lambda d: (d.at, d.run_id))


def _records_of(
    lake: Lake | str | os.PathLike[str], stage: str, column: str, skip_unmigrated: bool
) -> list[tuple[str, dict[str, Any]]]:
    lake = Lake.of(lake)
    if not lake.has_table("runs"):
        return []
    with connect(lake, read_only=True) as con:
        table = con.sql(
            f"SELECT run_id, {column} AS record FROM runs WHERE {equals('stage', stage, table='runs')} ORDER BY run_id"
        ).to_arrow_table()
    rows = table.to_pylist()  # through Arrow: times stay UTC, whatever the connection's time zone
    legacy = sum(1 for row in rows if row["record"] is None)
    if skip_unmigrated:
        return [(row["run_id"], row["record"]) for row in rows if row["record"] is not None]
    if legacy:
        # Reading on without them would take an old lake for a new one (no finished run: train on
        # everything), so an unmigrated lake is refused, never misread.
        raise LegacyRows("runs", column, legacy, f"stage `{stage}`")
    return [(row["run_id"], row["record"]) for row in rows]


def record_pipeline_run(lake: Lake | str | os.PathLike[str], run: PipelineRun) -> None:
    """Write (or rewrite) the run's row: one row per pipeline run, its latest state."""
    write(lake, "runs", [run.to_row()])


def pipeline_runs(lake: Lake | str | os.PathLike[str], *, skip_unmigrated: bool = False) -> list[PipelineRun]:
    """Every recorded pipeline run, oldest first.

    A lake holding runs an older trajlake recorded (in JSON text only) is refused (`LegacyRows`:
    a run that builds on them would take it for a lake without a finished run); with
    `skip_unmigrated`, what a read-only view asks, they are left out instead.
    """
    runs = (
        PipelineRun.from_struct(run_id, value)
        for run_id, value in _records_of(lake, STAGE, "pipeline", skip_unmigrated)
    )
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
