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
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import numpy as np
import polars as pl
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


def key_hashes(keys: pa.Table) -> np.ndarray:
    """One 64-bit hash per row of the key columns (the same function for writes and files)."""
    if not keys.num_rows:
        return np.empty(0, np.uint64)
    return pl.from_arrow(keys).hash_rows(seed=0).to_numpy()


def token_id(spec: TableSpec) -> str:
    """The Delta `txn` application id every keyed write of `spec` sets: it serialises them."""
    return f"trajlake/{spec.name}"


@dataclass
class Scope:
    """The files of one table version a write must look in for its keys (add-action rows)."""

    files: pa.Table

    @classmethod
    def of(
        cls,
        spec: TableSpec,
        actions: pa.Table,
        partitions: set[date] | None,
        arrived_from: datetime | None,
    ) -> Scope:
        """`partitions`: only files of these `dt` values; `arrived_from`: only files with rows that
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
        return cls(actions.filter(keep))

    @property
    def paths(self) -> list[str]:
        return self.files.column("path").to_pylist()


@dataclass
class Holders:
    """The files that may hold rows of a write's keys."""

    files: pa.Table

    def __bool__(self) -> bool:
        return self.files.num_rows > 0

    def predicate(self, spec: TableSpec) -> str:
        """A MERGE target filter that file statistics turn into a scan of just these files."""
        parts = []
        if f"partition.{PARTITION_COLUMN}" in self.files.column_names:
            days = sorted(set(self.files.column(f"partition.{PARTITION_COLUMN}").to_pylist()))
            if None not in days:
                parts.append(f"t.{PARTITION_COLUMN} IN ({', '.join(repr(d.isoformat()) for d in days)})")
        ranges = _written_ranges(self.files)
        if ranges:
            parts.append(
                "("
                + " OR ".join(
                    f"t.{WRITTEN_AT} BETWEEN TIMESTAMP '{_sql_time(lo)}' AND TIMESTAMP '{_sql_time(hi)}'"
                    for lo, hi in ranges
                )
                + ")"
            )
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


def _sql_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass
class KeyIndex:
    """The key hashes of the files of one table this process has looked in."""

    lake: Lake
    spec: TableSpec
    _files: dict[str, np.ndarray] = field(default_factory=dict)  # path -> sorted hashes
    # The hashes of most files, merged and sorted (with the file each came from), plus the
    # few files read since the last merge: a lookup is a binary search, not one per file.
    _merged: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    _owner: np.ndarray = field(default_factory=lambda: np.empty(0, np.int32))
    _merged_paths: list[str] = field(default_factory=list)
    _recent: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def holders(self, scope: Scope, hashes: np.ndarray, keep: set[str]) -> Holders:
        """The files of `scope` holding a key with one of `hashes`. `keep`: the files worth
        remembering (those of the table version, within the redelivery window), so the index
        forgets files a compaction or rewrite removed, and files too old to matter."""
        with self._lock:
            for path in [p for p in self._files if p not in keep]:
                del self._files[path]  # its hashes stay in the merged array until the next merge
            self._read([p for p in scope.paths if p not in self._files])
            found = self._lookup(hashes)
        wanted = pc.is_in(scope.files.column("path"), value_set=pa.array(sorted(found), pa.string()))
        return Holders(scope.files.filter(wanted))

    def _read(self, paths: list[str]) -> None:
        for path in paths:
            keys = pq.read_table(self._location(path), columns=list(self.spec.key), filesystem=self._fs())
            self._files[path] = np.unique(key_hashes(keys))
            self._recent.append(path)
        if len(self._recent) > 16 or len(self._merged_paths) > 2 * len(self._files) + 16:
            self._merge()

    def _merge(self) -> None:
        self._merged_paths = list(self._files)
        arrays = [self._files[p] for p in self._merged_paths]
        hashes = np.concatenate(arrays) if arrays else np.empty(0, np.uint64)
        owner = np.repeat(np.arange(len(arrays), dtype=np.int32), [len(a) for a in arrays])
        order = np.argsort(hashes, kind="stable")
        self._merged, self._owner = hashes[order], owner[order]
        self._recent = []

    def _lookup(self, hashes: np.ndarray) -> set[str]:
        found: set[str] = set()
        hashes = np.unique(hashes)  # sorted queries: binary searches that stay in cache
        if len(self._merged):
            left = np.searchsorted(self._merged, hashes, side="left")
            right = np.searchsorted(self._merged, hashes, side="right")
            for lo, hi in zip(left[left < right], right[left < right], strict=True):
                found.update(self._merged_paths[i] for i in self._owner[lo:hi])
        for path in self._recent:
            known = self._files.get(path)
            if known is None:
                continue
            at = np.searchsorted(known, hashes).clip(max=max(len(known) - 1, 0))
            if len(known) and bool(np.any(known[at] == hashes)):
                found.add(path)
        return {p for p in found if p in self._files}

    def _location(self, path: str) -> str:
        relative = unquote(path)
        return (
            f"{self.lake.table_uri(self.spec.name)}/{relative}"
            if self.lake.is_local
            else self.lake.fs_path(self.spec.name, relative)
        )

    def _fs(self) -> Any:
        return None if self.lake.is_local else self.lake.fs


_INDEXES: dict[tuple[str, str], KeyIndex] = {}
_INDEXES_LOCK = threading.Lock()


def key_index(lake: Lake, spec: TableSpec) -> KeyIndex:
    """This process's index of `spec`'s table in `lake` (kept between writes)."""
    with _INDEXES_LOCK:
        index = _INDEXES.get((lake.root, spec.name))
        if index is None:
            index = _INDEXES[(lake.root, spec.name)] = KeyIndex(lake, spec)
        return index
