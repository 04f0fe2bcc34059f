"""`trajlake sql` binds the views a query reads (`store.catalog.query_views`): the same answers as
with every view, every view for a query that looks at the catalog, and no table's log read for
`SELECT 1`."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from store.catalog.connection import connect
from store.catalog.derived_views import DERIVED_VIEWS
from store.catalog.query_views import EVERY_VIEW, views_read
from store.catalog.versions import snapshot
from store.lake import Lake
from store.readonly import explained_statement
from store.schema import TABLES
from store.user_sql import query_lake
from store.writer import write
from tests.store.helpers import T0, make_traj

ALL = EVERY_VIEW


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1", set()),
        ("SELECT count(*) FROM trajectories", {"trajectories"}),
        ('select * from "Trajectories" t, MAIN.rewards', {"trajectories", "rewards"}),
        ("SELECT 1 -- FROM spans\n", set()),
        ("SELECT 'spans', /* labels */ 2", set()),
        ("SELECT 'ééé' AS x, count(*) FROM rewards", {"rewards"}),
        ("SELECT * FROM messages", {"messages", "trajectories"}),
        ("SELECT * FROM latest_rewards", {"latest_rewards", "rewards"}),
        ("SELECT * FROM groups", {"groups", "trajectories", "latest_rewards", "rewards"}),
        (
            "SELECT * FROM policy_performance",
            {"policy_performance", "trajectories", "latest_rewards", "rewards", "adapters"},
        ),
        ("WITH x AS (SELECT * FROM labels) SELECT * FROM x", {"labels"}),
        ("SELECT * FROM read_csv('notes.csv')", set()),
    ],
)
def test_a_query_reads_the_views_it_names_and_what_they_read(sql: str, expected: set[str]) -> None:
    assert views_read(sql) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SHOW TABLES",
        "show all tables",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM duckdb_views()",
        "SELECT * FROM duckdb_tables",
        "SELECT * FROM sqlite_master",
        "SELECT * FROM pg_catalog.pg_tables",
        "PRAGMA show_tables",
        "SELECT * FROM pragma_table_info('trajectories')",
        "SELECT * FROM query_table('spans')",
        "SELECT * FROM query('SELECT * FROM spans')",
        "SELECT * FROM group_stats('success')",
        "SUMMARIZE SELECT 1",
        "DESCRIBE",  # alone it lists every relation, as SHOW TABLES
    ],
)
def test_a_query_that_looks_at_the_catalog_sees_every_view(sql: str) -> None:
    assert views_read(sql) == ALL


def test_every_derived_view_is_closed_over_what_it_reads() -> None:
    for name, sql in DERIVED_VIEWS.items():
        read = views_read(f"SELECT * FROM {name}")
        assert views_read(sql) <= read and name in read


@pytest.fixture
def filled(lake: Lake) -> Lake:
    write(lake, "trajectories", [make_traj(i, group_id="g1" if i < 2 else None) for i in range(4)])
    write(
        lake,
        "rewards",
        [
            {"trajectory_id": f"t{i}", "name": "success", "scorer": "s", "value": i / 4, "scored_at": T0}
            for i in range(4)
        ],
    )
    return lake


QUERIES = [
    "SELECT 1",
    "SELECT count(*) FROM trajectories",
    "SELECT role, count(*) FROM messages GROUP BY 1 ORDER BY 1",
    "SELECT group_id, name, size, mean FROM groups ORDER BY 1, 2",
    "SELECT trajectory_id, value FROM latest_rewards ORDER BY 1",
    "SELECT count(*) FROM spans",
    "SELECT table_name FROM information_schema.tables ORDER BY 1",
    "SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY 1",
    "SELECT size FROM group_stats('success')",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_the_answers_are_those_of_a_connection_with_every_view(filled: Lake, sql: str) -> None:
    expected = connect(filled, read_only=True).execute(sql).fetchall()
    assert query_lake(filled, sql).rows == expected
    lake_only = Lake(filled.root, sql_lake_only=True)
    assert query_lake(lake_only, sql).rows == expected


def test_show_tables_lists_every_view(filled: Lake) -> None:
    shown = {row[0] for row in query_lake(filled, "SHOW TABLES").rows}
    assert shown == ALL == {*TABLES, *DERIVED_VIEWS}


def test_a_partial_snapshot_reads_only_the_tables_asked_for(filled: Lake) -> None:
    assert list(snapshot(filled, tables={"rewards", "messages"})) == ["rewards"]
    assert snapshot(filled, tables=set()) == {}
    assert list(snapshot(filled)) == list(TABLES)


def test_has_table_agrees_with_delta_rs(filled: Lake) -> None:
    """A table exists when its log holds a commit or a checkpoint (delta-rs's own test), and
    neither a log folder with only a writer's temporary file nor a missing folder is one."""
    log = Path(filled.root) / "labels" / "_delta_log"
    log.mkdir(parents=True)
    (log / "_commit_0123.json.tmp").write_text("{}")
    for table in TABLES:
        assert filled.has_table(table) == DeltaTable.is_deltatable(filled.table_uri(table)), table
    assert filled.has_table("trajectories") and not filled.has_table("labels")


def test_explain_finds_its_statement_past_text_that_is_not_ascii() -> None:
    # DuckDB's tokenizer counts bytes; the statement is cut at the character it means
    assert (
        explained_statement("EXPLAIN /* é */ ANALYZE COPY (SELECT 'é') TO 'x'") == "COPY (SELECT 'é') TO 'x'"
    )


def test_a_misspelt_view_is_named_with_the_lakes_nearest_one(filled: Lake) -> None:
    """A name no view has: the query runs again with every view, so DuckDB suggests the lake's
    (`trajectories` is not bound for a query that names only `trajectory`)."""
    with pytest.raises(duckdb.CatalogException, match="trajectories"):
        query_lake(filled, "SELECT count(*) FROM trajectory")
