"""Adapters that saw erased data: found from their lineage, marked in the registry.

An adapter's weights encode what it was trained on; erasing the rows does not take them
out. Every `adapters` row (published or not) carries its lineage: per stage, the
selection SQL and the table versions it read. Before an erasure purges those versions,
`adapters_trained_on` re-runs each selection as of its versions and keeps the adapters
whose selection returned an erased trajectory. A selection that cannot be narrowed to
`trajectory_id` (or whose versions are already gone) counts as having seen the data
when those versions held any erased row: marking too many is recoverable, too few is not.
`mark_adapters` sets `trained_on_erased_data` and appends the erasure's id; publishing,
serving and `trajlake report` read the mark. Retraining is the user's call (`trajlake retrain`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa

import store
from store.errors import StoreError
from training.lineage import RUN_RECORD, as_of_versions
from training.registry import adapter_rows


def lineage_entries(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-stage lineage records of an `adapters` row (its `data` JSON: a list, or one record)."""
    try:
        data = json.loads(row.get("data") or "[]")
    except json.JSONDecodeError:
        return []
    entries = data if isinstance(data, list) else [data]
    return [e for e in entries if isinstance(e, dict) and e.get("sql")]


def saw_erased(lake: store.Lake, entry: dict[str, Any], erased: pa.Table) -> bool:
    """Whether the selection of one lineage record, as of its versions, returned an erased id."""
    try:
        con = store.connect(lake, snapshot=store.snapshot(lake, as_of_versions(entry)))
    except (StoreError, OSError, ValueError) as exc:  # versions gone: nothing left to check against
        del exc
        return True
    try:
        con.register("erased_ids", erased)
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


def adapters_trained_on(lake: store.Lake | str, trajectory_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The `adapters` rows whose training selections returned any of `trajectory_ids`."""
    lake = store.Lake.of(lake)
    if not trajectory_ids or not lake.has_table("adapters"):
        return []
    erased = pa.table({"v": pa.array(sorted(set(trajectory_ids)), pa.string())})
    return [
        row
        for row in adapter_rows(lake)
        if any(saw_erased(lake, entry, erased) for entry in lineage_entries(row))
    ]


def mark_adapters(lake: store.Lake | str, refs: Sequence[str], erasure_id: str) -> list[str]:
    """Mark the adapters `refs` (`name:version`) trained_on_erased_data in one commit; returns
    the refs still in the table. Marking twice changes nothing (a resumed erasure)."""
    from training.registry import resolve_adapter

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
    store.write(lake, "adapters", marked)
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


def run_records_trained_on(lake: store.Lake, trajectory_ids: Sequence[str]) -> list[str]:
    """The run records of adapters under the lake (`_work`, `--output-dir`s inside it, registry
    copies), published or not, whose training selections returned an erased trajectory.
    Local lakes only."""
    from pathlib import Path

    if not trajectory_ids or not lake.is_local:
        return []
    erased = pa.table({"v": pa.array(sorted(set(trajectory_ids)), pa.string())})
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
