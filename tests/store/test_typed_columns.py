"""Values other packages read back live in typed columns, not JSON text (issue 57): a replayed
trajectory's `replay_run`, `scenario_split` and `sampling`; a `runs` row's `scalars` and `tags`; a pipeline
run's `pipeline` and a gate decision's `gate` records, written there only. A lake an older trajlake
wrote (those values in JSON only) is refused by what builds on them, never misread, and reads the
same after `trajlake migrate`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from store.catalog.connection import connect
from store.errors import LegacyRows
from store.migrate import check_migrated, migrate
from store.pipeline_runs import (
    GATE_DECISION_FIELDS,
    PIPELINE_RUN_FIELDS,
    GateDecision,
    PipelineRun,
    gate_decisions,
    pipeline_runs,
    record_gate_decision,
    record_pipeline_run,
)
from store.rows import runs_row
from store.sampling import SamplingRecord
from store.schema import GATE_DECISION, PARTITION_COLUMN, PIPELINE_RUN, SAMPLING, WRITTEN_AT, table_spec
from store.writer import write
from tests.training.helpers import make_trajectory

NEW_COLUMNS = {
    "trajectories": {"replay_run", "scenario_split", "sampling"},
    "runs": {"scalars", "tags", "pipeline", "gate"},
}
AT = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)

RUN = PipelineRun(
    "pipeline-1",
    "2026-11-20T03:00:00+00:00",
    status="finished",
    flow_run_id="f-1",
    sft=True,
    data_until="2026-11-20T03:05:00.250000+00:00",
    table_versions={"trajectories": 7, "scenarios": 2},
    finished_at="2026-11-20T03:30:00+00:00",
    training_runs=["sft-1", "grpo-1"],
    training_steps=12,
    published="calc:v2",
    promoted=True,
    learned_from={"scenarios": 40, "failures": 3},
)
GATE = GateDecision(
    "publish-1", "2026-11-21T09:00:00+00:00", "adapters/c", "kept: +0.10 [+0.02, +0.18]", True, "calc:v3"
)


def old_layout(lake: Path, table: str, rows: list[dict[str, Any]]) -> None:
    """`rows` committed with delta-rs alone, in the table's schema as an older trajlake had it
    (none of the typed columns), the way that release's writer laid the table out."""
    spec = table_spec(table)
    schema = pa.schema([f for f in spec.schema if f.name not in NEW_COLUMNS[table]])
    full = [{**{name: None for name in schema.names}, **row, WRITTEN_AT: AT} for row in rows]
    if spec.partitioned:
        for row in full:
            row[PARTITION_COLUMN] = row[spec.partition_from].date()
    write_deltalake(
        str(lake / table),
        pa.Table.from_pylist(full, schema=schema),
        partition_by=[PARTITION_COLUMN] if spec.partitioned else None,
        mode="append",
    )


def old_replayed(trajectory_id: str, temperature: float) -> dict[str, Any]:
    """A replayed trajectory as the previous replay stage wrote it: all it recorded in `metadata`."""
    sampling = {"max_tokens": 64, "temperature": temperature, "top_p": 0.9, "top_k": 0, "seed": 3}
    row = make_trajectory(trajectory_id, source="replay", group_id="g-1", scenario_id="s-1", started_at=AT)
    row["metadata"] = json.dumps(
        {"run": "round-1", "index": 0, "sampling": {**sampling, "stop_token_ids": [2]}, "split": "train"}
    )
    return row


@pytest.fixture
def old_lake(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    old_layout(lake, "trajectories", [old_replayed("t-1", 0.8), make_trajectory("t-2", started_at=AT)])
    old_layout(
        lake,
        "runs",
        [
            # the old `runs_row`: non-finite floats as strings
            {"run_id": "grpo-1", "step": 1, "stage": "grpo", "at": AT,
             "metrics": json.dumps({"loss": 0.25, "grad_norm": "nan", "kl": "inf"})},
            {"run_id": "eval-1", "step": 2, "stage": "eval", "at": AT,
             "metrics": json.dumps({"role": "table", "stage": "sft", "mean_reward": 0.7, "n": 32})},
            {"run_id": RUN.run_id, "step": 0, "stage": "pipeline", "at": AT,
             "metrics": json.dumps(dataclasses.asdict(RUN))},
            {"run_id": GATE.run_id, "step": 0, "stage": "publish", "at": AT,
             "metrics": json.dumps(dataclasses.asdict(GATE))},
        ],
    )  # fmt: skip
    return lake


def test_a_lake_of_the_old_layout_is_refused_then_reads_the_same_after_migrate(old_lake: Path) -> None:
    with pytest.raises(LegacyRows) as refused:
        pipeline_runs(old_lake)
    assert (refused.value.table, refused.value.column, refused.value.rows) == ("runs", "pipeline", 1)
    assert "trajlake migrate" in str(refused.value)
    with connect(old_lake) as con, pytest.raises(LegacyRows) as info:
        check_migrated(con, "trajectories")
    assert info.value.rows == 1  # the replayed row; production traffic has no sampling to fill

    outcome = {m.table: m for m in migrate(old_lake)}
    assert outcome["trajectories"].typed_rows == 1 and outcome["runs"].typed_rows == 4

    assert pipeline_runs(old_lake) == [RUN]  # every field, times, maps and lists included
    assert gate_decisions(old_lake) == [GATE]
    with connect(old_lake) as con:
        check_migrated(con, "trajectories")
        check_migrated(con, "runs")
        replayed = con.execute(
            "SELECT replay_run, scenario_split, sampling, json_extract_string(metadata, '$.index'), dt "
            "FROM trajectories WHERE trajectory_id = 't-1'"
        ).fetchone()
        assert replayed == (
            "round-1",
            "train",
            {
                "temperature": 0.8,
                "top_p": 0.9,
                "top_k": 0,
                "max_tokens": 64,
                "seed": 3,
                "stop_token_ids": [2],
            },
            "0",  # the JSON copy stays as it was
            date(2026, 11, 20),  # and the row in its partition
        )
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (2,)  # no row doubled
        production = con.execute("SELECT sampling, replay_run FROM trajectories WHERE trajectory_id = 't-2'")
        assert production.fetchone() == (None, None)
        loss, grad_norm, kl = con.execute(
            "SELECT scalars['loss'], scalars['grad_norm'], scalars['kl'] FROM runs WHERE run_id = 'grpo-1'"
        ).fetchone()
        assert loss == 0.25 and math.isnan(grad_norm) and kl == math.inf  # numbers again, not text
        evaluation = con.execute("SELECT tags['role'], scalars['n'] FROM runs WHERE run_id = 'eval-1'")
        assert evaluation.fetchone() == ("table", 32.0)

    again = {m.table: m for m in migrate(old_lake)}
    assert again["trajectories"].typed_rows == 0 and again["runs"].typed_rows == 0


def test_records_written_now_read_back_from_their_typed_columns(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    record_pipeline_run(lake, RUN)
    record_gate_decision(lake, GATE)
    write(lake, "runs", [runs_row("grpo-1", 1, "grpo", {"loss": math.nan, "role": "x"})])
    assert pipeline_runs(lake) == [RUN] and gate_decisions(lake) == [GATE]
    with connect(lake) as con:
        typed = con.sql(
            "SELECT pipeline.data_until, pipeline.table_versions['trajectories'], pipeline.learned_from "
            "FROM runs WHERE stage = 'pipeline'"
        ).to_arrow_table()
        assert pa.types.is_timestamp(typed.column(0).type)  # a time, not ISO text
        row = typed.to_pylist()[0]
        assert list(row.values())[1:] == [7, [("scenarios", 40), ("failures", 3)]]
        (loss,) = con.execute("SELECT scalars['loss'] FROM runs WHERE run_id = 'grpo-1'").fetchone()
        assert math.isnan(loss)
        # the values live in their columns only: no JSON copy beside them
        copies = con.execute("SELECT run_id, metrics FROM runs ORDER BY run_id").fetchall()
        assert copies == [("grpo-1", None), ("pipeline-1", None), ("publish-1", None)]


def test_each_record_is_its_struct_field_for_field() -> None:
    def without_run_id(cls: type) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.name != "run_id"]

    assert [f.name for f in PIPELINE_RUN] == without_run_id(PipelineRun)
    assert [f.name for f in PIPELINE_RUN_FIELDS] == without_run_id(PipelineRun)
    assert [f.name for f in GATE_DECISION] == without_run_id(GateDecision)
    assert [f.name for f in GATE_DECISION_FIELDS] == without_run_id(GateDecision)
    assert {f.name for f in SAMPLING} == {f.name for f in dataclasses.fields(SamplingRecord)}
