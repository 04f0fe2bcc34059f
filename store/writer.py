"""Write to a lake table: validate against the schema, then one Delta commit that keeps one row per key.

The contract, in the order it is enforced:

1. Every batch is conformed to the table's schema (`store.conform`): unknown columns,
   missing required columns, uncastable types and null keys are a `SchemaViolation`
   naming the table, column and row, and nothing is committed.
2. Rows are stamped with `_written_at` and, for partitioned tables, `dt`; a key that
   repeats within one write keeps its last row.
3. The rows go in with one Delta commit: an `upsert` table replaces the rows of keys it
   already holds (unless the held row is newer), `spans` keeps them (a retried delivery is
   the same span); new keys are inserted. One commit, so a reader sees all of a write or
   none of it, and every Delta reader sees one row per key after every commit.
4. A commit that loses a race with another writer (delta-rs `CommitFailedError`) is
   retried from a fresh snapshot, with backoff; the conformed rows wait in a local Arrow
   IPC spill file, so input is read once and memory stays bounded by one batch.

Where a write looks for keys the table holds (`store.keys`): for a table whose rows never
change partition (`spans`), only the `dt` partitions being written; otherwise every
partition, unless the caller knows better and passes `within` (the assembler knows the
days a trace's spans fall on, and a re-assembled trajectory's previous row is in one of
them). Rows whose keys no file holds are appended; the others go through one MERGE
narrowed to the files that hold them.
"""

from __future__ import annotations

# A first write may come from an exit hook (OTel exporters flush there; tests/store/
# test_shutdown_write.py), when a library that registers a thread exit hook as it is imported
# (`concurrent.futures.thread`, which polars imports) can no longer be imported: import it
# with this module, so it registers its exit hook now, not at exit.
import concurrent.futures.thread  # noqa: F401
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from store.conform import WriteInput, conform_batch, iter_batches
from store.errors import StoreError
from store.keys import REDELIVERY_WINDOW, key_index, merge_predicate, scope
from store.lake import Lake
from store.orphans import remove_attempt_files
from store.rows import utc_now
from store.schema import ID_COLUMNS, PARTITION_COLUMN, TIMESTAMP, WRITTEN_AT, TableSpec, table_spec
from store.spill import Spill

T = TypeVar("T")

DEFAULT_BATCH_ROWS = 64_000
MAX_ATTEMPTS = 40
# Removed files stay this long for readers of older snapshots and for time travel (`compact` vacuums).
DELETED_FILE_RETENTION = "interval 7 days"


@dataclass
class WriteResult:
    """What one `write` committed."""

    table: str
    rows: int = 0  # rows offered, after in-write duplicates were dropped
    inserted: int = 0
    updated: int = 0
    files_added: int = 0
    version: int | None = None  # the table version committed; None when there was nothing to write
    attempts: int = 0


# --- the table ---------------------------------------------------------------------------------


# Top-level columns whose values repeat enough to be worth a dictionary.
REPEATING = {
    "source",
    "kind",
    "status_code",
    "service_name",
    "scope_name",
    "agent_name",
    "model",
    "policy",
    "status",
    "name",
    "scorer",
    "stage",
    "split",
    "base_model",
    "tools",
}
# Columns whose every value differs: a dictionary would only cost time.
UNIQUE = {"trajectory_id", "trace_id", "span_id"}


# The table property naming the columns whose min/max values the Delta log records per file.
STATS_PROPERTY = "delta.dataSkippingStatsColumns"


def stats_columns(spec: TableSpec) -> list[str]:
    """The columns with file statistics: timestamps, numbers, flags and id columns
    (`ID_COLUMNS`), what queries and writes prune files by (`_written_at`, `received_at`,
    trace and trajectory ids). Never free text (names, messages, attributes, events,
    metadata, explanations): the Delta log keeps its statistics forever, and a text
    column's min/max would be a second copy of whatever redaction missed. Text keys
    (`rewards.name`, `scorer`) go without: every file holds most of their values, so their
    statistics prune nothing."""

    def text(kind: pa.DataType) -> bool:
        return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))

    return [
        f.name
        for f in spec.schema
        if f.name != PARTITION_COLUMN  # its values are the partition paths already
        and not pa.types.is_nested(f.type)
        and (f.name in ID_COLUMNS or not text(f.type))
    ]


def writer_properties(spec: TableSpec, *, compacted: bool = False) -> Any:
    """zstd Parquet laid out for what readers filter on, and cheap to write.

    Statistics only on the columns the Delta log keeps them for (`stats_columns`): delta-rs
    copies the Parquet statistics it finds into the log, so a column without them cannot
    leak there whatever the table's properties say; none on text and nested columns, where
    computing them costs a large share of the write. A bloom filter on the key columns, so
    a point lookup skips row groups their min/max cannot rule out. Dictionaries: a write (the collector's hot path)
    uses them only where values repeat; `compact`'s files, written once and read by every
    query after, use them everywhere but the unique ids: roles, tool names and repeated
    content inside the messages decode several times faster (the writer falls back to
    plain encoding by itself where a column's values do not repeat).
    """
    from deltalake import BloomFilterProperties, ColumnProperties, WriterProperties

    def dictionary(name: str) -> bool:
        return name not in UNIQUE if compacted else name in REPEATING

    with_stats = set(stats_columns(spec))
    columns = {
        f.name: ColumnProperties(
            statistics_enabled="CHUNK" if f.name in with_stats else "NONE",
            dictionary_enabled=dictionary(f.name),
            bloom_filter_properties=BloomFilterProperties(True, fpp=0.01) if f.name in spec.key else None,
        )
        for f in spec.schema
        if not pa.types.is_nested(f.type)
    }
    return WriterProperties(
        compression="ZSTD",
        max_row_group_size=DEFAULT_BATCH_ROWS,
        default_column_properties=ColumnProperties(statistics_enabled="NONE", dictionary_enabled=compacted),
        column_properties=columns,
    )


def table_configuration(spec: TableSpec) -> dict[str, str]:
    """Delta table properties: stats on the columns queries filter on, logs kept for time travel."""
    return {
        STATS_PROPERTY: ",".join(stats_columns(spec)),
        # Lineage re-reads the versions adapters were trained on: keep every commit's log entry
        # (they are small); `compact` keeps those versions' files when it vacuums.
        "delta.enableExpiredLogCleanup": "false",
        "delta.deletedFileRetentionDuration": DELETED_FILE_RETENTION,
    }


# Threads of one process that find a table missing create it one at a time: deltalake's
# `create(mode="ignore")` that loses the race to version 0 commits a second CREATE TABLE (a new
# table id) after whatever the winner wrote meanwhile (seen with 6 threads on a loaded 2-core
# machine). Rows survive it, but a table is created once. Processes can still race; rows survive.
_CREATING = threading.Lock()


def open_table(lake: Lake, spec: TableSpec) -> Any:
    """The Delta table of `spec`, created on first use, with any column the schema added since."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    uri = lake.table_uri(spec.name)
    try:
        table = DeltaTable(uri, storage_options=lake.delta_options)
    except TableNotFoundError:
        with _CREATING:
            try:
                table = DeltaTable(uri, storage_options=lake.delta_options)  # another thread's
            except TableNotFoundError:
                table = DeltaTable.create(
                    uri,
                    spec.schema,
                    mode="ignore",  # a writer in another process may have created it
                    partition_by=[PARTITION_COLUMN] if spec.partitioned else None,
                    configuration=table_configuration(spec),
                    storage_options=lake.delta_options,
                )
    present = {field.name for field in table.schema().fields}
    missing = [f for f in spec.schema if f.name not in present]
    if missing:  # additive evolution: a column added to the schema since the table was created
        from deltalake import Field

        table.alter.add_columns([Field.from_arrow(f) for f in missing])
        table = DeltaTable(uri, storage_options=lake.delta_options)
    wanted = table_configuration(spec)[STATS_PROPERTY]
    if table.metadata().configuration.get(STATS_PROPERTY) != wanted:
        # A table created when text columns had statistics (or before a column was added):
        # commits from now on record statistics for `stats_columns` only.
        from deltalake.exceptions import CommitFailedError

        try:
            table.alter.set_table_properties({STATS_PROPERTY: wanted})
        except CommitFailedError:
            pass  # another writer changed the table first; the next open checks again
        table = DeltaTable(uri, storage_options=lake.delta_options)
    return table


def _commit(
    lake: Lake, spec: TableSpec, spill: Spill, within: set[date] | None, upsert: bool
) -> tuple[dict[str, Any], int]:
    """Append the spilled rows, or MERGE them where the table may hold their keys; returns
    the commit's metrics and the version it made."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    table = open_table(lake, spec)
    # Every keyed write claims the next version of the table's `txn` token, so two writes that
    # read the same version conflict (and the loser retries) even when both only append.
    token = f"trajlake/{spec.name}"
    claim = CommitProperties(
        app_transactions=[Transaction(token, (table.transaction_version(token) or 0) + 1)]
    )
    holders = _holders(lake, spec, table, spill, within, upsert)
    if not holders.num_rows:
        write_deltalake(
            table,
            spill.reader(),
            mode="append",
            writer_properties=writer_properties(spec),
            commit_properties=claim,
        )
        version = table.version()  # the handle moves to the version its own commit made
        metrics = lake.commit_info(spec.name, version).get("operationMetrics") or {}
        return {
            "num_target_rows_inserted": spill.rows,
            "num_target_files_added": metrics.get("num_added_files", 0),
        }, version
    keys = " AND ".join(f"t.{k} = s.{k}" for k in spec.key)
    narrowed = merge_predicate(holders)
    merger = table.merge(
        spill.reader(),
        f"{narrowed} AND {keys}" if narrowed else keys,
        source_alias="s",
        target_alias="t",
        writer_properties=writer_properties(spec),
        streamed_exec=True,
        commit_properties=claim,
    )
    if upsert:
        # Last writer wins by `_written_at`: a row never replaces a newer one of its key (a
        # migration re-run, a slow writer that lost a race to a faster, later one).
        merger = merger.when_matched_update_all(
            predicate=f"t.{WRITTEN_AT} IS NULL OR s.{WRITTEN_AT} >= t.{WRITTEN_AT}"
        )
    metrics = merger.when_not_matched_insert_all().execute()
    return metrics, table.version()


def _holders(
    lake: Lake, spec: TableSpec, table: Any, spill: Spill, within: set[date] | None, upsert: bool
) -> pa.Table:
    """The table's files that may hold rows of the spilled keys: in the partitions where the
    keys can be (`stable_partition`, `within`) and, for redeliveries, in the window."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return actions
    partitions = None
    if spec.partitioned and (spec.stable_partition or within is not None):
        partitions = spill.partitions | (within or set())
    arrived_from = None
    if spec.arrival and not upsert and spill.arrived_from is not None:
        arrived_from = spill.arrived_from - REDELIVERY_WINDOW
    # The files worth remembering: within the redelivery window; of those, the write's partitions.
    window = scope(spec, actions, None, arrived_from)
    remembered = set(window.column("path").to_pylist())
    return key_index(lake, spec).holders(scope(spec, window, partitions, None), spill.hashes, remembered)


def write(
    lake: Lake | str | os.PathLike[str],
    table: str,
    data: WriteInput,
    *,
    within: Iterable[date] | None = None,
    upsert: bool | None = None,
    durable: bool = False,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> WriteResult:
    """Validate `data` and commit it to `table` in one Delta commit, one row per key.

    `data`: pyarrow Tables or RecordBatches, polars DataFrames, lists of dicts, or an
    iterable of those (streamed). `within`: `dt` partitions where older rows of these keys
    may be, when the caller knows (faster than looking everywhere). `upsert`: replace the
    rows of keys the table holds (default: the table's own rule). `durable`: fsync the
    commit (local lakes) before returning, for callers that delete their own copy next.
    Raises `SchemaViolation` (nothing committed) or `StoreError` when the commit keeps
    losing races.
    """
    lake = Lake.of(lake)
    spec = table_spec(table)
    result = WriteResult(table)
    spill = Spill(spec)
    try:
        stamp = utc_now()
        spill.fill(_conformed(spec, data, batch_rows), pa.scalar(stamp, TIMESTAMP))
        result.rows = spill.rows
        if not spill.rows:
            return result
        wanted = set(within) if within is not None else None

        def attempt() -> tuple[dict[str, Any], int]:
            from deltalake.exceptions import CommitFailedError

            started = time.time()
            try:
                return _commit(lake, spec, spill, wanted, spec.upsert if upsert is None else upsert)
            except CommitFailedError:
                if not lake.is_local:
                    # On S3 this removed files a concurrent commit had named (tests/store/test_s3.py's
                    # concurrent writers lost rows): there, vacuum's grace period clears them.
                    raise
                # Its files will never be committed: remove them now (`store.orphans`).
                named = set(open_table(lake, spec).file_uris()) if lake.has_table(table) else set()
                prefix = lake.table_uri(table).removeprefix("file://") + "/"
                relative = {u.removeprefix("file://").removeprefix(prefix) for u in named}
                remove_attempt_files(lake, spec, spill.partitions, stamp, started, relative)
                raise

        (metrics, version), result.attempts = retried(
            attempt,
            lambda attempts, exc: StoreError(
                f"`{table}`: the commit lost {attempts} races with other writers ({exc}); nothing was "
                "committed by this write, retry it"
            ),
        )
        result.inserted = int(metrics.get("num_target_rows_inserted", 0))
        result.updated = int(metrics.get("num_target_rows_updated", 0))
        result.files_added = int(metrics.get("num_target_files_added", 0))
        result.version = version
        if durable and lake.is_local:
            fsync_commit(lake, table, version)
        return result
    finally:
        spill.close()


def retried(
    commit: Callable[[], T], give_up: Callable[[int, Exception], StoreError], attempts: int = MAX_ATTEMPTS
) -> tuple[T, int]:
    """`commit()` and the attempts it took, retried with jittered backoff while it loses races
    with other writers (delta-rs `CommitFailedError`); `give_up(attempts, error)` is raised after the last."""
    from deltalake.exceptions import CommitFailedError

    for attempt in range(1, attempts + 1):
        try:
            return commit(), attempt
        except CommitFailedError as exc:
            if attempt == attempts:
                raise give_up(attempt, exc) from exc
            time.sleep(min(2.0, 0.02 * 2 ** min(attempt, 7)) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def _conformed(spec: TableSpec, data: WriteInput, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The input's batches in the table's schema; errors name rows by their place in the whole input."""
    offset = 0
    for batch in iter_batches(data, spec, batch_rows):
        if batch.num_rows:
            yield conform_batch(spec, batch, row_offset=offset)
            offset += batch.num_rows


def fsync_commit(lake: Lake, table: str, version: int) -> None:
    """Flush a local commit to disk: its log entry, the files it added and their directories."""
    import json

    root = Path(lake.table_uri(table))
    entry = root / "_delta_log" / f"{version:020d}.json"
    paths = [entry]
    for line in entry.read_text().splitlines():
        add = json.loads(line).get("add")
        if add:
            paths.append(root / add["path"])
    for path in [*paths, *{p.parent for p in paths}]:
        if path.exists():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
