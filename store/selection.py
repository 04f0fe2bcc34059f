"""Selections: user SQL that picks rows by id, checked once the same way for every stage.

Scenarios, training sets and replays are chosen with any read-only query over the
lake's views that returns an id column (`SELECT trajectory_id FROM trajectories WHERE
...`). The query is wrapped, never edited, so what a user previews with `trajlake sql`
is exactly what a stage uses.
"""

from __future__ import annotations

import duckdb

from store.catalog import check_read_only
from store.errors import ReadOnlyViolation, SelectionError


def check_selection(con: duckdb.DuckDBPyConnection, sql: str, column: str) -> tuple[str, list[str]]:
    """The query without a trailing `;`, and its columns, once it is known to only read,
    to run on this lake and to return `column`. Raises `SelectionError` with a reason code.
    """
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise SelectionError(
            f"the selection SQL is empty; pass a query returning `{column}`", sql=sql, reason="empty_sql"
        )
    try:
        check_read_only(con, text)
        columns = [d[0] for d in con.execute(f"SELECT * FROM ({text}) LIMIT 0").description]
    except ReadOnlyViolation as exc:
        raise SelectionError(
            f"the selection SQL must only read: {exc}", sql=sql, reason="not_read_only"
        ) from exc
    except duckdb.Error as exc:
        raise SelectionError(
            f"the selection SQL failed: {exc}\n  query: `{text}`\n  try it first with `trajlake sql`",
            sql=sql,
            reason="bad_sql",
        ) from exc
    if column not in columns:
        raise SelectionError(
            f"the selection SQL must return a `{column}` column; it returned: {', '.join(columns) or 'nothing'}",
            sql=sql,
            reason="missing_column",
        )
    return text, columns
