"""`trajlake migrate`: a lake written by an older release reads as this one's, no row lost or doubled.

Two upgrades, each a no-op where there is nothing to do:

- the Parquet-files release's tables become Delta tables (below);
- rows written before a value had its typed column get it from the JSON text that held it
  (`TYPED_FROM_JSON`): a replayed trajectory's `replay_run`, `scenario_split` and `sampling` from its
  `metadata`; a `runs` row's `scalars` and `tags`, and a pipeline run's `pipeline` or a gate
  decision's `gate` record, from its `metrics`. This module is the one place those JSON
  documents are read. What builds on those rows' typed columns refuses a lake that still holds
  such rows (`check_migrated`, `require_migrated`) rather than misread it; read-only views read
  it as it is (the typed columns of those rows null).

The previous release wrote immutable Parquet files per table (`part-<ns>-<hex>.parquet`,
and `compact-<generation>-<hex>.parquet` from its compaction), where a key could repeat
and the row with the newest `_written_at` was the current one. Migrating a table:

1. reads every old file of the table and keeps the newest row per key (the rows the old
   views showed);
2. commits them to the table's Delta log in one write: the old files stay where they are
   but are not part of the table (no Delta reader sees them);
3. moves the old files to `<lake>/_legacy/<table>/` (and the old compaction bookkeeping
   to `<lake>/_legacy/_compaction/`), where they can be deleted once the lake is checked.

Each step can be repeated: a rerun after a crash re-commits the same rows, which replace
nothing newer (`store.writer.write` keeps the newest `_written_at` per key), then moves what is
left. Stop collectors and other writers while a lake migrates.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from store.catalog import connect, parquet_view_sql
from store.errors import LegacyRows
from store.lake import Lake
from store.metrics import split_metrics
from store.pipeline_runs import GATE_DECISION_FIELDS, PIPELINE_RUN_FIELDS, PUBLISH_STAGE, STAGE, to_struct
from store.schema import TABLES, WRITTEN_AT, TableSpec
from store.vocabulary import equals
from store.writer import write

LEGACY_DIR = "_legacy"
# File names of the Parquet-files release; Delta's own files look nothing like them.
LEGACY_FILE = re.compile(r"^(?:part|compact)-\d{20}-[0-9a-f]{16}\.parquet$")
OLD_BOOKKEEPING = ("_compaction",)


@dataclass
class TableMigration:
    table: str
    files: int = 0  # old files moved to `_legacy`
    rows_read: int = 0  # rows in the old files, superseded versions included
    rows: int = 0  # current rows committed (one per key)
    version: int | None = None
    typed_rows: int = 0  # rows whose typed columns were filled from their JSON text


def legacy_files(lake: Lake, table: str) -> list[str]:
    """The old release's data files of `table` (fsspec paths)."""
    directory = lake.fs_path(table)
    if not lake.fs.exists(directory):
        return []
    found = lake.fs.find(directory)
    return sorted(p for p in found if LEGACY_FILE.match(p.rsplit("/", 1)[-1]) and "/_delta_log/" not in p)


def current_rows(lake: Lake, spec: TableSpec, files: list[str]) -> tuple[int, Iterator[pa.RecordBatch]]:
    """(rows read, the newest row per key) of the old files, in the table's schema."""
    con = duckdb.connect()
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    urls = tuple(p if lake.is_local else f"{lake.protocol}://{p}" for p in files)
    # The view's SQL: the files in the table's schema and types (`_written_at` had nanoseconds then).
    source = f"({parquet_view_sql(spec, urls, con)})"
    ((total,),) = con.execute(f"SELECT count(*) FROM {source}").fetchall()
    key = ", ".join(f'"{k}"' for k in spec.key)
    reader = con.sql(
        f"SELECT * FROM {source} "
        f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {WRITTEN_AT} DESC NULLS LAST) = 1"
    ).to_arrow_reader(50_000)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from reader
        con.close()

    return int(total), batches()


def migrate_table(lake: Lake, table: str) -> TableMigration:
    """Migrate one table (a no-op when it has no old files left)."""
    spec = TABLES[table]
    outcome = TableMigration(table)
    files = legacy_files(lake, table)
    if not files:
        return outcome
    outcome.rows_read, rows = current_rows(lake, spec, files)
    written = write(lake, table, rows)
    outcome.rows, outcome.version = written.rows, written.version
    for path in files:
        relative = path[len(lake.fs_path(table)) + 1 :]
        target = lake.fs_path(LEGACY_DIR, table, relative)
        lake.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        lake.fs.mv(path, target)
    outcome.files = len(files)
    return outcome


def migrate(
    lake: Lake | str | os.PathLike[str], *, on_table: Callable[[str], None] | None = None
) -> list[TableMigration]:
    """Migrate every table of `lake` that still has files of the Parquet-files release, then fill
    the typed columns of rows written before them (`fill_typed_columns`)."""
    lake = Lake.of(lake)
    out = []
    for table in TABLES:
        if on_table is not None:
            on_table(table)
        out.append(migrate_table(lake, table))
    for name in OLD_BOOKKEEPING:
        old = lake.fs_path(name)
        if lake.fs.exists(old):
            lake.fs.mv(old, lake.fs_path(LEGACY_DIR, name), recursive=True)
    for outcome in out:
        if outcome.table in TYPED_FROM_JSON:
            outcome.typed_rows, version = fill_typed_columns(lake, outcome.table)
            outcome.version = version if version is not None else outcome.version
    return out


# --- typed columns from JSON text ---------------------------------------------------------------


@dataclass(frozen=True)
class TypedFromJson:
    """Which rows of a table an older trajlake wrote without its typed columns."""

    column: str  # the typed column a reader checks
    candidates: str  # SQL true on a row without it (reads no JSON text: cheap on a whole table)
    legacy: str  # SQL true on those of them whose JSON text holds its value
    what: str  # those rows, in words


TYPED_FROM_JSON: dict[str, TypedFromJson] = {
    "trajectories": TypedFromJson(
        "sampling",
        f"{equals('source', 'replay', table='trajectories')} AND sampling IS NULL",
        # the old replay stage always wrote a `sampling` key; other rows have nothing to fill
        "contains(metadata, '\"sampling\"')",
        "replayed trajectories",
    ),
    "runs": TypedFromJson(
        "scalars", "scalars IS NULL AND pipeline IS NULL AND gate IS NULL", "metrics IS NOT NULL", "runs"
    ),
}


def _legacy_sql(table: str) -> str:
    spec = TYPED_FROM_JSON[table]
    return f"({spec.candidates}) AND ({spec.legacy})"


def check_migrated(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Refuse (`LegacyRows`) to read `table`'s typed columns on a connection whose lake still holds
    rows an older trajlake wrote without them: read on, they would look like rows without a value
    (no temperature recorded, no finished pipeline run) and be misread."""
    spec = TYPED_FROM_JSON[table]
    ((candidates,),) = con.execute(f"SELECT count(*) FROM {table} WHERE {spec.candidates}").fetchall()
    if not candidates:  # the usual answer, found without reading a JSON column
        return
    ((rows,),) = con.execute(f"SELECT count(*) FROM {table} WHERE {_legacy_sql(table)}").fetchall()
    if rows:
        raise LegacyRows(table, spec.column, int(rows), spec.what)


def require_migrated(
    lake: Lake | str | os.PathLike[str], tables: tuple[str, ...] = ("trajectories", "runs")
) -> None:
    """`check_migrated` for each of `tables` the lake has: what a command or flow that builds on
    earlier rows' typed columns (a pipeline run, a replay's resume, GRPO's temperatures) checks
    before doing anything. Read-only views (`trajlake sql`, the report) read such a lake as it
    is instead, the typed columns of its older rows null. Migrates nothing."""
    lake = Lake.of(lake)
    present = [table for table in tables if lake.has_table(table)]
    if not present:
        return
    with connect(lake, read_only=True) as con:
        for table in present:
            check_migrated(con, table)


def fill_typed_columns(lake: Lake, table: str) -> tuple[int, int | None]:
    """(rows upgraded, the table version written) of `table`: every row an older trajlake wrote
    without its typed columns, rewritten with them filled from its JSON text (the JSON stays).
    A rerun finds nothing left to do."""
    if not lake.has_table(table):
        return 0, None
    with connect(lake) as con:
        rows = con.sql(
            f"SELECT * EXCLUDE ({WRITTEN_AT}) FROM {table} WHERE {_legacy_sql(table)}"
        ).to_arrow_table()
    if not rows.num_rows:
        return 0, None
    fill = _trajectory_columns if table == "trajectories" else _runs_columns
    upgraded = [{**row, **fill(row)} for row in rows.to_pylist()]
    written = write(lake, table, upgraded)
    return len(upgraded), written.version


def _document(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _trajectory_columns(row: dict[str, Any]) -> dict[str, Any]:
    """A replayed trajectory's typed columns from its `metadata` (the old replay's keys)."""
    metadata = _document(row["metadata"])
    sampling = metadata.get("sampling")
    return {
        "replay_run": metadata.get("run"),
        "scenario_split": metadata.get("split"),
        "sampling": {
            "temperature": sampling.get("temperature"),
            "top_p": sampling.get("top_p"),
            "top_k": sampling.get("top_k"),
            "max_tokens": sampling.get("max_tokens"),
            "seed": sampling.get("seed"),
            "stop_token_ids": list(sampling.get("stop_token_ids") or []),
        }
        if isinstance(sampling, dict)
        else None,
    }


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}  # how the old rows spelt them


def _runs_columns(row: dict[str, Any]) -> dict[str, Any]:
    """A `runs` row's typed columns from its `metrics`: the pipeline or gate record for those
    stages, the numbers and text by name for every other."""
    metrics = _document(row["metrics"])
    if row["stage"] == STAGE:
        return {"pipeline": to_struct(_complete(metrics, PIPELINE_RUN_FIELDS), PIPELINE_RUN_FIELDS)}
    if row["stage"] == PUBLISH_STAGE:
        return {"gate": to_struct(_complete(metrics, GATE_DECISION_FIELDS), GATE_DECISION_FIELDS)}
    restored = {k: _NON_FINITE.get(v, v) if isinstance(v, str) else v for k, v in metrics.items()}
    scalars, tags = split_metrics(restored)
    return {"scalars": scalars, "tags": tags}


def _complete(record: dict[str, Any], fields: tuple[Any, ...]) -> dict[str, Any]:
    """`record` with every field of the struct (a field an older release did not write: null)."""
    return {f.name: record.get(f.name) for f in fields}
