"""Table versions and snapshots: which files a view reads, read from each table's Delta log."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from store.delta_log import earliest_version
from store.errors import DataErased
from store.lake import Lake
from store.schema import TABLES, WRITTEN_AT


@dataclass(frozen=True)
class TableVersion:
    """One table at one version: what a query over it reads, and how to name it for lineage."""

    table: str
    version: int | None  # None: nothing was ever committed to the table
    timestamp: datetime | None  # when that version was committed
    files: tuple[str, ...] = ()

    def lineage(self) -> dict[str, Any]:
        return {"version": self.version, "timestamp": self.timestamp.isoformat() if self.timestamp else None}


Snapshot = dict[str, TableVersion]


def table_version(lake: Lake, table: str, version: int | None = None) -> TableVersion:
    """The files of `table` at `version` (the newest when None)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        delta = DeltaTable(lake.table_uri(table), version=version, storage_options=lake.delta_options)
    except TableNotFoundError:
        if version is not None:
            earliest = earliest_version(lake, table)
            if earliest is not None and version < earliest:
                raise DataErased(table, version, earliest) from None
            raise
        return TableVersion(table, None, None)
    current = delta.version()
    stamp = lake.commit_info(table, current).get("timestamp")
    when = datetime.fromtimestamp(stamp / 1000, UTC) if stamp is not None else None
    return TableVersion(table, current, when, tuple(delta.file_uris()))


def snapshot(
    lake: Lake | str | os.PathLike[str],
    versions: Mapping[str, int] | None = None,
    *,
    tables: Collection[str] | None = None,
) -> Snapshot:
    """Every table's current version (or the `versions` given, for time travel); only those of
    `tables` when given (a query that reads two tables need not read the other logs)."""
    lake = Lake.of(lake)
    versions = versions or {}
    chosen = TABLES if tables is None else [name for name in TABLES if name in tables]
    return {name: table_version(lake, name, versions.get(name)) for name in chosen}


@dataclass(frozen=True)
class TableStats:
    """Per-table facts for `trajlake tables`, from the table's Delta log."""

    table: str
    version: int | None  # None: nothing committed yet
    rows: int
    files: int
    bytes: int
    newest: datetime | None  # newest `_written_at`: when data last arrived


def table_stats(lake: Lake | str | os.PathLike[str]) -> list[TableStats]:
    """Stats for every table of the lake, empty tables included (read from the logs, no data scanned)."""
    # pyarrow.compute generates its functions' wrappers when imported (~40 ms): `trajlake sql`,
    # which opens this module's snapshots, does not pay for what only `trajlake tables` uses.
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    lake = Lake.of(lake)
    out = []
    for name in TABLES:
        if not lake.has_table(name):
            out.append(TableStats(name, None, 0, 0, 0, None))
            continue
        delta = DeltaTable(lake.table_uri(name), storage_options=lake.delta_options)
        actions = pa.table(delta.get_add_actions(flatten=True))
        stamps = f"max.{WRITTEN_AT}"
        newest = pc.max(actions.column(stamps)).as_py() if stamps in actions.column_names else None
        out.append(
            TableStats(
                name,
                delta.version(),
                int(pc.sum(actions.column("num_records")).as_py() or 0),
                actions.num_rows,
                int(pc.sum(actions.column("size_bytes")).as_py() or 0),
                newest,
            )
        )
    return out
