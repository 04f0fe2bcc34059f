"""Compaction: merge each partition's small files into one file, while readers and writers keep going.

A pass over a table does four things, in this order:

1. **Reclaim.** Files that an earlier pass replaced are deleted once `grace_seconds`
   have passed (queries that listed them before the replacement have finished by then),
   and temporaries of killed writers (`.*.tmp`) older than `stale_temp_seconds` go too.
2. **Decide.** The newest row of every key across the table is found from the key
   columns alone. A partition is rewritten when it has `part-` files, or when its
   compacted file holds a row that a newer row (possibly in another partition)
   supersedes.
3. **Rewrite.** Each such partition's winning rows stream (bounded memory, DuckDB with a
   memory limit) into one `compact-<generation>-….parquet` file, written with
   `stamp=False` so every row keeps its `_written_at`. Superseded rows are dropped. The
   new file is committed by an atomic rename; its higher generation makes it the
   partition's live compacted file at that instant (see `store.layout`), and the files
   it replaces are recorded in `_compaction/<table>/pending-….json`.
4. Nothing is deleted in the same pass unless `grace_seconds` is 0.

Why no row is lost or duplicated at any instant: a reader's view is built from one
snapshot of file names. Before the rename it sees the old files; after it, the new file
is the live compacted one and the replaced files are ordinary files whose rows tie with
the copies (same key, same `_written_at`), and a tie goes to the compacted copy.
Writers only add `part-` files, which a pass either merges (if it listed them) or
leaves for the next pass.

One compaction at a time per table: on a local lake a lock file enforces it; on an
object store, schedule a single `trajlake compact`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from store.catalog import EPOCH_SQL, snapshot
from store.errors import CompactionError, LakeBusy
from store.lake import Lake
from store.layout import base_name, compact_generation, dir_name, new_compact_name, temp_name
from store.replaced import STATE_DIR, list_files, pending_files, pending_logs, record_replaced
from store.schema import TABLES, WRITTEN_AT, TableSpec, table_spec
from store.writer import DEFAULT_ROW_GROUP_SIZE, parquet_layout, write


@dataclass(frozen=True)
class CompactConfig:
    """How `compact` behaves."""

    # Safety
    grace_seconds: float = field(
        default=900.0,
        metadata={
            "help": "Replaced files are deleted this long after replacement (running queries finish first)."
        },
    )
    stale_temp_seconds: float = field(
        default=3600.0, metadata={"help": "Temporaries of killed writers older than this are deleted."}
    )
    # What to rewrite
    min_part_files: int = field(
        default=1, metadata={"help": "Rewrite a partition once it has at least this many `part-` files."}
    )
    # Resources
    memory_limit: str = field(
        default="1GB", metadata={"help": "DuckDB memory limit while merging (spills beyond)."}
    )
    threads: int | None = field(default=None, metadata={"help": "DuckDB threads (default: all cores)."})
    row_group_size: int = field(
        default=DEFAULT_ROW_GROUP_SIZE, metadata={"help": "Rows per Parquet row group."}
    )
    batch_rows: int = field(
        default=16_384, metadata={"help": "Rows streamed from DuckDB to the writer at a time."}
    )


@dataclass
class CompactionResult:
    """What one pass did to one table."""

    table: str
    partitions: int = 0  # partitions rewritten
    files_in: int = 0  # files replaced (now pending deletion)
    files_out: int = 0  # compacted files written
    rows_in: int = 0  # rows read from the replaced files
    rows_out: int = 0  # rows written (rows_in - rows_out superseded rows were dropped)
    deleted: int = 0  # replaced files deleted after their grace period
    temps_removed: int = 0  # stale temporaries of killed writers removed
    outputs: list[str] = field(default_factory=list)


def compact(
    lake: Lake | str | os.PathLike[str],
    tables: Sequence[str] | None = None,
    *,
    config: CompactConfig | None = None,
    on_partition: Callable[[str, str], None] | None = None,
) -> list[CompactionResult]:
    """Compact `tables` (default: all) of `lake`; see the module docstring for the guarantees.

    `on_partition(table, partition)` is called before each partition is rewritten (for
    progress display).

    >>> [r.rows_out for r in compact("lake", ["runs"])]  # doctest: +SKIP
    [12]
    """
    lake = Lake.of(lake)
    config = config or CompactConfig()
    names = list(tables) if tables else list(TABLES)
    for name in names:
        table_spec(name)
    results = []
    for name in names:
        with _table_lock(lake, name):
            results.append(_compact_table(lake, table_spec(name), config, on_partition))
    return results


def _compact_table(
    lake: Lake, spec: TableSpec, config: CompactConfig, on_partition: Callable[[str, str], None] | None
) -> CompactionResult:
    result = CompactionResult(spec.name)
    result.deleted = reclaim(lake, spec.name, config.grace_seconds)
    result.temps_removed = remove_stale_temps(lake, spec.name, config.stale_temp_seconds)
    snap = snapshot(lake, spec.name)
    replaced = pending_files(lake, spec.name)
    live = list(snap.compacted)
    loose = [f for f in snap.other if compact_generation(base_name(f)) is None and f not in replaced]
    if not live and not loose:
        return result
    con = _connection(lake, config)
    try:
        superseded = _find_winners(con, lake, spec, [*live, *loose])
        by_dir: dict[str, list[str]] = {}
        for path in loose:
            by_dir.setdefault(dir_name(path), []).append(path)
        todo = {d for d, files in by_dir.items() if len(files) >= config.min_part_files}
        todo |= {dir_name(path) for path in live if superseded.get(path, 0)}
        for directory in sorted(todo):
            old = [p for p in live if dir_name(p) == directory]
            inputs = [*old, *by_dir.get(directory, [])]
            partition = directory[len(lake.table_dir(spec.name)) :].strip("/") or "(table)"
            if on_partition is not None:
                on_partition(spec.name, partition)
            written, rows_in = _rewrite(con, lake, spec, directory, inputs, config, partition)
            record_replaced(lake, spec.name, inputs)
            result.partitions += 1
            result.files_in += len(inputs)
            result.files_out += 1
            result.rows_in += rows_in
            result.rows_out += written[1]
            result.outputs.append(written[0])
    finally:
        con.close()
    if config.grace_seconds <= 0:
        result.deleted += reclaim(lake, spec.name, 0)
    return result


# --- deciding ---------------------------------------------------------------------------


def _connection(lake: Lake, config: CompactConfig) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    con.execute(f"SET memory_limit = '{config.memory_limit}'")
    if config.threads:
        con.execute(f"SET threads = {int(config.threads)}")
    con.execute("SET preserve_insertion_order = false")  # lets big results stream
    if not lake.is_local:
        con.register_filesystem(lake.fs)
    return con


def _files_sql(lake: Lake, spec: TableSpec, files: Sequence[str], columns: str = "*") -> str:
    urls = ", ".join("'" + _url(lake, f).replace("'", "''") + "'" for f in files)
    return (
        f"SELECT {columns} FROM read_parquet([{urls}], hive_partitioning={str(spec.partitioned).lower()}, "
        "union_by_name=true, filename='__file')"
    )


def _url(lake: Lake, path: str) -> str:
    return path if lake.is_local else f"{lake.protocol}://{path}"


def _find_winners(
    con: duckdb.DuckDBPyConnection, lake: Lake, spec: TableSpec, files: Sequence[str]
) -> dict[str, int]:
    """Build the temp table `__win` (newest row per key: its file and `_written_at`) and
    return, per file, how many of its rows are superseded."""
    key = ", ".join(f'"{k}"' for k in spec.key)
    stamp = f"coalesce({WRITTEN_AT}, {EPOCH_SQL}) AS {WRITTEN_AT}"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE __keys AS {_files_sql(lake, spec, files, f'{key}, {stamp}, __file')}"
    )
    # A tie (the same row in two files, left by a pass that stopped before recording what it
    # replaced) may go either way: the partition holding the copy is rewritten regardless.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE __win AS
            SELECT {key}, arg_max(__file, {WRITTEN_AT}) AS __file,
                   max({WRITTEN_AT}) AS {WRITTEN_AT}
            FROM __keys GROUP BY ALL"""
    )
    rows = con.execute(
        f"""SELECT k.__file, count(*) FROM __keys k ANTI JOIN __win w
            ON {" AND ".join(f'k."{c}" = w."{c}"' for c in spec.key)}
               AND k.__file = w.__file AND k.{WRITTEN_AT} = w.{WRITTEN_AT}
            GROUP BY ALL"""
    ).fetchall()
    by_url = {_url(lake, f): f for f in files}
    return {by_url.get(url, url): count for url, count in rows}


# --- rewriting --------------------------------------------------------------------------


def _rewrite(
    con: duckdb.DuckDBPyConnection,
    lake: Lake,
    spec: TableSpec,
    directory: str,
    inputs: Sequence[str],
    config: CompactConfig,
    partition: str,
) -> tuple[tuple[str, int], int]:
    """Write the winning rows of `inputs` to one new compacted file; ((path, rows), rows read)."""
    key = " AND ".join(f'r."{k}" = w."{k}"' for k in spec.key)
    urls = [_url(lake, f) for f in inputs]
    url_list = ", ".join("'" + u.replace("'", "''") + "'" for u in urls)
    expected = con.execute(f"SELECT count(*) FROM __win WHERE __file IN ({url_list})").fetchall()[0]
    rows_in = con.execute(f"SELECT count(*) FROM __keys WHERE __file IN ({url_list})").fetchall()[0]
    generation = _next_generation(lake, directory)
    # Rows of files without `_written_at` keep counting as the oldest (not as fresh writes).
    stamp = f"coalesce({WRITTEN_AT}, {EPOCH_SQL}) AS {WRITTEN_AT}"
    sql = (
        f"SELECT r.* EXCLUDE (__file) FROM ({_files_sql(lake, spec, inputs, f'* REPLACE ({stamp})')}) r "
        f"SEMI JOIN (SELECT * FROM __win WHERE __file IN ({url_list})) w "
        f"ON {key} AND r.__file = w.__file AND r.{WRITTEN_AT} = w.{WRITTEN_AT}"
    )
    try:
        reader = con.sql(sql).to_arrow_reader(config.batch_rows)
        result = write(
            lake,
            spec.name,
            _batches(reader),
            stamp=False,
            generation=generation,
            row_group_size=config.row_group_size,
        )
    except duckdb.Error as exc:
        raise CompactionError(spec.name, partition, str(exc)) from exc
    want = expected[0] if expected else 0
    if result.rows != want:
        # Nothing is lost: the inputs are not recorded as replaced, so readers still see
        # them (a superseded compacted file reads like any other file) and the next pass
        # redoes this partition.
        raise CompactionError(spec.name, partition, f"wrote {result.rows} rows, expected {want}")
    if result.files:
        return (result.files[0], result.rows), rows_in[0] if rows_in else 0
    # Every row was superseded elsewhere: an empty newer generation hides the old file.
    return (_write_empty(lake, spec, directory, generation), 0), rows_in[0] if rows_in else 0


def _batches(reader: Any) -> Iterator[pa.RecordBatch]:
    for batch in reader:
        if batch.num_rows:
            yield batch


def _next_generation(lake: Lake, directory: str) -> int:
    existing = [
        g
        for g in (compact_generation(base_name(p)) for p in list_files(lake, directory, recursive=False))
        if g is not None
    ]
    return max(time.time_ns(), max(existing, default=0) + 1)


def _write_empty(lake: Lake, spec: TableSpec, directory: str, generation: int) -> str:
    name = new_compact_name(generation)
    final, temp = f"{directory}/{name}", f"{directory}/{temp_name(name)}"
    lake.arrow_fs.create_dir(directory, recursive=True)
    pq.write_table(
        spec.file_schema.empty_table(),
        temp,
        filesystem=lake.arrow_fs,
        compression="zstd",
        **parquet_layout(spec.name),
    )
    if lake.is_local:
        os.replace(temp, final)
    else:
        lake.fs.mv(temp, final)
    return final


# --- reclaiming -------------------------------------------------------------------------


def reclaim(lake: Lake | str | os.PathLike[str], table: str, grace_seconds: float) -> int:
    """Delete files replaced more than `grace_seconds` ago; the number of files deleted."""
    lake = Lake.of(lake)
    deleted = 0
    now = time.time()
    for log, entry in pending_logs(lake, table):
        if now - float(entry["replaced_at"]) < grace_seconds:
            continue
        for path in entry["files"]:
            with contextlib.suppress(FileNotFoundError):
                lake.fs.rm(path)
                deleted += 1
        lake.fs.rm(log)
    return deleted


def remove_stale_temps(lake: Lake | str | os.PathLike[str], table: str, older_than_seconds: float) -> int:
    """Delete temporaries (`.*.tmp`) of killed writers older than `older_than_seconds`."""
    lake = Lake.of(lake)
    now = time.time()
    removed = 0
    for path in list_files(lake, lake.table_dir(table), recursive=True):
        name = base_name(path)
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - _mtime(lake, path) >= older_than_seconds:
                lake.fs.rm(path)
                removed += 1
    return removed


def _mtime(lake: Lake, path: str) -> float:
    if lake.is_local:
        return os.path.getmtime(path)
    info = lake.fs.info(path)
    stamp = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    return stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp or 0)


# --- locking ----------------------------------------------------------------------------


@contextlib.contextmanager
def _table_lock(lake: Lake, table: str) -> Iterator[None]:
    """One compaction per table at a time (a POSIX file lock; no-op on object stores)."""
    if not lake.is_local:
        yield
        return
    import fcntl

    os.makedirs(lake.fs_path(STATE_DIR), exist_ok=True)
    path = lake.fs_path(STATE_DIR, f"{table}.lock")
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LakeBusy(f"compaction of `{table}`", f"another `trajlake compact` ({path})") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
