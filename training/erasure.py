"""Adapters that saw erased data: found from their lineage, marked in the registry.

An adapter's weights encode what it was trained on; erasing the rows does not take them
out. Every `adapters` row (published or not) carries its lineage: per stage, the
selection SQL and the table versions it read. Before an erasure purges those versions,
`adapters_trained_on` re-runs each selection as of its versions and keeps the adapters
whose selection returned an erased trajectory. A selection that cannot be narrowed to
`trajectory_id` counts as having seen the data when those versions held any erased row.
When the versions are gone (an earlier erasure purged the history), the lineage's data
time decides: the commit time of the `trajectories` version it read, against when each
erased conversation's data first reached the lake (`arrivals`: its spans' `received_at`,
the collector's clock; a replay's `started_at`). An adapter trained before the user's data
arrived did not see it; one whose data time is unknown, or whose conversations' arrival is
(an import), counts as having seen it: marking too many is recoverable, too few is not.
`mark_adapters` sets `trained_on_erased_data` and appends the erasure's id; publishing,
serving and `trajlake report` read the mark. Retraining is the user's call (`trajlake retrain`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.errors import StoreError
from store.lake import Lake
from store.vocabulary import equals
from store.writer import write
from training.lineage import as_of_versions
from training.models.adapters import RUN_RECORD
from training.registry import adapter_rows, resolve_adapter


def lineage_entries(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-stage lineage records of an `adapters` row (its `data` JSON: a list, or one record)."""
    try:
        data = json.loads(row.get("data") or "[]")
    except json.JSONDecodeError:
        return []
    entries = data if isinstance(data, list) else [data]
    return [e for e in entries if isinstance(e, dict) and e.get("sql")]


def arrivals(lake: Lake, trajectory_ids: Sequence[str]) -> pa.Table:
    """The erased conversations as `v` (trajectory id) and `arrived` (the earliest time their data
    can have been in the lake; null where unknown): their spans' first `received_at`, else a
    replay's `started_at`. Read before the erasure, while the rows exist."""
    ids = pa.table({"v": pa.array(sorted(set(trajectory_ids)), pa.string())})
    con = connect(lake)
    try:
        con.register("erased_ids", ids)
        spans = "SELECT trace_id, min(received_at) AS received FROM spans GROUP BY trace_id"
        try:
            con.sql(f"SELECT * FROM ({spans}) LIMIT 0")
        except duckdb.Error:  # a lake without spans
            spans = "SELECT NULL::VARCHAR AS trace_id, NULL::TIMESTAMPTZ AS received"
        replayed = equals("t.source", "replay", table="trajectories")
        table = con.sql(
            f"""SELECT e.v, coalesce(s.received, CASE WHEN {replayed} THEN t.started_at END) AS arrived
            FROM erased_ids e LEFT JOIN trajectories t ON t.trajectory_id = e.v
            LEFT JOIN ({spans}) s ON s.trace_id = t.trace_id"""
        ).to_arrow_table()
    finally:
        con.close()
    return table


def saw_erased(lake: Lake, entry: dict[str, Any], erased: pa.Table) -> bool:
    """Whether the selection of one lineage record, as of its versions, returned an erased id
    (`erased`: `arrivals`); with the versions gone, whether any erased conversation had arrived
    by the time of the version read."""
    try:
        con = connect(lake, snapshot=snapshot(lake, as_of_versions(entry)))
    except (StoreError, OSError, ValueError) as exc:  # versions gone: decide by the data times
        del exc
        return arrived_before(entry, erased)
    try:
        con.register("erased_ids", erased.select(["v"]))
        sql = str(entry["sql"]).strip().rstrip(";")
        try:
            hit = con.sql(
                f"SELECT count(*) FROM ({sql}) s WHERE s.trajectory_id IN (SELECT v FROM erased_ids)"
            )
            return bool(hit.fetchall()[0][0])
        except duckdb.Error:
            hit = con.sql(
                "SELECT count(*) FROM trajectories WHERE trajectory_id IN (SELECT v FROM erased_ids)"
            )
            return bool(hit.fetchall()[0][0])
    finally:
        con.close()


def arrived_before(entry: dict[str, Any], erased: pa.Table) -> bool:
    """Whether any erased conversation can have been in the `trajectories` version a lineage
    record read: its data arrived before that version's commit (or either time is unknown)."""
    read = (entry.get("table_versions") or {}).get("trajectories") or {}
    try:
        read_at = datetime.fromisoformat(str(read["timestamp"]))
    except (KeyError, TypeError, ValueError):
        return True
    if read_at.tzinfo is None:
        read_at = read_at.replace(tzinfo=UTC)
    times = erased.column("arrived").to_pylist() if "arrived" in erased.column_names else [None]
    return any(t is None or t <= read_at for t in times)


def adapters_trained_on(lake: Lake | str, trajectory_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The `adapters` rows whose training selections returned any of `trajectory_ids`."""
    lake = Lake.of(lake)
    if not trajectory_ids or not lake.has_table("adapters"):
        return []
    erased = arrivals(lake, trajectory_ids)
    return [
        row
        for row in adapter_rows(lake)
        if any(saw_erased(lake, entry, erased) for entry in lineage_entries(row))
    ]


def mark_adapters(lake: Lake | str, refs: Sequence[str], erasure_id: str) -> list[str]:
    """Mark the adapters `refs` (`name:version`) trained_on_erased_data in one commit; returns
    the refs still in the table. Marking twice changes nothing (a resumed erasure)."""
    rows = [resolve_adapter(lake, ref) for ref in refs]
    if not rows:
        return []
    marked = [
        {
            **row,
            "trained_on_erased_data": True,
            "erasures": sorted({*(row.get("erasures") or []), erasure_id}),
        }
        for row in rows
    ]
    write(lake, "adapters", marked)
    return [f"{r['name']}:{r['version']}" for r in rows]


def record_lineages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The lineage of every stage along a run record's parent chain."""
    out = []
    node: dict[str, Any] | None = record
    while isinstance(node, dict):
        lineage = node.get("lineage")
        if isinstance(lineage, dict) and lineage.get("sql"):
            out.append(lineage)
        node = node.get("parent")
    return out


def erasure_marks(record: dict[str, Any]) -> list[str]:
    """The erasures that marked a run record or any run it continued."""
    marks: set[str] = set()
    node: dict[str, Any] | None = record
    while isinstance(node, dict):
        marks |= set(node.get("erasures") or [])
        node = node.get("parent")
    return sorted(marks)


def run_records_trained_on(lake: Lake, trajectory_ids: Sequence[str]) -> list[str]:
    """The run records of adapters under the lake (`_work`, `--output-dir`s inside it, registry
    copies), published or not, whose training selections returned an erased trajectory.
    Local lakes only."""
    from pathlib import Path

    if not trajectory_ids or not lake.is_local:
        return []
    erased = arrivals(lake, trajectory_ids)
    found = []
    for path in sorted(Path(lake.root).rglob(RUN_RECORD)):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and any(saw_erased(lake, e, erased) for e in record_lineages(record)):
            found.append(str(path))
    return found


def mark_run_records(paths: Sequence[str], erasure_id: str) -> list[str]:
    """Mark the run records at `paths` trained_on_erased_data, so that publishing their adapters
    is refused; returns the adapter folders marked."""
    from pathlib import Path

    marked = []
    for name in paths:
        path = Path(name)
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        record["trained_on_erased_data"] = True
        record["erasures"] = sorted({*(record.get("erasures") or []), erasure_id})
        temp = path.with_suffix(".json.tmp")
        temp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
        temp.replace(path)
        marked.append(str(path.parent))
    return marked
