"""The DuckDB views and polars scans: one row per key, derived views, snapshots, plain Delta readers."""

from __future__ import annotations

import pyarrow as pa

from bench.synthetic import synthetic_rewards, synthetic_scenarios, synthetic_trajectories
from store.catalog.connection import connect, refresh, scan
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.rows import served_adapter_name
from store.schema import TABLES, table_spec
from store.writer import write
from tests.store.helpers import T0, count, make_traj


def test_newest_row_per_key_wins_in_views_and_scan(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(1, model="a"), make_traj(2, model="a")])
    write(lake, "trajectories", [make_traj(1, model="b")])
    write(lake, "trajectories", [make_traj(1, model="c"), make_traj(1, model="d")])  # same batch: last wins
    con = connect(lake)
    assert con.execute("SELECT trajectory_id, model FROM trajectories ORDER BY 1").fetchall() == [
        ("t1", "d"),
        ("t2", "a"),
    ]
    frame = scan(lake, "trajectories").select("trajectory_id", "model").sort("trajectory_id").collect()
    assert frame.rows() == [("t1", "d"), ("t2", "a")]


def test_composite_keys_dedupe_on_every_key_column(lake: Lake) -> None:
    row = {"trajectory_id": "t1", "name": "r", "scorer": "s1", "value": 0.1, "scored_at": T0}
    write(lake, "rewards", [row, {**row, "scorer": "s2", "value": 0.2}])
    write(lake, "rewards", [{**row, "value": 0.9}])
    assert connect(lake).execute("SELECT scorer, value FROM rewards ORDER BY 1").fetchall() == [
        ("s1", 0.9),
        ("s2", 0.2),
    ]


def test_derived_views_messages_latest_rewards_groups(lake: Lake) -> None:
    write(lake, "trajectories", synthetic_trajectories(40, seed=5, replayed_fraction=1.0, group_size=4))
    write(lake, "rewards", synthetic_rewards(40, seed=5, replayed_fraction=1.0, group_size=4))
    con = connect(lake)
    total = con.execute("SELECT sum(len(messages)) FROM trajectories").fetchall()[0][0]
    assert count(lake, "SELECT count(*) FROM messages") == total
    # Positions are 0-based and contiguous per trajectory; the first message is the system prompt.
    assert con.execute("SELECT bool_and(role = 'system') FROM messages WHERE position = 0").fetchall() == [
        (True,)
    ]
    gaps = con.execute(
        "SELECT count(*) FROM (SELECT trajectory_id FROM messages GROUP BY 1 "
        "HAVING min(position) <> 0 OR max(position) + 1 <> count(*))"
    ).fetchall()
    assert gaps == [(0,)]
    # Failed judge rewards are not in latest_rewards; groups count only successful ones.
    failed = count(lake, "SELECT count(*) FROM rewards WHERE status = 'failed'")
    judged = count(lake, "SELECT count(*) FROM rewards WHERE name = 'ruler'")
    assert count(lake, "SELECT count(*) FROM latest_rewards WHERE name = 'ruler'") == judged - failed
    sizes = con.execute("SELECT sum(size) FROM groups WHERE name = 'ruler'").fetchall()[0][0]
    assert sizes == judged - failed
    assert con.execute("SELECT count(*) FROM group_stats('ruler')").fetchall()[0][0] == 10


def test_views_are_a_snapshot_until_refresh(lake: Lake) -> None:
    write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    con = connect(lake)
    write(lake, "runs", [{"run_id": "r", "step": 1, "stage": "sft"}])
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
    refresh(con, lake)
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(2,)]


def test_empty_lake_has_typed_empty_views(lake: Lake) -> None:
    con = connect(lake)
    for table in TABLES:
        assert con.execute(f"SELECT count(*) FROM {table}").fetchall() == [(0,)]
    types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE trajectories)").fetchall())
    assert types["input_tokens"] == "BIGINT"
    assert types["dt"] == "DATE"
    assert count(lake, "SELECT count(*) FROM messages") == 0


def test_a_table_created_before_a_column_existed_stays_readable(lake: Lake) -> None:
    # A table written by an older schema (no `status`, `has_content` yet), by plain delta-rs.
    from deltalake import write_deltalake

    old = pa.table(
        {
            "trajectory_id": ["old-1"],
            "source": ["otel"],
            "started_at": pa.array([T0], pa.timestamp("us", tz="UTC")),
            "model": ["m0"],
            "dt": pa.array([T0.date()], pa.date32()),
        }
    )
    write_deltalake(lake.table_uri("trajectories"), old, partition_by=["dt"])
    write(lake, "trajectories", [make_traj(1)])  # adds the missing columns to the table
    con = connect(lake)
    assert con.execute("SELECT trajectory_id, model, status FROM trajectories ORDER BY 1").fetchall() == [
        ("old-1", "m0", None),
        ("t1", "m1", None),
    ]
    assert scan(lake, "trajectories").select("trajectory_id").collect().height == 2


def test_plain_delta_readers_see_exactly_the_views(lake: Lake) -> None:
    from deltalake import DeltaTable

    write(lake, "trajectories", synthetic_trajectories(30, seed=1))
    write(lake, "trajectories", next(synthetic_trajectories(10, seed=1)))  # re-sent: replaced, not added
    write(lake, "rewards", synthetic_rewards(30, seed=1))
    write(lake, "scenarios", synthetic_scenarios(200, seed=1))
    write(lake, "spans", [{"trace_id": "a" * 32, "span_id": "b" * 16, "source": "otel", "start_time": T0}])
    write(lake, "runs", [{"run_id": "r", "step": 0, "stage": "sft"}])
    write(lake, "adapters", [{"name": "a", "version": 1, "path": "/x", "stages": ["sft"]}])
    write(
        lake,
        "adapters",
        [{"name": "a", "version": 1, "path": "/x", "stages": ["sft"], "aliases": ["latest"]}],
    )
    write(lake, "watermarks", [{"source": "langfuse", "scope": "s", "updated_at": T0}])
    write(
        lake,
        "ingest_errors",
        [{"trace_id": "a" * 32, "stage": "assemble", "status": "failed", "occurred_at": T0}],
    )
    write(lake, "erasures", [{"erasure_id": "e", "reason": "forget", "requested_at": T0}])
    write(
        lake,
        "labels",
        [{"trajectory_id": "t", "name": "expected", "expected": '"4"', "source": "file", "labeled_at": T0}],
    )

    def check() -> None:
        con = connect(lake)
        for table in TABLES:
            key = ", ".join(table_spec(table).key)
            view = sorted(con.execute(f"SELECT {key} FROM {table}").fetchall())
            plain = DeltaTable(lake.table_uri(table)).to_pyarrow_table(columns=list(table_spec(table).key))
            assert sorted(tuple(r.values()) for r in plain.to_pylist()) == view, table
            polars = scan(lake, table).select(list(table_spec(table).key)).collect().rows()
            assert sorted(polars) == view and len(view) == len(set(view)) > 0, table

    check()
    write(lake, "rewards", next(synthetic_rewards(10, seed=1)))  # re-scored: replaced
    compact(lake, CompactConfig(retention_hours=0))
    check()


def test_point_lookup_reads_through_the_view(lake: Lake) -> None:
    write(lake, "trajectories", synthetic_trajectories(500, seed=2))
    con = connect(lake)
    rows = con.execute(
        "SELECT trajectory_id, len(messages) FROM trajectories WHERE trajectory_id = 'traj-2-000000123'"
    )
    (row,) = rows.fetchall()
    assert row[0] == "traj-2-000000123" and row[1] >= 3


def test_latest_rewards_takes_the_newest_successful_score_across_scorers(lake: Lake) -> None:
    from datetime import timedelta

    rows = [
        {"trajectory_id": "a", "name": "r", "scorer": "s1", "value": 0.1, "scored_at": T0},
        {
            "trajectory_id": "a",
            "name": "r",
            "scorer": "s2",
            "value": 0.2,
            "scored_at": T0 + timedelta(hours=1),
        },
        {
            "trajectory_id": "a",
            "name": "r",
            "scorer": "s3",
            "value": None,
            "scored_at": T0 + timedelta(hours=2),
            "status": "failed",
        },
        {"trajectory_id": "b", "name": "r", "scorer": "s1", "value": 0.5, "scored_at": T0},
    ]
    write(lake, "rewards", rows)
    con = connect(lake)
    assert con.execute("SELECT trajectory_id, scorer, value FROM latest_rewards ORDER BY 1").fetchall() == [
        ("a", "s2", 0.2),
        ("b", "s1", 0.5),
    ]


def test_policy_performance_attributes_served_adapters_per_day(lake: Lake) -> None:
    served = served_adapter_name("calc", 2)
    rows = [make_traj(i, model="prod-llm", policy="prod-llm") for i in range(4)]
    rows += [make_traj(10 + i, model=served, policy=served, day=1) for i in range(3)]
    rows += [make_traj(20, model="prod-llm", policy="prod-llm", day=1)]
    rows += [make_traj(30, model=served, policy=served, source="replay")]  # replays are not production
    write(lake, "trajectories", rows)
    feedback = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1.0, 10: 1.0, 11: 1.0, 12: 1.0, 20: 0.0, 30: 0.0}
    write(
        lake,
        "rewards",
        [
            {"trajectory_id": f"t{i}", "name": "user_feedback", "scorer": "user", "value": v, "scored_at": T0}
            for i, v in feedback.items()
        ],
    )
    write(lake, "adapters", [{"name": "calc", "version": 2, "path": "/r/calc/v2", "aliases": ["production"]}])
    got = (
        connect(lake)
        .execute(
            "SELECT policy, adapter, adapter_version, name, day::DATE::VARCHAR, trajectories, mean "
            "FROM policy_performance ORDER BY day, policy"
        )
        .fetchall()
    )
    assert got == [
        ("prod-llm", None, None, "user_feedback", "2026-11-20", 4, 0.75),
        ("calc-v2", "calc", 2, "user_feedback", "2026-11-21", 3, 1.0),
        ("prod-llm", None, None, "user_feedback", "2026-11-21", 1, 0.0),
    ]
