"""The files a write that lost its commit leaves behind, removed by that write.

A Delta write writes its Parquet files first and commits them after; when the commit loses
a race with another writer (`CommitFailedError`), `store.writer.retried` tries again with
new files, and the first attempt's files are named by no version, ever. Vacuum would only
remove them an hour later (`store.erasure.apply.UNCOMMITTED_GRACE_HOURS`: a younger
unnamed file may be another writer's about to be committed), and meanwhile they hold
copies of rows: rows an erasure running at the same moment must not leave anywhere.

So the losing write removes its own files at once. It knows them without guessing: every
row a write adds carries that write's `_written_at` stamp (one instant for the whole write,
`store.spill.Spill.fill`), and no other writer's file can hold a row with that stamp (its
rows are not committed). A file of the write's partitions, written since the attempt began,
named by no version, whose `_written_at` statistics reach exactly the stamp, is the
attempt's; any other file is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime

import pyarrow.parquet as pq

from store.lake import Lake
from store.schema import PARTITION_COLUMN, WRITTEN_AT, TableSpec

# Slack for file systems whose modification times are coarser than the clock (seconds).
MTIME_SLACK_S = 2.0


def newest_stamp(lake: Lake, path: str) -> datetime | None:
    """The largest `_written_at` a Parquet file's statistics record (None: none recorded)."""
    with lake.fs.open(path, "rb") as handle:
        meta = pq.ParquetFile(handle).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if WRITTEN_AT not in names:
        return None
    column = names.index(WRITTEN_AT)
    newest = None
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(column).statistics
        if stats is None or not stats.has_min_max:
            return None
        value = stats.max
        newest = value if newest is None or value > newest else newest
    return newest


def remove_attempt_files(
    lake: Lake,
    spec: TableSpec,
    partitions: Iterable[date],
    stamp: datetime,
    since: float,
    named: set[str],
) -> int:
    """Remove the files of a write attempt that lost its commit: under `spec`'s table (in
    `partitions` when partitioned), modified at or after `since` (epoch seconds), not in
    `named` (the current version's files, relative paths), whose newest `_written_at` is
    `stamp`. Returns how many went."""
    root = lake.fs_path(spec.name)
    folders = (
        [f"{root}/{PARTITION_COLUMN}={d.isoformat()}" for d in partitions] if spec.partitioned else [root]
    )
    removed = 0
    for folder in folders:
        if not lake.fs.exists(folder):
            continue
        for info in lake.fs.ls(folder, detail=True):
            path = str(info["name"])
            if info.get("type") != "file" or not path.endswith(".parquet"):
                continue
            if path.removeprefix("file://").removeprefix(root + "/") in named:
                continue
            modified = info.get("mtime") or info.get("LastModified")
            if isinstance(modified, datetime):
                modified = modified.timestamp()
            if modified is None or float(modified) < since - MTIME_SLACK_S:
                continue
            try:
                found = newest_stamp(lake, path)
            except (OSError, ValueError):  # gone meanwhile, or not a finished Parquet file
                continue
            if found is not None and _same_instant(found, stamp):
                lake.fs.rm(path)
                removed += 1
    return removed


def _same_instant(found: datetime, stamp: datetime) -> bool:
    if found.tzinfo is None and stamp.tzinfo is not None:
        found = found.replace(tzinfo=stamp.tzinfo)
    return found == stamp
