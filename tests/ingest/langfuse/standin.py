"""A stand-in Langfuse server: the public read API the SDK v5 uses, over loopback HTTP.

It speaks what `langfuse.api.observations.get_many` and `langfuse.api.scores.get_many`
send and parse (langfuse 5.0.4 `api/observations/raw_client.py`, `api/scores/raw_client.py`):

- `GET /api/public/v2/observations`: Basic auth (401), `limit` 1..1000 (else 400),
  `fields` groups (core always; unknown group -> 400), `expandMetadata`, opaque base64
  `cursor` (absent on the last page), query filters and the `filter` JSON (which takes
  precedence), `parseIoAsJson=true` -> 400, input/output returned as raw strings,
  newest first (startTime, id).
- `GET /api/public/v3/scores`: Basic auth, `limit` 1..100, `fields` details/subject/
  annotation, filters, base64url cursor, typed `value` per `dataType`.
- `GET /api/public/health`.

Faults for tests: `fail_next(path, status, times, retry_after)` answers the next
requests with an error; `outage_after(path, pages)` turns every request into a 503
after that many good pages until `restore()`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

OBS_GROUPS = {
    "core": ("id", "traceId", "startTime", "endTime", "projectId", "parentObservationId", "type"),
    "basic": (
        "name",
        "level",
        "statusMessage",
        "version",
        "environment",
        "bookmarked",
        "public",
        "userId",
        "sessionId",
        "isRootObservation",
    ),
    "time": ("completionStartTime", "createdAt", "updatedAt"),
    "io": ("input", "output"),
    "metadata": ("metadata",),
    "model": ("model", "internalModelId", "modelParameters"),
    "usage": ("usageDetails", "costDetails", "totalCost", "usagePricingTierName"),
    "prompt": ("promptId", "promptName", "promptVersion"),
    "metrics": ("latency", "timeToFirstToken"),
    "trace_context": ("tags", "release", "traceName"),
}
SCORE_GROUPS = {
    "details": ("comment", "configId", "metadata"),
    "subject": ("subject",),
    "annotation": ("authorUserId", "queueId"),
}
SCORE_CORE = (
    "id",
    "projectId",
    "name",
    "value",
    "dataType",
    "source",
    "timestamp",
    "environment",
    "createdAt",
    "updatedAt",
)
PROJECT = "proj-standin"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class Fault:
    path: str
    status: int
    times: int
    retry_after: str | None = None


@dataclass
class StandinLangfuse:
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

    # --- the HTTP app ------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/public/v2/observations", self._observations),
                Route("/api/public/v3/scores", self._scores),
                Route("/api/public/health", self._health),
            ]
        )

    def _guard(self, request: Request) -> JSONResponse | None:
        path = request.url.path
        expected = "Basic " + base64.b64encode(f"{self.public_key}:{self.secret_key}".encode()).decode()
        if request.headers.get("authorization") != expected:
            return JSONResponse(
                {"message": "Invalid authorization header", "error": "Unauthorized"}, status_code=401
            )
        for fault in self.faults:
            if fault.path == path and fault.times > 0:
                fault.times -= 1
                headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
                return JSONResponse(
                    {"message": f"injected {fault.status}"}, status_code=fault.status, headers=headers
                )
        if path in self.outage:
            if self.outage[path] <= 0:
                return JSONResponse({"message": "Service Unavailable"}, status_code=503)
            self.outage[path] -= 1
        return None

    def _log(self, request: Request, status: int) -> None:
        self.requests.append((request.url.path, dict(request.query_params.multi_items()), status))

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "OK", "version": "4.60.0"})

    async def _observations(self, request: Request) -> JSONResponse:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        response = self._guard(request) or self._list_observations(request)
        self._log(request, response.status_code)
        return response

    async def _scores(self, request: Request) -> JSONResponse:
        response = self._guard(request) or self._list_scores(request)
        self._log(request, response.status_code)
        return response

    def _list_observations(self, request: Request) -> JSONResponse:
        q = request.query_params
        if q.get("parseIoAsJson") == "true":
            return _bad("parseIoAsJson is deprecated; input/output are always raw strings")
        groups = (
            {"core", "basic"}
            if not q.get("fields")
            else {g.strip() for g in q["fields"].split(",")} | {"core"}
        )
        unknown = groups - set(OBS_GROUPS)
        if unknown:
            return _bad(f"Invalid fields group(s): {sorted(unknown)}")
        limit, error = _limit(q.get("limit"), 50, 1000)
        if error:
            return error
        expand = set(filter(None, (q.get("expandMetadata") or "").split(",")))
        after, error = _cursor(q.get("cursor"), self.cursor_epoch)
        if error:
            return error
        try:
            matches = self._observation_matcher(q)
        except ValueError as exc:
            return _bad(str(exc))
        with self.lock:
            items = sorted(
                (o for o in self.observations if matches(o)),
                key=lambda o: (o["startTime"], o["id"]),
                reverse=True,
            )
        if after is not None:
            items = [o for o in items if (o["startTime"], o["id"]) < after]
        page, rest = items[:limit], items[limit:]
        meta: dict[str, Any] = {}
        if rest:
            meta["cursor"] = _encode_cursor((page[-1]["startTime"], page[-1]["id"]), self.cursor_epoch)
        return JSONResponse({"data": [self._shape(o, groups, expand) for o in page], "meta": meta})

    def _shape(self, obs: dict[str, Any], groups: set[str], expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group in groups:
            for key in OBS_GROUPS[group]:
                if key not in obs:
                    if group == "core":
                        out[key] = None
                    continue
                value = obs[key]
                if key in ("input", "output") and value is not None and not isinstance(value, str):
                    value = json.dumps(value)  # the v2 API returns io as the stored raw string
                if key == "metadata" and isinstance(value, dict):
                    value = {
                        k: (v[:200] if isinstance(v, str) and k not in expand else v)
                        for k, v in value.items()
                    }
                out[key] = value
        return out

    def _observation_matcher(self, q: Any) -> Any:
        if q.get("filter"):
            conditions = json.loads(q["filter"])
            if not isinstance(conditions, list):
                raise ValueError("filter must be a JSON array")
            return lambda o: all(_condition(o, c) for c in conditions)
        start = _parse_time(q["fromStartTime"]) if q.get("fromStartTime") else None
        end = _parse_time(q["toStartTime"]) if q.get("toStartTime") else None
        environments = q.getlist("environment")
        plain = {
            "name": "name",
            "userId": "userId",
            "sessionId": "sessionId",
            "type": "type",
            "traceId": "traceId",
            "level": "level",
        }

        def matches(o: dict[str, Any]) -> bool:
            t = _parse_time(o["startTime"])
            if (start and t < start) or (end and t >= end):
                return False
            if environments and o.get("environment") not in environments:
                return False
            return all(o.get(field_) == q[param] for param, field_ in plain.items() if q.get(param))

        return matches

    def _list_scores(self, request: Request) -> JSONResponse:
        q = request.query_params
        groups = {g.strip() for g in (q.get("fields") or "").split(",") if g.strip()}
        unknown = groups - set(SCORE_GROUPS)
        if unknown:
            return _bad(f"Unknown fields group(s): {sorted(unknown)}")
        limit, error = _limit(q.get("limit"), 50, 100)
        if error:
            return error
        after, error = _cursor(q.get("cursor"), self.cursor_epoch)
        if error:
            return error
        start = _parse_time(q["fromTimestamp"]) if q.get("fromTimestamp") else None
        end = _parse_time(q["toTimestamp"]) if q.get("toTimestamp") else None
        lists = {k: set(q[k].split(",")) for k in ("name", "source", "dataType", "environment") if q.get(k)}

        def matches(s: dict[str, Any]) -> bool:
            t = _parse_time(s["timestamp"])
            if (start and t < start) or (end and t >= end):
                return False
            for key, allowed in lists.items():
                value = s.get(key)
                if key in ("source", "dataType"):
                    if str(value).upper() not in {a.upper() for a in allowed}:
                        return False
                elif value not in allowed:
                    return False
            if q.get("traceId"):
                subject = s.get("subject") or {}
                if subject.get("traceId", subject.get("id")) not in q["traceId"].split(","):
                    return False
            return True

        with self.lock:
            items = sorted(
                (s for s in self.scores if matches(s)), key=lambda s: (s["timestamp"], s["id"]), reverse=True
            )
        if after is not None:
            items = [s for s in items if (s["timestamp"], s["id"]) < after]
        page, rest = items[:limit], items[limit:]
        keep = set(SCORE_CORE).union(*(SCORE_GROUPS[g] for g in groups))
        meta: dict[str, Any] = {"limit": limit}
        if rest:
            meta["cursor"] = _encode_cursor(
                (page[-1]["timestamp"], page[-1]["id"]), self.cursor_epoch, urlsafe=True
            )
        return JSONResponse({"data": [{k: v for k, v in s.items() if k in keep} for s in page], "meta": meta})


def _condition(o: dict[str, Any], c: dict[str, Any]) -> bool:
    column = {"traceTags": "tags"}.get(c["column"], c["column"])
    value, op = o.get(column), c["operator"]
    if c["type"] == "datetime":
        left, right = _parse_time(value), _parse_time(c["value"])
        return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]
    if c["type"] == "string":
        if op != "=":
            raise ValueError(f"operator `{op}` not supported by the stand-in")
        return value == c["value"]
    if c["type"] in ("stringOptions", "categoryOptions"):
        return (value in c["value"]) == (op == "any of")
    if c["type"] == "arrayOptions":
        have = set(value or [])
        if op == "any of":
            return bool(have & set(c["value"]))
        if op == "all of":
            return set(c["value"]) <= have
        return not have & set(c["value"])
    raise ValueError(f"Invalid filter type `{c['type']}`")


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"message": message, "error": "InvalidRequestError"}, status_code=400)


def _limit(raw: str | None, default: int, maximum: int) -> tuple[int, JSONResponse | None]:
    try:
        limit = int(raw) if raw else default
    except ValueError:
        return 0, _bad(f"limit `{raw}` is not an integer")
    if not 1 <= limit <= maximum:
        return 0, _bad(f"limit must be between 1 and {maximum}")
    return limit, None


def _encode_cursor(position: tuple[str, str], epoch: int, urlsafe: bool = False) -> str:
    raw = json.dumps({"t": position[0], "id": position[1], "e": epoch}).encode()
    return (base64.urlsafe_b64encode(raw) if urlsafe else base64.b64encode(raw)).decode()


def _cursor(raw: str | None, epoch: int) -> tuple[tuple[str, str] | None, JSONResponse | None]:
    if not raw:
        return None, None
    try:
        padded = raw + "=" * (-len(raw) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.replace("+", "-").replace("/", "_")))
        if decoded.get("e") != epoch:
            return None, _bad("Invalid cursor: expired")
        return (decoded["t"], decoded["id"]), None
    except (binascii.Error, ValueError, KeyError, TypeError):
        return None, _bad("Invalid cursor")


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


# --- a tool-using agent's traces -------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SYSTEM = "You are a weather assistant. Use tools."


def seed_agent_trace(
    standin: StandinLangfuse,
    trace_id: str,
    start: datetime,
    *,
    city: str = "Paris",
    weather: str = "rainy, 14C",
    user_id: str = "u-1",
    session_id: str = "s-1",
    environment: str = "production",
    name: str = "weather-agent",
    tags: tuple[str, ...] = ("prod", "weather"),
    tool_error: bool = False,
    include: tuple[str, ...] = ("root", "gen1", "tool", "gen2"),
) -> dict[str, str]:
    """One run of a tool-using agent: root agent span, a generation that calls a tool, the
    tool observation, and the final-answer generation. Returns the observation ids."""
    standin.add_trace(
        trace_id, name=name, userId=user_id, sessionId=session_id, environment=environment, tags=list(tags)
    )
    ids = {
        part: f"{trace_id[:12]}{n:04x}" for n, part in enumerate(("root", "gen1", "tool", "gen2"), start=1)
    }
    call_id = f"call_{trace_id[:8]}"
    question = f"What is the weather in {city}?"
    answer = f"It is {weather} in {city}."
    user = {"role": "user", "content": question}
    system = {"role": "system", "content": SYSTEM}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": call_id, "content": weather}
    t = lambda s: iso(start + timedelta(seconds=s))  # noqa: E731
    parts = {
        "root": dict(
            id=ids["root"],
            traceId=trace_id,
            type="AGENT",
            name=name,
            startTime=t(0),
            endTime=t(4),
            input={"question": question},
            output=answer,
        ),
        "gen1": dict(
            id=ids["gen1"],
            traceId=trace_id,
            type="GENERATION",
            name="chat gpt-4o",
            parentObservationId=ids["root"],
            startTime=t(0.1),
            endTime=t(1),
            completionStartTime=t(0.5),
            model="gpt-4o",
            modelParameters={"temperature": 0.2},
            input={"messages": [system, user], "tools": [WEATHER_TOOL]},
            output=call,
            usageDetails={"input": 120, "output": 20, "total": 140},
            costDetails={"total": 0.001},
            latency=0.9,
        ),
        "tool": dict(
            id=ids["tool"],
            traceId=trace_id,
            type="TOOL",
            name="get_weather",
            parentObservationId=ids["root"],
            startTime=t(1.1),
            endTime=t(1.5),
            input={"city": city},
            output=weather if not tool_error else None,
            level="ERROR" if tool_error else "DEFAULT",
            statusMessage="timeout" if tool_error else None,
            metadata={"tool_call_id": call_id},
        ),
        "gen2": dict(
            id=ids["gen2"],
            traceId=trace_id,
            type="GENERATION",
            name="chat gpt-4o",
            parentObservationId=ids["root"],
            startTime=t(2),
            endTime=t(3.5),
            model="gpt-4o",
            modelParameters={"temperature": 0.2},
            input={"messages": [system, user, call, result], "tools": [WEATHER_TOOL]},
            output={"role": "assistant", "content": answer},
            usageDetails={"input": 160, "output": 15, "total": 175},
        ),
    }
    for part in include:
        obs = {k: v for k, v in parts[part].items() if v is not None}
        standin.add_observation(**obs)
    return ids
