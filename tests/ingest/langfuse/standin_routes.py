"""The stand-in Langfuse server's HTTP routes: `StandinRoutes`, a mixin of
`standin.StandinLangfuse`, answering from its in-memory project and its faults.

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
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

if TYPE_CHECKING:
    from tests.ingest.langfuse.standin import Fault

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


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class StandinRoutes:
    """The read endpoints the puller uses, over `StandinLangfuse`'s state."""

    if TYPE_CHECKING:  # StandinLangfuse's fields (standin.py)
        public_key: str
        secret_key: str
        observations: list[dict[str, Any]]
        scores: list[dict[str, Any]]
        faults: list[Fault]
        requests: list[tuple[str, dict[str, Any], int]]
        outage: dict[str, int]
        delay_s: float
        cursor_epoch: int
        lock: threading.Lock

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
