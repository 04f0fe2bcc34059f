"""Assembly into the lake: deterministic rows in the lake's schemas, `trajlake assemble` and
`ingest.lakeio.rebuild` (batches, filters, `--since` across midnight), a trace that breaks
assembly recorded in `ingest_errors` without stopping the others.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from typer.testing import CliRunner

import ingest.assembly.traces as traces
from flows.cli import app as cli_app
from ingest.assembly import assemble
from ingest.lakeio import rebuild
from store.catalog.connection import connect
from store.lake import Lake
from store.schema import REWARDS, TRAJECTORIES
from store.writer import write
from tests.ingest.span_rows import agent, chat, spans_table, text


def test_assembly_is_deterministic_and_in_the_lake_schemas(lake: Lake) -> None:
    rows = [
        agent("a" * 16, None, "bot", 0),
        chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), 1),
        chat(
            "c" * 16,
            "a" * 16,
            [text("user", "q"), text("assistant", "a"), text("user", "q2")],
            text("assistant", "a2"),
            2,
        ),
    ]
    first = assemble(spans_table(rows))
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    second = assemble(spans_table(shuffled))
    assert first.trajectories.equals(second.trajectories) and first.rewards.equals(second.rewards)
    assert first.trajectories.schema == TRAJECTORIES.schema and first.rewards.schema == REWARDS.schema

    # `trajlake assemble` rebuilds the same rows from the stored spans.
    write(lake, "spans", spans_table(rows))
    result = CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "1 trajectories" in result.stdout
    stored = connect(lake).sql("SELECT * EXCLUDE (_written_at) FROM trajectories").to_arrow_table()
    expected = first.trajectories.drop_columns(["_written_at"])
    assert stored.to_pylist() == expected.to_pylist()


def test_rebuild_streams_traces_in_batches_and_filters(lake: Lake) -> None:
    rows = []
    for n in range(5):
        trace = f"{n:032x}"
        rows += [
            {**agent("a" * 16, None, f"bot{n}", n), "trace_id": trace},
            {
                **chat("b" * 16, "a" * 16, [text("user", f"q{n}")], text("assistant", "a"), n),
                "trace_id": trace,
            },
        ]
    write(lake, "spans", spans_table(rows))
    done: list[int] = []
    result = rebuild(lake, chunk_rows=4, progress=done.append)
    assert (result.traces, result.trajectories) == (5, 5) and done[-1] == 5 and len(done) > 1
    names = connect(lake).sql("SELECT agent_name FROM trajectories ORDER BY 1").fetchall()
    assert [n for (n,) in names] == [f"bot{n}" for n in range(5)]
    only = CliRunner().invoke(
        cli_app, ["assemble", "--lake", lake.root, "--trace-id", f"{3:032x}", "--since", "2026-11-20"]
    )
    assert only.exit_code == 0 and "assembled 1 traces" in only.stdout


def test_rebuild_since_reads_whole_traces_that_cross_midnight(lake: Lake) -> None:
    # The agent span starts on 2026-11-19, its LLM call on 2026-11-20 (partition `dt` follows start_time).
    before_midnight, after_midnight = -12 * 3600 - 10, -12 * 3600 + 10
    rows = [
        agent("a" * 16, None, "bot", before_midnight),
        chat("b" * 16, "a" * 16, [text("user", "q")], text("assistant", "a"), after_midnight),
    ]
    write(lake, "spans", spans_table(rows))
    full = assemble(spans_table(rows)).trajectories.drop_columns(["_written_at"]).to_pylist()

    result = rebuild(lake, since=datetime(2026, 11, 20, tzinfo=UTC).date())
    assert (result.traces, result.trajectories) == (1, 1)
    stored = connect(lake).sql("SELECT * EXCLUDE (_written_at) FROM trajectories").to_arrow_table()
    assert stored.to_pylist() == full  # not a trajectory rebuilt from the later half alone
    assert full[0]["agent_name"] == "bot"


def test_a_trace_that_breaks_assembly_is_recorded_and_stops_no_other(lake: Lake, monkeypatch: Any) -> None:
    bad = f"{99:032x}"
    real = traces.normalize_span

    def fragile(
        span: dict[str, Any], memo: Any = None
    ) -> Any:  # a shape no normaliser expected, in one trace only
        if span["trace_id"] == bad:
            raise ValueError("dictionary update sequence element #0 has length 1; 2 is required")
        return real(span, memo)

    monkeypatch.setattr(traces, "normalize_span", fragile)
    rows = []
    for n in (1, 99, 2):
        trace = f"{n:032x}"
        rows += [
            {**agent("a" * 16, None, f"bot{n}", n), "trace_id": trace},
            {
                **chat("b" * 16, "a" * 16, [text("user", f"q{n}")], text("assistant", "a"), n),
                "trace_id": trace,
            },
        ]
    write(lake, "spans", spans_table(rows))
    result = CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "3 traces -> 2 trajectories" in result.stdout and "1 traces failed to assemble" in result.stdout
    con = connect(lake)
    assert sorted(r[0] for r in con.execute("SELECT agent_name FROM trajectories").fetchall()) == [
        "bot1",
        "bot2",
    ]
    (failure,) = con.execute(
        "SELECT trace_id, stage, status, error_class, reason, detail, span_count FROM ingest_errors"
    ).fetchall()
    assert failure[:4] == (bad, "assemble", "failed", "ValueError")
    assert failure[4] == "value_error" and failure[6] == 2
    assert "dictionary update sequence" in failure[5] and "fragile" in failure[5]
    assert con.execute(f"SELECT count(*) FROM spans WHERE trace_id = '{bad}'").fetchall() == [(2,)]

    monkeypatch.setattr(traces, "normalize_span", real)  # the normaliser is fixed: the trace goes through
    CliRunner().invoke(cli_app, ["assemble", "--lake", lake.root, "--trace-id", bad])
    con = connect(lake)
    assert con.execute("SELECT status FROM ingest_errors").fetchall() == [("resolved",)]
    assert con.execute(f"SELECT count(*) FROM trajectories WHERE trace_id = '{bad}'").fetchall() == [(1,)]
