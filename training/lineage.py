"""Lineage: what a training set was made of, recorded so the exact rows can be found again.

Every selection (SFT conversations, GRPO groups) returns a `Lineage`: the selection
SQL, a digest of the trajectory ids, the lake files holding the current rows, and the
reward name and scorers. The run record carries it, and `publish` writes it into the
adapter's manifest and the `adapters` row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

import store
from store.schema import TABLES


@dataclass(frozen=True)
class Lineage:
    """Where a training set came from: enough to find the exact rows again."""

    sql: str
    trajectory_count: int
    trajectory_ids_digest: str
    lake: str
    lake_files: list[str] = field(default_factory=list)
    reward_name: str | None = None
    reward_scorers: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def digest_ids(ids: Sequence[str]) -> str:
    """Order-independent sha256 of a set of trajectory ids (`sha256:<hex>`).

    >>> digest_ids(["b", "a"]) == digest_ids(["a", "b"])
    True
    """
    h = hashlib.sha256()
    for tid in sorted(set(ids)):
        h.update(tid.encode())
        h.update(b"\n")
    return f"sha256:{h.hexdigest()}"


def files_holding(
    con: duckdb.DuckDBPyConnection,
    lake: store.Lake,
    table: str,
    ids: list[str],
    reward_name: str | None = None,
) -> list[str]:
    """Parquet files holding the current (newest) row of each selected trajectory (and reward name)."""
    if not ids or not lake.data_files(table):
        return []
    spec = TABLES[table]
    glob = lake.glob(table).replace("'", "''")
    con.register("__selected_ids", _ids_table(ids))
    quoted = (reward_name or "").replace("'", "''")
    name_filter = f"AND name = '{quoted}'" if reward_name else ""
    try:
        key = ", ".join(spec.key)
        rows = con.execute(
            f"""
            SELECT DISTINCT filename FROM (
              SELECT filename FROM read_parquet('{glob}', hive_partitioning={str(spec.partitioned).lower()},
                                                union_by_name=true, filename=true)
              WHERE trajectory_id IN (SELECT trajectory_id FROM __selected_ids) {name_filter}
              QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY _written_at DESC) = 1
            ) ORDER BY filename
            """
        ).fetchall()
    finally:
        con.unregister("__selected_ids")
    root = lake.url()
    return [r[0][len(root) + 1 :] if r[0].startswith(root) else r[0] for r in rows]


def _ids_table(ids: list[str]) -> pa.Table:
    return pa.table({"trajectory_id": pa.array(ids, pa.string())})
