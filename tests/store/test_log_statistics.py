"""The Delta log keeps no free text: file statistics (min/max) only on ids, timestamps and numbers.

Delta's `add` actions carry each file's per-column min/max values, and the lake never
cleans its log up (lineage re-reads old versions): statistics of a text column would keep
a copy of whatever redaction missed long after its data files were vacuumed. Every write
path that adds files is checked (append, MERGE, OPTIMIZE with Z-order, a checkpoint), and
every file under `_delta_log/` is read back, checkpoints decoded.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from store import writer
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.schema import ID_COLUMNS, PARTITION_COLUMN, TABLES, TableSpec
from store.vocabulary import VOCABULARIES
from store.writer import STATS_PROPERTY, open_table, stats_columns, write

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
MARKER = "LOGLEAK-" + "c4nary"  # what redaction would have missed


def delta_log_text(lake: Lake, table: str) -> dict[str, str]:
    """file name -> everything readable in it, for every file under the table's `_delta_log/`:
    JSON commits as text, Parquet checkpoints as their raw bytes and their decoded strings."""
    out = {}
    for path in sorted((Path(lake.table_uri(table)) / "_delta_log").rglob("*")):
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":  # compressed: its raw bytes would hide a marker
            text += "\n" + repr(pq.read_table(path).to_pylist())
        out[path.name] = text
    return out


def _value(spec: TableSpec, field: pa.Field, i: int) -> Any:
    kind = field.type
    if pa.types.is_string(kind):
        vocabulary = VOCABULARIES.get(spec.name, {}).get(field.name)
        if vocabulary:  # a code column holds one of its declared values (the writer refuses others)
            return vocabulary[i % len(vocabulary)]
        return f"id-{i}" if field.name in ID_COLUMNS else f"{MARKER} {field.name} {i}"
    if pa.types.is_timestamp(kind):
        return T0 + timedelta(seconds=i)
    if pa.types.is_integer(kind):
        return i
    if pa.types.is_floating(kind):
        return 0.5
    if pa.types.is_boolean(kind):
        return True
    if pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
        return [MARKER]
    if field.name == "messages":
        call = {"id": "c1", "name": MARKER, "arguments": f'{{"q": "{MARKER}"}}'}
        return [{"role": "user", "content": MARKER, "name": MARKER, "tool_calls": [call]}]
    return None  # other nested columns (token turns) hold no text


def rows(spec: TableSpec, keys: range) -> list[dict[str, Any]]:
    """Rows with every text column holding MARKER (ids and enum codes hold plain ids)."""
    return [
        {f.name: _value(spec, f, i) for f in spec.schema if f.name not in (PARTITION_COLUMN, "_written_at")}
        for i in keys
    ]


def test_every_table_keeps_statistics_for_ids_and_times_only() -> None:
    for spec in TABLES.values():
        columns = stats_columns(spec)
        for name in columns:
            kind = spec.schema.field(name).type
            assert name in ID_COLUMNS or not pa.types.is_string(kind), (spec.name, name)
        assert "_written_at" in columns  # what a MERGE narrows its files by (`store.keys`)
    assert {"trace_id", "span_id", "received_at", "start_time"} <= set(stats_columns(TABLES["spans"]))
    assert "trajectory_id" in stats_columns(TABLES["trajectories"])


def test_no_text_value_reaches_the_delta_log_through_any_write_path(lake: Lake) -> None:
    for spec in TABLES.values():
        write(lake, spec.name, rows(spec, range(3)))  # an append
        write(lake, spec.name, rows(spec, range(2, 5)))  # a MERGE (keys 2 is held)
    compacted = compact(lake, CompactConfig(retention_hours=0))  # OPTIMIZE + Z-order
    assert sum(c.files_added for c in compacted) > 0
    for spec in TABLES.values():
        delta = DeltaTable(lake.table_uri(spec.name))
        delta.create_checkpoint()
        assert delta.to_pyarrow_table().num_rows == 5
        # The data files do hold the marker (so the check below is not vacuous)...
        assert any(MARKER in str(v) for v in delta.to_pyarrow_table().to_pylist())
        # ... and the log does not, in any commit or checkpoint.
        leaked = [name for name, text in delta_log_text(lake, spec.name).items() if MARKER in text]
        assert leaked == [], (spec.name, leaked)
        # The statistics pruning needs are still there.
        actions = pa.table(delta.get_add_actions(flatten=True))
        assert actions.column("min._written_at").null_count == 0
        assert not [c for c in actions.column_names if c.startswith("min.") and MARKER in str(actions[c])]
    spans = pa.table(DeltaTable(lake.table_uri("spans")).get_add_actions(flatten=True))
    assert {"min.trace_id", "max.received_at"} <= set(spans.column_names)
    assert "min.attributes" not in spans.column_names and "min.name" not in spans.column_names


def test_a_table_created_with_statistics_on_text_columns_stops_recording_them(lake: Lake) -> None:
    # A lake written before this change: every scalar column had statistics.
    spec = TABLES["spans"]
    scalar = [f.name for f in spec.schema if not pa.types.is_nested(f.type) and f.name != PARTITION_COLUMN]
    DeltaTable.create(
        lake.table_uri("spans"),
        spec.schema,
        partition_by=[PARTITION_COLUMN],
        configuration={STATS_PROPERTY: ",".join(scalar)},
    )
    before = set(delta_log_text(lake, "spans"))
    write(lake, "spans", rows(spec, range(2)))
    table = open_table(lake, spec)
    assert table.metadata().configuration[STATS_PROPERTY] == ",".join(stats_columns(spec))
    new = {name: text for name, text in delta_log_text(lake, "spans").items() if name not in before}
    assert new and not [name for name, text in new.items() if MARKER in text]


def test_text_columns_have_no_parquet_statistics_for_delta_to_copy(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two guards: were the table property ever to name every column again, the Parquet
    # files still carry no statistics on text columns, and delta-rs has nothing to copy.
    spec = TABLES["trajectories"]
    every = [f.name for f in spec.schema if not pa.types.is_nested(f.type) and f.name != PARTITION_COLUMN]
    configuration = writer.table_configuration
    monkeypatch.setattr(
        writer, "table_configuration", lambda s: {**configuration(s), STATS_PROPERTY: ",".join(every)}
    )
    write(lake, "trajectories", rows(spec, range(2)))
    assert not [name for name, text in delta_log_text(lake, "trajectories").items() if MARKER in text]
    (path,) = Path(lake.table_uri("trajectories")).rglob("*.parquet")
    meta = pq.ParquetFile(path).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert not columns["model"].is_stats_set and columns["started_at"].is_stats_set
