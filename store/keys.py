"""Which files of a Delta table hold which keys, so that a write of new keys is an append.

A Delta MERGE finds the keys a table already holds by scanning the target files it cannot
rule out by statistics, and with random keys (trace ids, UUIDs) that is every file of the
partitions written: each flush of a busy collector re-read the whole day, and write cost
grew with the table. Instead, every writing process keeps the 64-bit hashes of the keys of
each file it may have to look in, read once per file (Delta files are immutable; only the
key columns are read). A write then knows which of its rows may already be in the table,
and which files hold them:

- none (new spans, new trajectories: the common case): the rows are appended;
- some: one MERGE whose predicate is narrowed to those files through their `_written_at`
  statistics and partitions. A hash match is only a candidate: the MERGE compares keys.

An append is exact against other writers through a Delta application transaction (`txn`)
that every keyed write carries: two writes that read the same table version cannot both
commit it, and the loser retries from the new version (reading only the new files' keys).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from store.lake import Lake
from store.schema import PARTITION_COLUMN, WRITTEN_AT, TableSpec

# A table with an `arrival` column (spans: `received_at`) is checked for a write's keys only
# in files delivered within this long of the write's rows: OTLP exporters retry for
# minutes, so a span delivered again an hour after its first delivery is not a retry.
REDELIVERY_WINDOW = timedelta(hours=1)
# Delta statistics keep timestamps to the millisecond: widen ranges so no row falls outside.
_STATS_SLACK = timedelta(milliseconds=1)
_MAX_RANGES = 64
_SQL_TIME = "%Y-%m-%d %H:%M:%S.%f"


def key_hashes(keys: pa.Table) -> np.ndarray:
    """One 64-bit hash per row of the key columns (the same function for writes and files)."""
    if not keys.num_rows:
        return np.empty(0, np.uint64)
    # polars is imported by the first write (0.09 s), not by whatever imports the writer: reading
    # the settings imports the collector's modules (`trajlake collect --help`).
    import polars as pl

    hashes: np.ndarray = pl.DataFrame(keys).hash_rows(seed=0).to_numpy()
    return hashes


def scope(
    spec: TableSpec, actions: pa.Table, partitions: set[date] | None, arrived_from: datetime | None
) -> pa.Table:
    """The files (add-action rows) of one table version a write must look in for its keys:
    `partitions`, only files of these `dt` values; `arrived_from`, only files with rows that
    arrived then or later (files without statistics are always in scope)."""
    keep = pa.array(np.ones(actions.num_rows, bool))
    names = set(actions.column_names)
    if partitions is not None and f"partition.{PARTITION_COLUMN}" in names:
        column = actions.column(f"partition.{PARTITION_COLUMN}")
        keep = pc.and_(keep, pc.is_in(column, value_set=pa.array(sorted(partitions), pa.date32())))
    if arrived_from is not None and f"max.{spec.arrival}" in names:
        latest = actions.column(f"max.{spec.arrival}")
        recent = pc.greater_equal(latest, pa.scalar(arrived_from - _STATS_SLACK, latest.type))
        keep = pc.and_(keep, pc.fill_null(recent, True))
    return actions.filter(keep)


def merge_predicate(holders: pa.Table) -> str:
    """A MERGE target filter that file statistics turn into a scan of just the `holders` files."""
    parts = []
    if f"partition.{PARTITION_COLUMN}" in holders.column_names:
        days = sorted(set(holders.column(f"partition.{PARTITION_COLUMN}").to_pylist()))
        if None not in days:
            parts.append(f"t.{PARTITION_COLUMN} IN ({', '.join(repr(d.isoformat()) for d in days)})")
    ranges = _written_ranges(holders)
    if ranges:
        between = (
            f"t.{WRITTEN_AT} BETWEEN TIMESTAMP '{lo:{_SQL_TIME}}' AND TIMESTAMP '{hi:{_SQL_TIME}}'"
            for lo, hi in ranges
        )
        parts.append(f"({' OR '.join(between)})")
    return " AND ".join(parts)


def _written_ranges(files: pa.Table) -> list[tuple[datetime, datetime]]:
    """Merged `_written_at` ranges of `files`; empty when some file has no statistics."""
    if f"min.{WRITTEN_AT}" not in files.column_names:
        return []
    lows = files.column(f"min.{WRITTEN_AT}").to_pylist()
    highs = files.column(f"max.{WRITTEN_AT}").to_pylist()
    if any(v is None for v in (*lows, *highs)):
        return []
    ranges: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(zip(lows, highs, strict=True)):
        lo, hi = lo - _STATS_SLACK, hi + _STATS_SLACK
        if ranges and lo <= ranges[-1][1]:
            ranges[-1] = (ranges[-1][0], max(hi, ranges[-1][1]))
        else:
            ranges.append((lo, hi))
    if len(ranges) > _MAX_RANGES:
        return [(ranges[0][0], max(hi for _, hi in ranges))]
    return ranges


@dataclass
class KeyIndex:
    """The key hashes of the files of one table this process has looked in: one sorted array
    of hashes, with the file each came from, so a lookup is a binary search whatever the
    number of files. A file read since is merged in (a linear insert of its sorted hashes)."""

    lake: Lake
    spec: TableSpec
    _ids: dict[str, int] = field(default_factory=dict)  # path -> the file's number in `_owner`
    _hashes: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))  # sorted
    _owner: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def holders(self, files: pa.Table, hashes: np.ndarray, keep: set[str]) -> pa.Table:
        """The `files` holding a key with one of `hashes`. `keep`: the files worth remembering
        (those of the table version, within the redelivery window), so the index forgets files
        a compaction or rewrite removed, and files too old to matter."""
        paths = files.column("path").to_pylist()
        with self._lock:
            gone = [self._ids.pop(p) for p in [p for p in self._ids if p not in keep]]
            if gone:
                live = ~np.isin(self._owner, gone)
                self._hashes, self._owner = self._hashes[live], self._owner[live]
            self._add([p for p in dict.fromkeys(paths) if p not in self._ids])
            queries = np.unique(hashes)
            left = np.searchsorted(self._hashes, queries, side="left")
            right = np.searchsorted(self._hashes, queries, side="right")
            hit = left < right
            owners = {
                int(o) for lo, hi in zip(left[hit], right[hit], strict=True) for o in self._owner[lo:hi]
            }
            found = [p for p, file_id in self._ids.items() if file_id in owners]
        return files.filter(pc.is_in(files.column("path"), value_set=pa.array(found, pa.string())))

    def _add(self, paths: list[str]) -> None:
        if not paths:
            return
        first = max(self._ids.values(), default=-1) + 1
        arrays = []
        for offset, path in enumerate(paths):
            self._ids[path] = first + offset
            arrays.append(np.unique(key_hashes(self._read_keys(unquote(path)))))
        hashes = np.concatenate(arrays)
        owner = np.repeat(np.arange(first, first + len(arrays)), [len(a) for a in arrays])
        order = np.argsort(hashes, kind="stable")
        at = np.searchsorted(self._hashes, hashes[order])
        self._hashes = np.insert(self._hashes, at, hashes[order])
        self._owner = np.insert(self._owner, at, owner[order])

    def _read_keys(self, relative: str) -> pa.Table:
        columns = list(self.spec.key)
        if self.lake.is_local:
            return pq.read_table(f"{self.lake.table_uri(self.spec.name)}/{relative}", columns=columns)
        return pq.read_table(
            self.lake.fs_path(self.spec.name, relative), columns=columns, filesystem=self.lake.fs
        )


# The indexes of the tables this process wrote to, the least recently used dropped past
# `MAX_INDEXES`: a process that writes to many lakes (a test session, a service with a lake
# per tenant) would otherwise keep every table's hashes it ever read. A dropped index costs
# only the key columns read again on that table's next write.
MAX_INDEXES = 32
_INDEXES: OrderedDict[tuple[str, str], KeyIndex] = OrderedDict()
_INDEXES_LOCK = threading.Lock()


def key_index(lake: Lake, spec: TableSpec) -> KeyIndex:
    """This process's index of `spec`'s table in `lake` (kept between writes, `MAX_INDEXES` at most)."""
    with _INDEXES_LOCK:
        index = _INDEXES.get((lake.root, spec.name))
        if index is None:
            index = _INDEXES[(lake.root, spec.name)] = KeyIndex(lake, spec)
            while len(_INDEXES) > MAX_INDEXES:
                _INDEXES.popitem(last=False)
        else:
            _INDEXES.move_to_end((lake.root, spec.name))
        return index
