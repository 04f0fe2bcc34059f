"""Keeping a lake fast and small: Delta OPTIMIZE with Z-order clustering, then VACUUM.

Every flush of the collector and every scoring batch is a commit that adds a file, so a
busy table grows many small ones. `compact` rewrites each partition that has more than
one file into few large files, sorted along a Z-order curve of the table's cluster
columns (`trace_id` for spans, `trajectory_id` for trajectories and rewards), so a
lookup by those keys reads few row groups. It runs safely while writers commit and
queries read: Delta commits are optimistic (a compaction that loses a race with a writer
retries that partition), and the files it replaces stay on disk for readers of older
snapshots until a vacuum removes them, after `retention_hours`.

VACUUM keeps, besides what the retention period keeps, every file of the table versions
listed in `keep_versions`: the versions published adapters were trained on
(`training.registry.lineage_versions`), so their training data can always be read again.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from store.delta_log import earliest_version
from store.errors import CompactionError
from store.lake import Lake
from store.schema import PARTITION_COLUMN, TABLES, table_spec
from store.writer import open_table, retried, writer_properties


@dataclass(frozen=True)
class CompactConfig:
    """How `compact` tidies tables."""

    tables: tuple[str, ...] = field(default=(), metadata={"help": "Tables to compact (empty: all)."})
    cluster: bool = field(
        default=True, metadata={"help": "Z-order the rewritten files by the table's lookup keys."}
    )
    min_files: int = field(default=2, metadata={"help": "Rewrite a partition once it has this many files."})
    vacuum: bool = field(
        default=True, metadata={"help": "Delete files no version within the retention needs."}
    )
    retention_hours: int = field(
        default=168,
        metadata={
            "help": "Keep replaced files this long (readers of older snapshots, time travel, the "
            "lineage of unpublished runs); published adapters' versions are kept regardless."
        },
    )

    def __post_init__(self) -> None:
        for table in self.tables:
            if table not in TABLES:
                raise ValueError(f"unknown table `{table}`; the lake has: {', '.join(TABLES)}")
        if self.min_files < 2 or self.retention_hours < 0:
            raise ValueError("`min_files` must be >= 2 and `retention_hours` >= 0")


@dataclass
class TableCompaction:
    """What `compact` did to one table."""

    table: str
    partitions: int = 0  # partitions rewritten
    files_removed: int = 0
    files_added: int = 0
    files_vacuumed: int = 0
    version: int | None = None


def crowded_partitions(add_actions: Any, min_files: int) -> list[str | None]:
    """Partitions (`dt` values; None for an unpartitioned table) holding at least `min_files` files."""
    actions = pa.table(add_actions)
    key = f"partition.{PARTITION_COLUMN}"
    values = actions.column(key).to_pylist() if key in actions.column_names else [None] * actions.num_rows
    counts = Counter(None if value is None else str(value) for value in values)
    return sorted((p for p, n in counts.items() if n >= min_files), key=lambda p: p or "")


def compact_table(
    lake: Lake, table: str, config: CompactConfig, keep_versions: Iterable[int] = ()
) -> TableCompaction:
    """Rewrite the crowded partitions of one table (clustered), then vacuum it."""
    from deltalake import DeltaTable

    spec = table_spec(table)
    outcome = TableCompaction(table)
    if not lake.has_table(table):
        return outcome
    uri = lake.table_uri(table)
    delta = open_table(lake, spec)
    for partition in crowded_partitions(delta.get_add_actions(flatten=True), config.min_files):
        filters = [(PARTITION_COLUMN, "=", partition)] if partition is not None else None

        def rewrite(filters: Any = filters) -> dict[str, Any]:
            optimizer = DeltaTable(uri, storage_options=lake.delta_options).optimize
            options = {
                "partition_filters": filters,
                "writer_properties": writer_properties(spec, compacted=True),
            }
            if config.cluster and spec.cluster_by:
                return optimizer.z_order(spec.cluster_by, **options)
            return optimizer.compact(**options)

        def give_up(attempts: int, exc: Exception, where: str = partition or "(table)") -> CompactionError:
            return CompactionError(table, where, f"lost {attempts} races with writers ({exc})")

        metrics, _ = retried(rewrite, give_up)
        outcome.partitions += 1
        outcome.files_removed += int(metrics.get("numFilesRemoved", 0))
        outcome.files_added += int(metrics.get("numFilesAdded", 0))
    if config.vacuum:
        # Versions before an erasure's purge (`store.erasure.apply`) cannot be kept: they are gone.
        oldest = earliest_version(lake, table) or 0
        keep_versions = [v for v in keep_versions if v >= oldest]
        removed = DeltaTable(uri, storage_options=lake.delta_options).vacuum(
            retention_hours=config.retention_hours,
            dry_run=False,
            enforce_retention_duration=False,
            keep_versions=sorted(set(keep_versions)) or None,
        )
        outcome.files_vacuumed = len(removed)
    outcome.version = DeltaTable(uri, storage_options=lake.delta_options).version()
    return outcome


def compact(
    lake: Lake | str | os.PathLike[str],
    config: CompactConfig | None = None,
    *,
    keep_versions: Mapping[str, Iterable[int]] | None = None,
    on_table: Callable[[str], None] | None = None,
) -> list[TableCompaction]:
    """Compact (and vacuum) every table, or `config.tables`; `keep_versions`: per table, versions to keep."""
    lake = Lake.of(lake)
    config = config or CompactConfig()
    out = []
    for table in config.tables or tuple(TABLES):
        if on_table is not None:
            on_table(table)
        out.append(compact_table(lake, table, config, (keep_versions or {}).get(table, ())))
    return out
