"""Append data to a lake table: validate against the schema, then commit immutable Parquet files.

The contract, in the order it is enforced:

1. Every batch is conformed to the table's schema (`conform_batch`, a pure function):
   unknown columns, missing required columns, uncastable types and null keys are
   rejected with a `SchemaViolation` naming the table, column and row.
2. Rows are stamped with `_written_at` (unique, increasing nanoseconds per process) so
   views can keep the newest row per key, and with `dt` for partitioned tables.
3. Rows stream into zstd Parquet files under temporary names (`.part-….parquet.tmp`,
   which no `*.parquet` glob matches), bounded by `row_group_size` rows per partition.
4. Only when every batch has been validated and written are the files fsynced and
   renamed into place; a failure before that deletes the temporaries, so a rejected or
   failed write leaves nothing visible. A write spanning several files (several `dt`
   partitions, or more than `max_rows_per_file` rows) commits them one rename at a time:
   a process killed in that instant can leave some visible, which re-running the same
   write repairs (rows are keyed; the newest wins in the views).

File names embed the write time and a random suffix, so concurrent writers (threads or
processes) never collide.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from store.conform import WriteInput, conform_batch, iter_batches
from store.lake import Lake
from store.layout import new_compact_name, new_part_name, temp_name
from store.schema import PARTITION_COLUMN, WRITTEN_AT, TableSpec, table_spec

DEFAULT_ROW_GROUP_SIZE = 64_000
DEFAULT_MAX_ROWS_PER_FILE = 2_000_000
DEFAULT_BUFFER_BYTES = 64 * 1024 * 1024

_clock_lock = threading.Lock()
_last_stamp = 0


def reserve_stamps(n: int) -> int:
    """First of `n` unique, increasing `_written_at` nanoseconds for this process."""
    global _last_stamp
    with _clock_lock:
        start = max(time.time_ns(), _last_stamp + 1)
        _last_stamp = start + max(n, 1) - 1
        return start


@dataclass
class WriteResult:
    """What one `write` committed."""

    table: str
    rows: int = 0
    files: list[str] = field(default_factory=list)


# --- writing -----------------------------------------------------------------------------


@functools.cache
def parquet_layout(table: str) -> dict[str, Any]:
    """Parquet writer options for `table`, chosen for what readers filter on.

    - Statistics (min/max, for row-group pruning) only on top-level scalar columns:
      computing them over every nested message string costs a third of the write time
      and no query can prune on them.
    - Dictionary encoding only where values repeat (roles, names, models, JSON tool
      definitions, ...): ids, message contents, tool arguments, free text and token ids
      are mostly unique, and building dictionaries that overflow costs a quarter of the
      encoding time for no gain in size.
    - A bloom filter on the key columns, so a point lookup (`WHERE trajectory_id = ...`)
      skips row groups whose min/max range cannot rule the key out (keys are random ids).
    """
    spec = table_spec(table)
    schema = spec.file_schema
    scalar = [f.name for f in schema if not pa.types.is_nested(f.type)]
    leaves = [path for f in schema for path in _leaf_paths(f.name, f.type)]
    return {
        "write_statistics": scalar,
        "use_dictionary": [p for p in leaves if _repeats(p, spec)],
        "bloom_filter_options": {k: {"ndv": DEFAULT_ROW_GROUP_SIZE, "fpp": 0.01} for k in spec.key},
    }


_UNIQUE_TEXT = {
    "content",
    "arguments",
    "final_output",
    "explanation",
    "events",
    "attributes",
    "status_message",
}


def _repeats(path: str, spec: TableSpec) -> bool:
    """Whether a column's values are expected to repeat enough for a dictionary."""
    leaf = next(part for part in reversed(path.split(".")) if part not in ("list", "element"))
    unique = (
        (len(spec.key) == 1 and leaf in spec.key)  # a single-column key is unique
        or leaf == "id"
        or leaf.endswith(("_id", "_at", "_time"))  # ids and timestamps
        or leaf in _UNIQUE_TEXT
    )
    return not unique and not path.startswith("turns.") and leaf != WRITTEN_AT


def _leaf_paths(path: str, kind: pa.DataType) -> list[str]:
    # Parquet column paths as pyarrow names them: lists add `.list.element`.
    if pa.types.is_struct(kind):
        return [
            p
            for i in range(kind.num_fields)
            for p in _leaf_paths(f"{path}.{kind.field(i).name}", kind.field(i).type)
        ]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _leaf_paths(f"{path}.list.element", kind.value_type)
    return [path]


def partition_dir(lake: Lake, spec: TableSpec, dt: date | None) -> str:
    if not spec.partitioned:
        return lake.table_dir(spec.name)
    if dt is None:
        raise ValueError(f"`{spec.name}` is partitioned by `dt`, which must not be null")
    return f"{lake.table_dir(spec.name)}/{PARTITION_COLUMN}={dt.isoformat()}"


class _PartitionFile:
    """One Parquet file being written under a temporary name."""

    def __init__(
        self,
        lake: Lake,
        directory: str,
        spec: TableSpec,
        compression_level: int | None,
        file_name: str | None = None,
    ) -> None:
        self.lake = lake
        name = file_name or new_part_name()
        self.final = f"{directory}/{name}"
        self.temp = f"{directory}/{temp_name(name)}"
        lake.arrow_fs.create_dir(directory, recursive=True)
        self.writer = pq.ParquetWriter(
            self.temp,
            spec.file_schema,
            filesystem=lake.arrow_fs,
            compression="zstd",
            compression_level=compression_level,
            **parquet_layout(spec.name),
        )
        self.rows = 0
        self._lock = threading.Lock()  # a ParquetWriter is not thread-safe
        self._futures: list[Future[None]] = []

    def submit(self, pool: ThreadPoolExecutor, table: pa.Table, row_group_size: int) -> Future[None]:
        """Encode `table` as row groups on `pool`; rows are counted now, written later."""
        self.rows += table.num_rows
        try:
            future = pool.submit(self._write, table, row_group_size)
        except RuntimeError:
            # No new threads once the interpreter is shutting down (an OTel exporter flushing
            # from atexit): encode inline rather than lose the rows.
            future = Future()
            self._write(table, row_group_size)
            future.set_result(None)
        self._futures.append(future)
        return future

    def _write(self, table: pa.Table, row_group_size: int) -> None:
        with self._lock:
            self.writer.write_table(table, row_group_size=row_group_size)

    def close(self) -> None:
        for future in self._futures:
            future.result()
        self._futures.clear()
        with self._lock:
            self.writer.close()

    def commit(self, durable: bool) -> str:
        if self.lake.is_local:
            if durable:
                _fsync(self.temp)
            os.replace(self.temp, self.final)
        else:
            self.lake.fs.mv(self.temp, self.final)
        return self.final

    def discard(self) -> None:
        for future in self._futures:
            future.cancel()
        try:
            with self._lock:
                self.writer.close()
        except Exception:  # already closed or broken: removing the file is what matters
            pass
        try:
            self.lake.fs.rm(self.temp)
        except FileNotFoundError:
            pass


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dirs(paths: Iterable[str]) -> None:
    for directory in {p.rsplit("/", 1)[0] for p in paths}:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write(
    lake: Lake | str | os.PathLike[str],
    table: str,
    data: WriteInput,
    *,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
    durable: bool = True,
    compression_level: int | None = None,
    stamp: bool = True,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    threads: int = 2,
    generation: int | None = None,
) -> WriteResult:
    """Append `data` to `table` of `lake`, all or nothing.

    `data` may be a pyarrow Table or RecordBatch, a polars DataFrame, a list of dicts, or
    an iterable of those (streamed: each partition buffers at most `row_group_size` rows
    or `buffer_bytes` bytes before it is encoded, so memory stays bounded). `durable`
    fsyncs files and directories before returning. `stamp=False` keeps the caller's
    `_written_at` (compaction uses it to preserve which row is newest); rows without one
    are stamped anyway. Parquet encoding runs on up to `threads` background threads
    while the next batch is validated and split. `generation` is for `store.compact`
    only: it writes one `compact-<generation>-…` file per partition instead of `part-`
    files (see `store.layout` for what that name promises).

    >>> write("lake", "runs", [{"run_id": "r1", "step": 0, "stage": "sft"}]).rows  # doctest: +SKIP
    1
    """
    lake = Lake.of(lake)
    spec = table_spec(table)
    result = WriteResult(table=spec.name)
    open_files: dict[date | None, _PartitionFile] = {}
    pending: dict[date | None, list[pa.RecordBatch]] = {}
    pending_rows: dict[date | None, int] = {}
    pending_bytes: dict[date | None, int] = {}
    finished: list[_PartitionFile] = []
    inflight: deque[Future[None]] = deque()
    pool = ThreadPoolExecutor(max_workers=max(threads, 1), thread_name_prefix="trajlake-write")
    offset = 0

    def flush(key: date | None) -> None:
        batches = pending.pop(key, [])
        pending_rows.pop(key, None)
        pending_bytes.pop(key, None)
        if not batches:
            return
        chunk = pa.Table.from_batches(batches, schema=spec.schema)
        if spec.partitioned:
            chunk = chunk.drop_columns([PARTITION_COLUMN])
        part = open_files.get(key)
        if part is None:
            name = new_compact_name(generation) if generation is not None else None
            part = open_files[key] = _PartitionFile(
                lake, partition_dir(lake, spec, key), spec, compression_level, name
            )
        inflight.append(part.submit(pool, chunk, row_group_size))
        # Bounded pipeline: at most a couple of encoded-but-unwritten chunks in memory.
        while len(inflight) > 2 * max(threads, 1):
            inflight.popleft().result()
        if part.rows >= max_rows_per_file and generation is None:
            finished.append(open_files.pop(key))
            part.close()

    try:
        for raw in iter_batches(data, spec, row_group_size):
            if raw.num_rows == 0:
                continue
            batch = conform_batch(spec, raw, row_offset=offset)
            offset += batch.num_rows
            if stamp or batch.column(WRITTEN_AT).null_count:
                batch = _stamped(spec, batch, keep_existing=not stamp)
            for key, rows in _split_by_partition(spec, batch):
                pending.setdefault(key, []).append(rows)
                pending_rows[key] = pending_rows.get(key, 0) + rows.num_rows
                pending_bytes[key] = pending_bytes.get(key, 0) + rows.nbytes
                if pending_rows[key] >= row_group_size or pending_bytes[key] >= buffer_bytes:
                    flush(key)
        for key in list(pending):
            flush(key)
        while inflight:
            inflight.popleft().result()
        for part in open_files.values():
            part.close()
        finished.extend(open_files.values())
        open_files.clear()
        committed = [part.commit(durable) for part in finished]
    except BaseException:
        for future in inflight:
            future.cancel()
        pool.shutdown(wait=True)
        for part in [*finished, *open_files.values()]:
            part.discard()
        raise
    finally:
        pool.shutdown(wait=True)
    if durable and lake.is_local and committed:
        _fsync_dirs(committed)
    result.rows = offset
    result.files = committed
    return result


def _stamped(spec: TableSpec, batch: pa.RecordBatch, keep_existing: bool) -> pa.RecordBatch:
    """Fill `_written_at` with fresh unique stamps (only the null ones when `keep_existing`)."""
    index = spec.schema.get_field_index(WRITTEN_AT)
    kind = spec.schema.field(WRITTEN_AT).type
    start = reserve_stamps(batch.num_rows)
    stamps = pa.array(np.arange(start, start + batch.num_rows, dtype=np.int64)).cast(kind)
    if keep_existing:
        stamps = pc.coalesce(batch.column(index), stamps)
    return batch.set_column(index, spec.schema.field(WRITTEN_AT), stamps)


def _split_by_partition(
    spec: TableSpec, batch: pa.RecordBatch
) -> Iterator[tuple[date | None, pa.RecordBatch]]:
    if not spec.partitioned:
        yield None, batch
        return
    dts = batch.column(PARTITION_COLUMN)
    values = pc.unique(dts).to_pylist()
    if len(values) == 1:
        yield values[0], batch
        return
    for value in values:
        yield value, batch.filter(pc.equal(dts, pa.scalar(value, type=pa.date32())))
