"""`forget` while two real collector processes take traffic and a reader queries the lake.

Every span the collectors acknowledged must be in the lake at the end, exactly once; the
erased user's spans and conversations must be in no file; readers keep answering.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import UTC, datetime

import httpx

import store
from flows.stages.forget import carry_out, plan
from store.erasure import ErasureSelection
from store.erasure_check import files_holding
from tests.ingest.fake_openai import free_port
from tests.ingest.test_collectors_together import body_trace_id
from tests.ingest.test_durability import random_request, start

USER = "user-forgotten-under-load"
T0 = datetime(2026, 11, 20, tzinfo=UTC)


def _users_data(lake: store.Lake) -> None:
    for batch in range(3):
        traces = [f"{batch:02x}{i:030x}" for i in range(5)]
        store.write(
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
        store.write(
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


def test_forget_under_collector_load_loses_nothing_acknowledged(lake: store.Lake) -> None:
    _users_data(lake)
    ports = [free_port(), free_port()]
    processes = [start(lake, port) for port in ports]
    acknowledged: set[tuple[str, str]] = set()
    problems: list[str] = []
    reads = [0]
    lock = threading.Lock()
    stop = threading.Event()

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

    def reader() -> None:
        while not stop.is_set():
            try:
                con = store.connect(lake)
                con.execute("SELECT count(*) FROM spans").fetchall()
                con.close()
                reads[0] += 1
            except Exception as exc:  # a reader failing is what the test looks for
                problems.append(f"reader: {type(exc).__name__}: {exc}")
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(port,)) for port in ports]
    threads.append(threading.Thread(target=reader))
    for thread in threads:
        thread.start()
    time.sleep(2)  # the collectors are committing when forget starts
    erasure, _ = plan(lake, ErasureSelection("user_id", USER))
    report = carry_out(lake, erasure)
    time.sleep(2)  # and keep committing after it
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    for process in processes:
        process.send_signal(signal.SIGTERM)  # a graceful stop flushes what is spooled
        assert process.wait(timeout=120) == 0

    assert report.verified and sum(t.rows_deleted for t in report.tables) == 30
    assert not problems, problems[:5]
    stored = store.connect(lake).execute("SELECT trace_id, span_id FROM spans").fetchall()
    assert len(stored) == len(set(stored))
    missing = acknowledged - set(stored)
    assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged spans lost"
    assert len(acknowledged) > 100 and reads[0] > 3
    assert files_holding(lake, [USER, "forget me please"]) == []
