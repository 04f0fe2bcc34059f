"""A stand-in Langfuse server: the public read API the SDK v5 uses, over loopback HTTP.

`StandinLangfuse` is the in-memory project (traces, observations, scores), seeded with
`add_trace`, `add_observation` and `add_score` (a tool-using agent's run:
`agent_traces.seed_agent_trace`); `serve` runs it on a free loopback port. What it speaks
(`/api/public/v2/observations`, `/api/public/v3/scores`, `/api/public/health`) is in
`standin_routes.py`.

Faults for tests: `fail_next(path, status, times, retry_after)` answers the next
requests with an error; `outage_after(path, pages)` turns every request into a 503
after that many good pages until `restore()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import uvicorn

from tests.ingest.langfuse.standin_routes import StandinRoutes

PROJECT = "proj-standin"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Fault:
    path: str
    status: int
    times: int
    retry_after: str | None = None


@dataclass
class StandinLangfuse(StandinRoutes):
    """In-memory Langfuse project with the read endpoints the puller uses."""

    public_key: str = "pk-lf-standin"
    secret_key: str = "sk-lf-standin"
    traces: dict[str, dict[str, Any]] = field(default_factory=dict)
    observations: list[dict[str, Any]] = field(default_factory=list)
    scores: list[dict[str, Any]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any], int]] = field(default_factory=list)
    outage: dict[str, int] = field(default_factory=dict)  # path -> good pages left before the outage
    delay_s: float = 0.0  # per observations page, to let a test kill a slow pull mid-way
    cursor_epoch: int = 0  # bump to expire every cursor handed out so far
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- seeding -------------------------------------------------------------------------

    def add_trace(self, trace_id: str, **fields: Any) -> None:
        """Trace-level context: name, tags, userId, sessionId, environment, release."""
        self.traces[trace_id] = {"id": trace_id, **fields}

    def add_observation(self, **obs: Any) -> dict[str, Any]:
        trace = self.traces.get(obs["traceId"], {})
        now = datetime.now(UTC)
        stored = {
            "projectId": PROJECT,
            "environment": trace.get("environment", "default"),
            "level": "DEFAULT",
            "createdAt": iso(now),
            "updatedAt": iso(now),
            "isRootObservation": obs.get("parentObservationId") is None,
            "userId": trace.get("userId"),
            "sessionId": trace.get("sessionId"),
            "traceName": trace.get("name"),
            "tags": trace.get("tags", []),
            "release": trace.get("release"),
            **obs,
        }
        with self.lock:
            self.observations.append(stored)
        return stored

    def add_score(self, **score: Any) -> None:
        now = iso(datetime.now(UTC))
        with self.lock:
            self.scores.append(
                {
                    "projectId": PROJECT,
                    "source": "API",
                    "environment": "default",
                    "createdAt": now,
                    "updatedAt": now,
                    **score,
                }
            )

    def export_traces(self) -> list[dict[str, Any]]:
        """The project as `TraceWithFullDetails` records (what an older SDK's export holds):
        input/output as JSON values, trace context on the trace, v1-shaped scores."""
        out = []
        for trace_id, trace in self.traces.items():
            observations = []
            for obs in self.observations:
                if obs["traceId"] != trace_id:
                    continue
                legacy = {
                    k: v
                    for k, v in obs.items()
                    if k not in ("userId", "sessionId", "traceName", "tags", "release", "isRootObservation")
                }
                observations.append(legacy)
            scores = []
            for s in self.scores:
                subject = s.get("subject") or {}
                if subject.get("id") != trace_id and subject.get("traceId") != trace_id:
                    continue
                v1 = {k: v for k, v in s.items() if k != "subject"}
                v1["traceId"] = trace_id
                if subject.get("kind") == "observation":
                    v1["observationId"] = subject["id"]
                if s["dataType"] in ("CATEGORICAL", "TEXT"):
                    v1["stringValue"], v1["value"] = s["value"], None
                elif s["dataType"] == "BOOLEAN":
                    v1["stringValue"], v1["value"] = str(s["value"]).lower(), 1.0 if s["value"] else 0.0
                scores.append(v1)
            first = min((o["startTime"] for o in observations), default=iso(datetime.now(UTC)))
            out.append(
                {
                    "id": trace_id,
                    "timestamp": first,
                    "name": trace.get("name"),
                    "userId": trace.get("userId"),
                    "sessionId": trace.get("sessionId"),
                    "tags": trace.get("tags", []),
                    "release": trace.get("release"),
                    "environment": trace.get("environment", "default"),
                    "public": False,
                    "htmlPath": f"/project/{PROJECT}/traces/{trace_id}",
                    "observations": observations,
                    "scores": scores,
                }
            )
        return out

    # --- faults ----------------------------------------------------------------------------

    def fail_next(self, path: str, status: int, times: int = 1, retry_after: str | None = None) -> None:
        self.faults.append(Fault(path, status, times, retry_after))

    def outage_after(self, path: str, pages: int) -> None:
        self.outage[path] = pages

    def restore(self) -> None:
        self.outage.clear()
        self.faults.clear()

    def count(self, path: str, status: int | None = None) -> int:
        return sum(1 for p, _, s in self.requests if p == path and (status is None or s == status))


@contextmanager
def serve(standin: StandinLangfuse) -> Iterator[str]:
    """Run the stand-in on a free loopback port in a thread; yields its base URL."""
    config = uvicorn.Config(standin.app(), host="127.0.0.1", port=0, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("stand-in Langfuse server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
