"""What a scoring run reads: candidate trajectories, what is already scored, groups to judge.

All of it is SQL over the lake's views. The relation every `--where` filter and SQL
reward sees is `candidates`: every column of `trajectories` (deduplicated) plus the
scenario's `expected` and `split`, so `--where "split = 'train' AND agent_name = 'support'"`
and `--sql-reward "CASE WHEN final_output = json_extract_string(expected, '$.answer') THEN 1 ELSE 0 END"`
both work without joins. Other views (`messages`, `rewards`, ...) can be used in subqueries.

"Already scored by this scorer" means: the trajectory has at least one row with this
`scorer` and none of its current rows (the newest per key) is failed. Failed rows are
therefore retried by the next run, and a `--force` run scores everything again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb

from judging.errors import SqlRewardError
from store.catalog import check_read_only

CANDIDATES = """
    SELECT t.* EXCLUDE ({exclude}), s.expected AS expected, s.split AS split
    FROM trajectories t LEFT JOIN scenarios s ON s.scenario_id = t.scenario_id
"""

DONE = """
    SELECT trajectory_id FROM rewards WHERE scorer = $scorer
    GROUP BY trajectory_id HAVING bool_and(status IS DISTINCT FROM 'failed')
"""


def candidates_sql(load_turns: bool = False) -> str:
    """The `candidates` relation (turns left out unless asked for: they are the bulk of the bytes)."""
    exclude = "_written_at" if load_turns else "_written_at, turns"
    return CANDIDATES.format(exclude=exclude)


def where_clause(where: str | None) -> str:
    return f"WHERE ({where})" if where and where.strip() else ""


def run_checked(
    con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any] | None = None, *, user_sql: str = ""
) -> list[tuple[Any, ...]]:
    """Run SQL that embeds user text: one read-only statement, errors named after the user's SQL."""
    try:
        check_read_only(con, sql)
        if len(con.extract_statements(sql)) != 1:
            raise SqlRewardError(user_sql or sql, "must be a single expression, not several statements")
        return con.execute(sql, params or {}).fetchall()
    except SqlRewardError:
        raise
    except Exception as exc:  # duckdb.Error subclasses and ReadOnlyViolation
        raise SqlRewardError(user_sql or sql, f"{type(exc).__name__}: {exc}") from None


def count_trajectories(con: duckdb.DuckDBPyConnection, where: str | None, scorer: str) -> tuple[int, int]:
    """(trajectories matching `where`, of which already scored by `scorer`).

    Runs the user's filter over every candidate, so an error in it surfaces here,
    before anything is written.
    """
    sql = f"""
        WITH candidates AS ({candidates_sql()})
        SELECT count(*), count(*) FILTER (WHERE trajectory_id IN ({DONE})) FROM candidates {where_clause(where)}
    """
    [(total, done)] = run_checked(con, sql, {"scorer": scorer}, user_sql=where or "")
    return total, done


def stream_trajectories(
    con: duckdb.DuckDBPyConnection, where: str | None, scorer: str, force: bool, load_turns: bool = False
) -> Iterator[dict[str, Any]]:
    """Trajectory dicts to score, in (group_id, trajectory_id) order, from one streaming query."""
    skip = "" if force else f"AND trajectory_id NOT IN ({DONE})"
    sql = f"""
        WITH candidates AS ({candidates_sql(load_turns)})
        SELECT * FROM candidates {where_clause(where) or "WHERE true"} {skip}
        ORDER BY group_id NULLS LAST, trajectory_id
    """
    yield from _records(con, sql, {} if force else {"scorer": scorer})


def selected_groups(
    con: duckdb.DuckDBPyConnection, where: str | None, scorer: str, force: bool, min_size: int
) -> tuple[list[tuple[str, int]], int, int]:
    """Groups to judge as (group_id, size), plus counts of groups already done and too small.

    A group is selected when any of its trajectories matches `where`; it is then judged
    whole (RULER is relative: a partial group would be a different comparison).
    """
    sql = f"""
        WITH candidates AS ({candidates_sql()}),
             picked AS (SELECT DISTINCT group_id FROM candidates {where_clause(where)}),
             members AS (
                SELECT t.group_id, t.trajectory_id, t.trajectory_id IN ({DONE}) AS done
                FROM trajectories t JOIN picked USING (group_id)
             )
        SELECT group_id, count(*) AS size, bool_and(done) AS done
        FROM members WHERE group_id IS NOT NULL
        GROUP BY group_id ORDER BY group_id
    """
    rows = run_checked(con, sql, {"scorer": scorer}, user_sql=where or "")
    todo, done, small = [], 0, 0
    for group_id, size, is_done in rows:
        if is_done and not force:
            done += 1
        elif size < min_size:
            small += 1
        else:
            todo.append((group_id, size))
    return todo, done, small


def _records(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
    reader = con.sql(sql, params=params).to_arrow_reader(2048)
    for batch in reader:
        yield from batch.to_pylist()


def stream_groups(
    con: duckdb.DuckDBPyConnection, group_ids: list[str], load_turns: bool = False
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(group_id, members) for the given groups, from one streaming query ordered by group.

    One pass over the lake however many groups there are; memory holds one group at a time
    (plus DuckDB's reader batch).
    """
    sql = f"""
        WITH candidates AS ({candidates_sql(load_turns)})
        SELECT * FROM candidates WHERE group_id IN (SELECT unnest($ids))
        ORDER BY group_id, trajectory_id
    """
    members: list[dict[str, Any]] = []
    for row in _records(con, sql, {"ids": group_ids}):
        if members and row["group_id"] != members[0]["group_id"]:
            yield members[0]["group_id"], members
            members = []
        members.append(row)
    if members:
        yield members[0]["group_id"], members


def load_groups(
    con: duckdb.DuckDBPyConnection, group_ids: list[str], load_turns: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """Every trajectory of the given groups, by group id, each group ordered by trajectory id."""
    sql = f"""
        WITH candidates AS ({candidates_sql(load_turns)})
        SELECT * FROM candidates WHERE group_id IN (SELECT unnest($ids))
        ORDER BY group_id, trajectory_id
    """
    groups: dict[str, list[dict[str, Any]]] = {gid: [] for gid in group_ids}
    for row in _records(con, sql, {"ids": group_ids}):
        groups[row["group_id"]].append(row)
    return groups


def scenarios_by_id(con: duckdb.DuckDBPyConnection, scenario_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Scenario rows by id (only those asked for)."""
    if not scenario_ids:
        return {}
    sql = "SELECT * EXCLUDE (_written_at) FROM scenarios WHERE scenario_id IN (SELECT unnest($ids))"
    return {row["scenario_id"]: row for row in _records(con, sql, {"ids": sorted(scenario_ids)})}
