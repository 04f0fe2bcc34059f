"""`forget` while two real collector processes take traffic and readers open the lake.

Every span the collectors acknowledged must be in the lake at the end, exactly once; the
erased user's spans and conversations must be in no file, those the user sent while the
erasure was starting included (one run finishes the job, and its audit row counts every
pass); readers keep answering.

The readers are separate processes opening the tables with delta-rs (`DeltaTable`, where a
native crash was once seen while `forget` rewrote) and querying through `store.catalog.connection.connect`: a
reader killed by a signal fails the test, naming it. This file carries no marker, so CI's
`pytest -m "not vllm"` runs it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from flows.stages.forget import carry_out, plan
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.erasure.plan import ErasureSelection, identity_rows
from store.erasure.verify import files_holding
from store.lake import Lake
from store.writer import write
from tests.ingest.fake_openai import free_port
from tests.reliability.test_collectors_together import body_trace_id
from tests.reliability.test_durability import ROOT, random_request, start

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

USER = "user-forgotten-under-load"
T0 = datetime(2026, 11, 20, tzinfo=UTC)

# A reader process: delta-rs opens and DuckDB queries in a loop until the stop file exists. A
# query that meets a file an erasure just vacuumed may fail once and succeeds when run again
# (the README's guarantee); one that fails three times running is a problem. Prints its counts.
READER = r"""
import json, os, sys, time
from deltalake import DeltaTable
from store.catalog.connection import connect
from store.lake import Lake

lake, stop = Lake(sys.argv[1]), sys.argv[2]
counts, problems = {"opens": 0, "queries": 0}, []

def again(work, name):
    for attempt in range(3):
        try:
            work()
            counts[name] += 1
            return
        except Exception as exc:
            if attempt == 2:
                problems.append(f"{name}: {type(exc).__name__}: {exc}")
            time.sleep(0.05)

def query():
    con = connect(lake)
    try:
        con.execute("SELECT count(*) FROM spans").fetchall()
    finally:
        con.close()

while not os.path.exists(stop):
    for table in ("spans", "trajectories"):
        again(lambda: DeltaTable(lake.table_uri(table)).version(), "opens")
    again(query, "queries")
print(json.dumps({**counts, "problems": problems[:5]}))
"""


def _reader(lake: Lake, stop: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", READER, lake.root, str(stop)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _reader_result(process: subprocess.Popen[bytes]) -> dict[str, object]:
    """The reader's counts; a reader that crashed (a signal: a native segfault, an abort) or
    failed is an assertion error with its stderr, never a skip."""
    out, err = process.communicate(timeout=120)
    assert process.returncode >= 0, (
        f"a reader was killed by signal {-process.returncode} while forget ran:\n{err.decode()[-3000:]}"
    )
    assert process.returncode == 0, f"a reader failed (exit {process.returncode}):\n{err.decode()[-3000:]}"
    result: dict[str, object] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def _users_request(seq: int) -> tuple[bytes, list[str]]:
    """A request of the erased user's spans (`user.id`), as their client sends them."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    trace = bytes.fromhex(f"ee{seq:030x}")
    now = time.time_ns()
    ids = []
    for i in range(3):
        span = scope.spans.add()
        span.trace_id, span.span_id = trace, bytes.fromhex(f"{seq:08x}{i:08x}")
        span.name = f"user step {i}"
        span.start_time_unix_nano, span.end_time_unix_nano = now, now + 1000
        if i == 0:  # the root names the user; its children belong to the trace all the same
            attr = span.attributes.add()
            attr.key, attr.value.string_value = "user.id", USER
        attr = span.attributes.add()
        attr.key, attr.value.string_value = "gen_ai.prompt", "forget me please"
        ids.append(span.span_id.hex())
    return request.SerializeToString(), ids


def _users_data(lake: Lake) -> None:
    for batch in range(3):
        traces = [f"{batch:02x}{i:030x}" for i in range(5)]
        write(
            lake,
            "spans",
            [
                {
                    "trace_id": t,
                    "span_id": f"{i:016x}",
                    "source": "otel",
                    "start_time": T0,
                    "attributes": json.dumps({"user.id": USER, "gen_ai.prompt": "forget me please"}),
                }
                for i, t in enumerate(traces)
            ],
        )
        write(
            lake,
            "trajectories",
            [
                {
                    "trajectory_id": f"traj-{t}",
                    "trace_id": t,
                    "user_id": USER,
                    "source": "otel",
                    "started_at": T0,
                    "messages": [{"role": "user", "content": "forget me please"}],
                }
                for t in traces
            ],
        )


def test_forget_under_collector_load_loses_nothing_acknowledged(lake: Lake, tmp_path: Path) -> None:
    _users_data(lake)
    ports = [free_port(), free_port()]
    processes = [start(lake, port) for port in ports]
    stop_file = tmp_path / "stop-readers"
    readers = [_reader(lake, stop_file) for _ in range(2)]
    acknowledged: set[tuple[str, str]] = set()
    users_acknowledged: set[tuple[str, str]] = set()
    problems: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    users_stop = threading.Event()  # the user's client stops once the erasure has begun

    def client(port: int) -> None:
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                body, ids = random_request(10)
                response = http.post(
                    f"http://127.0.0.1:{port}/v1/traces",
                    content=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                if response.status_code == 200:
                    with lock:
                        acknowledged.update((body_trace_id(body), span) for span in ids)
                elif response.status_code != 503:
                    problems.append(f"HTTP {response.status_code}: {response.text[:200]}")

    def users_client() -> None:
        seq = 0
        with httpx.Client(timeout=30) as http:
            while not users_stop.is_set():
                seq += 1
                body, ids = _users_request(seq)
                response = http.post(
                    f"http://127.0.0.1:{ports[seq % 2]}/v1/traces",
                    content=body,
                    headers={"Content-Type": "application/x-protobuf"},
                )
                if response.status_code == 200:
                    with lock:
                        users_acknowledged.update((body_trace_id(body), span) for span in ids)
                time.sleep(0.05)

    threads = [threading.Thread(target=client, args=(port,)) for port in ports]
    threads.append(threading.Thread(target=users_client))
    for thread in threads:
        thread.start()
    time.sleep(2)  # the collectors are committing when forget starts
    erasure, _ = plan(lake, ErasureSelection("user_id", USER))
    time.sleep(1)  # the user's spans keep arriving after the plan was made

    def step(name: str) -> None:
        if name == "spools":
            users_stop.set()

    report = carry_out(lake, erasure, on_step=step)
    time.sleep(2)  # and the collectors keep committing after it
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    for process in processes:
        process.send_signal(signal.SIGTERM)  # a graceful stop flushes what is spooled
        assert process.wait(timeout=120) == 0
    stop_file.touch()
    reads = [_reader_result(reader) for reader in readers]

    assert report.verified
    # every span of the user that was acknowledged went, in this one run, and the audit says so
    deleted = {t.table: t.rows_deleted for t in report.tables}
    assert deleted["trajectories"] == 15 and deleted["spans"] == 15 + len(users_acknowledged)
    audit = connect(lake).execute("SELECT rows, files_rewritten FROM erasures").fetchall()
    assert len(audit) == 1 and json.loads(audit[0][0]) == deleted
    assert audit[0][1] == report.files_rewritten > 0
    assert identity_rows(lake, snapshot(lake), "user_id", USER) == {"trajectories": 0, "spans": 0}
    assert not problems, problems[:5]
    for read in reads:
        assert not read["problems"], read
        assert int(str(read["opens"])) > 10 and int(str(read["queries"])) > 3, read
    stored = connect(lake).execute("SELECT trace_id, span_id FROM spans").fetchall()
    assert len(stored) == len(set(stored))
    missing = acknowledged - set(stored)
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"
    assert len(acknowledged) > 100 and len(users_acknowledged) > 3
    assert files_holding(lake, [USER, "forget me please"]) == []
