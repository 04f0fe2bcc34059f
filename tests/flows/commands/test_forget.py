"""`trajlake forget` through the real CLI, on a lake where one user is in every table and every copy.

The acceptance test: after `forget --user-id U`, a byte scan of every file under the lake
(Parquet decoded, Delta logs and checkpoints, the spool, the judge cache) finds none of
U's ids or texts; the other users' rows are unchanged; the audit row exists; the adapters
trained on U's data are marked.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from flows.cli import app
from ingest.otlp.spool import encode_table, frame
from judging.ruler.cache import JudgeCache
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.erasure.plan import ErasureSelection, plan_erasure
from store.erasure.retention import RetentionConfig
from store.erasure.verify import files_holding
from store.errors import StoreError
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from training.registry import adapter_rows

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

runner = CliRunner()
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
USER = "user-erase-me-7"
SECRET = "my card number is 4111-erase"


def _trace(user: int, conversation: int) -> str:
    return f"{user:04x}{conversation:028x}"


def _conversation(user: str, u: int, c: int) -> dict[str, Any]:
    secret = f"{SECRET} {c}" if user == USER else f"ordinary question {u}-{c}"
    return {
        "trajectory_id": f"traj-{user}-{c}",
        "trace_id": _trace(u, c),
        "session_id": f"session-{user}-{c // 2}",
        "user_id": user,
        "source": "otel",
        "started_at": T0 + timedelta(days=c % 3, seconds=u),
        "messages": [
            {"role": "user", "content": secret},
            {"role": "assistant", "content": f"answer to {secret}"},
        ],
        "final_output": f"answer to {secret}",
    }


def _span(user: str, u: int, c: int) -> dict[str, Any]:
    return {
        "trace_id": _trace(u, c),
        "span_id": f"{c:016x}",
        "source": "otel",
        "name": "chat",
        "start_time": T0 + timedelta(days=c % 3, seconds=u),
        "attributes": json.dumps(
            {"user.id": user, "gen_ai.prompt": f"{SECRET} {c}" if user == USER else "hi"}
        ),
    }


@pytest.fixture
def full_lake(lake: Lake) -> Lake:
    """Three users over several commits; USER also in scenarios, replays, rewards, ingest_errors,
    a dead collector's spool, the judge cache and two adapters' lineage."""
    users = [(USER, 1), ("user-keep-a", 2), ("user-keep-b", 3)]
    for c in range(4):  # one commit per round: many files and log entries hold USER's ids
        write(lake, "trajectories", [_conversation(name, u, c) for name, u in users])
        write(lake, "spans", [_span(name, u, c) for name, u in users])
    write(
        lake,
        "rewards",
        [
            {
                "trajectory_id": f"traj-{name}-{c}",
                "name": "thumbs",
                "scorer": "user",
                "value": 1.0,
                "explanation": f"feedback on {name}",
                "scored_at": T0,
            }
            for name, _ in users
            for c in range(4)
        ],
    )
    # A trace of USER that never assembled: its span names the user, its failure is recorded.
    write(lake, "spans", [_span(USER, 1, 99)])
    write(
        lake,
        "ingest_errors",
        [
            {
                "trace_id": _trace(1, 99),
                "stage": "assemble",
                "status": "failed",
                "reason": "key_error",
                "detail": f"failed on {SECRET}",
                "occurred_at": T0,
            }
        ],
    )
    write(
        lake,
        "scenarios",
        [
            {
                "scenario_id": f"scen-{name}",
                "messages": [
                    {"role": "user", "content": _conversation(name, u, 0)["messages"][0]["content"]}
                ],
                "split": "train",
                "source_trajectory_id": f"traj-{name}-0",
                "created_at": T0,
            }
            for name, u in users
        ],
    )
    replays = [
        {
            "trajectory_id": f"replay-{name}-{k}",
            "source": "replay",
            "scenario_id": f"scen-{name}",
            "group_id": f"group-{name}",
            "started_at": T0,
            "messages": [{"role": "user", "content": _conversation(name, u, 0)["messages"][0]["content"]}],
        }
        for name, u in users
        for k in range(2)
    ]
    write(lake, "trajectories", replays)
    write(
        lake,
        "rewards",
        [
            {
                "trajectory_id": r["trajectory_id"],
                "name": "ruler",
                "scorer": "judge",
                "value": 0.5,
                "group_id": r["group_id"],
                "scored_at": T0,
            }
            for r in replays
        ],
    )
    cache = JudgeCache(lake)
    for name, _ in users:
        cache.put(
            f"{name}key".encode().hex(),
            {
                "group_id": f"group-{name}",
                "verdicts": {
                    f"replay-{name}-0": {"score": 0.5, "explanation": f"the reply about {name}'s question"}
                },
            },
        )
    # A collector that died with USER's (and another user's) spans in its spool.
    spool = lake.root + "/_spool/c-0000"
    import os

    os.makedirs(spool)
    rows = pa.Table.from_pylist([_span(USER, 1, 50), _span("user-keep-a", 2, 50)])
    with open(f"{spool}/seg-000001.wal", "wb") as handle:
        handle.write(frame(encode_table(rows)))
    snap = snapshot(lake)
    versions = {t: {"version": snap[t].version} for t in ("trajectories", "rewards", "scenarios")}
    adapter = {"path": "/nowhere", "base_model": "tiny", "stages": ["sft"], "aliases": []}
    write(
        lake,
        "adapters",
        [
            {
                **adapter,
                "name": "all-users",
                "version": 1,
                "data": json.dumps(
                    [
                        {
                            "sql": "SELECT trajectory_id FROM trajectories WHERE source = 'otel'",
                            "table_versions": versions,
                        }
                    ]
                ),
            },
            {
                **adapter,
                "name": "others",
                "version": 1,
                "data": json.dumps(
                    [
                        {
                            "sql": "SELECT trajectory_id FROM trajectories WHERE user_id = 'user-keep-a'",
                            "table_versions": versions,
                        }
                    ]
                ),
            },
        ],
    )
    return lake


def _others(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    con = connect(lake)
    out = {}
    for table, where in {
        "trajectories": f"user_id IS DISTINCT FROM '{USER}' AND trajectory_id NOT LIKE 'replay-{USER}%'",
        "spans": f"NOT contains(attributes, '{USER}')",
        "rewards": f"trajectory_id NOT LIKE '%{USER}%'",
        "scenarios": f"scenario_id <> 'scen-{USER}'",
    }.items():
        out[table] = (
            con.sql(f"SELECT * EXCLUDE (_written_at) FROM {table} WHERE {where} ORDER BY ALL")
            .to_arrow_table()
            .to_pylist()
        )
    return out


def test_forget_user_leaves_no_copy_anywhere_and_keeps_everyone_else(full_lake: Lake) -> None:
    lake = full_lake
    needles = [
        USER,
        SECRET,
        f"traj-{USER}",
        f"replay-{USER}",
        f"scen-{USER}",
        f"group-{USER}",
        _trace(1, 0)[:12],
    ]
    before = _others(lake)
    assert files_holding(lake, needles)  # the fixture really spread USER everywhere

    dry = runner.invoke(app, ["forget", "--user-id", USER, "--lake", lake.root])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and "all-users:1" in dry.output
    assert "1 judge cache entries, 1 rows in collectors' spools" in dry.output
    assert files_holding(lake, needles)  # a dry run changes nothing

    done = runner.invoke(
        app, ["forget", "--user-id", USER, "--yes", "--by", "dpo@example", "--lake", lake.root]
    )
    assert done.exit_code == 0, done.output
    assert "erased and checked" in done.output

    assert files_holding(lake, needles) == []
    assert _others(lake) == before
    con = connect(lake)
    audit = con.sql("SELECT * FROM erasures").to_arrow_table().to_pylist()
    assert len(audit) == 1 and audit[0]["requested_by"] == "dpo@example"
    assert audit[0]["selection_kind"] == "user_id" and audit[0]["selection_digest"].startswith("sha256:")
    assert json.loads(audit[0]["rows"])["trajectories"] == 6  # 4 conversations + 2 replays
    assert audit[0]["verified"] and audit[0]["adapters"] == ["all-users:1"]
    marked = {(r["name"], bool(r["trained_on_erased_data"])) for r in adapter_rows(lake)}
    assert marked == {("all-users", True), ("others", False)}
    # the other user's spool rows are still there, waiting for a collector to flush them
    assert files_holding(lake, ["user-keep-a"], [lake.root + "/_spool/c-0000/seg-000001.wal"])


def test_time_travel_before_an_erasure_says_the_data_is_gone(full_lake: Lake) -> None:
    old = snapshot(full_lake)["trajectories"].version
    done = runner.invoke(app, ["forget", "--user-id", USER, "--yes", "--lake", full_lake.root])
    assert done.exit_code == 0, done.output
    with pytest.raises(StoreError, match="erased"):
        snapshot(full_lake, {"trajectories": old})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user-id", "a", "--session-id", "b"], "exactly one"),
        ([], "exactly one"),
        (["--where", "no_such_column = 1"], "--where"),
        (["--where", "true; DELETE FROM trajectories"], "--where"),
        (["--user-id", " "], "is empty"),
    ],
)
def test_bad_selections_exit_2_and_erase_nothing(full_lake: Lake, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["forget", *args, "--yes", "--lake", full_lake.root])
    assert result.exit_code == 2 and message in result.output
    assert files_holding(full_lake, [USER])


KILLED_MIDWAY = """
import os, signal, sys
from store.lake import Lake
from store.erasure.apply import delete_rows, save_pending
from store.erasure.plan import ErasureSelection, plan_erasure

lake = Lake(sys.argv[1])
plan = plan_erasure(lake, ErasureSelection("user_id", sys.argv[2]))
save_pending(lake, plan)
delete_rows(lake, plan.targets["rewards"])
delete_rows(lake, plan.targets["trajectories"])  # the roots are gone: a new plan could not find the spans
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_forget_killed_midway_is_finished_by_the_next_run(full_lake: Lake) -> None:
    import subprocess
    import sys

    killed = subprocess.run(
        [sys.executable, "-c", KILLED_MIDWAY, full_lake.root, USER],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    assert files_holding(full_lake, [USER, SECRET])  # spans, old versions, spool, cache still hold them

    again = runner.invoke(app, ["forget", "--user-id", USER, "--yes", "--lake", full_lake.root])
    assert again.exit_code == 0, again.output
    assert "finished the interrupted erasure" in again.output
    assert files_holding(full_lake, [USER, SECRET, f"traj-{USER}", f"replay-{USER}"]) == []
    assert not list(Path(full_lake.root, "_erasure").glob("*.json"))
    con = connect(full_lake)
    assert con.sql("SELECT count(*) FROM erasures WHERE verified").fetchall()[0][0] == 1


def test_retention_erases_old_production_data_and_keeps_recent(lake: Lake) -> None:
    from flows.stages.forget import apply_retention

    now = utc_now()
    old, recent = now - timedelta(days=40), now - timedelta(days=2)
    rows = [
        {**_conversation(f"user-{i}", i, 0), "started_at": when, "trajectory_id": f"traj-{i}"}
        for i, when in ((1, old), (2, recent))
    ]
    write(lake, "trajectories", rows)
    spans = [
        {**_span("user-1", 1, 0), "start_time": old},
        {**_span("user-3", 3, 7), "start_time": old},
        {**_span("user-2", 2, 0), "start_time": recent},
    ]
    write(lake, "spans", spans)

    report = apply_retention(lake, RetentionConfig(production_days=30))
    assert report is not None and report.verified
    con = connect(lake)
    assert con.sql("SELECT trajectory_id FROM trajectories").fetchall() == [("traj-2",)]
    # the span of a trace that never assembled ages out as well
    assert con.sql("SELECT trace_id FROM spans").fetchall() == [(_trace(2, 0),)]
    assert con.sql("SELECT reason, selection_kind FROM erasures").fetchall() == [("retention", "older_than")]
    assert files_holding(lake, ["user-1", "user-3", _trace(1, 0), _trace(3, 7)]) == []
    assert apply_retention(lake, RetentionConfig(production_days=0)) is None


def test_compact_after_forget_keeps_working(full_lake: Lake) -> None:
    done = runner.invoke(app, ["forget", "--user-id", USER, "--yes", "--lake", full_lake.root])
    assert done.exit_code == 0, done.output
    compacted = runner.invoke(app, ["compact", "--lake", full_lake.root])
    assert compacted.exit_code == 0, compacted.output
    assert files_holding(full_lake, [USER, SECRET]) == []


def test_the_scheduled_ingest_flow_applies_retention(lake: Lake, tmp_path: Path, prefect_api: None) -> None:
    from flows.prefect_flows import ingest_flow

    now = utc_now()
    write(
        lake,
        "trajectories",
        [
            {
                **_conversation("user-old", 1, 0),
                "trajectory_id": "old",
                "started_at": now - timedelta(days=10),
            },
            {
                **_conversation("user-new", 2, 0),
                "trajectory_id": "new",
                "started_at": now - timedelta(hours=1),
            },
        ],
    )
    config = tmp_path / "trajlake.toml"
    config.write_text("[retention]\nproduction_days = 7\n")
    counts = ingest_flow(config_file=str(config), lake=lake.root)
    assert counts["retention_erased_trajectories"] == 1
    assert connect(lake).sql("SELECT trajectory_id FROM trajectories").fetchall() == [("new",)]
    assert files_holding(lake, ["user-old"]) == []


def test_a_where_condition_selects_only_trajectories_the_lake_holds(full_lake: Lake) -> None:
    smuggled = f"user_id = '{USER}') UNION SELECT 'not-a-trajectory', 'x' FROM (SELECT 1"
    erasure = plan_erasure(full_lake, ErasureSelection("where", smuggled))
    assert erasure.rows["trajectories"] == 6 and "not-a-trajectory" not in erasure.needles
