"""A recording OTLP/HTTP (and Langfuse) endpoint on loopback.

Every request is kept, in arrival order, exactly as it came: method, path, query,
Content-Type, Content-Encoding and the raw body bytes (still compressed when the client
compressed them). Answers are what the real receivers say:

- `POST /v1/traces`, `/v1/logs`, `/v1/metrics` and Langfuse's `/api/public/otel/v1/traces`
  (plus `/logs`, `/metrics`): 200 with an empty `Export*ServiceResponse`, protobuf or JSON
  as the request was (OTLP/HTTP specification);
- Langfuse's `POST /api/public/scores`: 200 `{"id": ...}`; `POST /api/public/ingestion`:
  207 with one success per batch event; `GET /api/public/projects`: one project (what
  `auth_check()` reads); `POST /api/public/media`: an upload id and no upload URL;
- health probes (`GET /health`, `/api/public/health`, `/`): 200;
- anything else: 200 `{}` (and it is still recorded, so unknown calls show up).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PROTOBUF = "application/x-protobuf"
OTLP_PATHS = {
    "/v1/traces": "traces",
    "/v1/logs": "logs",
    "/v1/metrics": "metrics",
    "/api/public/otel/v1/traces": "traces",
    "/api/public/otel/v1/logs": "logs",
    "/api/public/otel/v1/metrics": "metrics",
}


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    content_type: str | None
    content_encoding: str | None
    body: bytes
    status: int
    received_at: float = field(default_factory=time.time)
    headers: dict[str, str] = field(default_factory=dict)


# Headers worth keeping in a manifest (no credentials: Authorization is reduced to its scheme).
_KEPT_HEADERS = ("user-agent", "x-langfuse-sdk-name", "x-langfuse-sdk-version", "x-langfuse-public-key")


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[Route("/{path:path}", self.handle, methods=["GET", "POST", "PUT", "PATCH"])]
        )

    def last_arrival(self) -> float:
        with self._lock:
            return self.requests[-1].received_at if self.requests else 0.0

    def snapshot(self) -> list[Recorded]:
        with self._lock:
            return list(self.requests)

    def _keep(self, request: Request, body: bytes, status: int) -> None:
        headers = {k: request.headers[k] for k in _KEPT_HEADERS if k in request.headers}
        if "authorization" in request.headers:
            headers["authorization-scheme"] = request.headers["authorization"].split(" ", 1)[0]
        with self._lock:
            self.requests.append(
                Recorded(
                    method=request.method,
                    path=request.url.path,
                    query=request.url.query,
                    content_type=request.headers.get("content-type"),
                    content_encoding=request.headers.get("content-encoding"),
                    body=body,
                    status=status,
                    headers=headers,
                )
            )

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        response = self._answer(request.method, path, request.headers.get("content-type"), body)
        self._keep(request, body, response.status_code)
        return response

    def _answer(self, method: str, path: str, content_type: str | None, body: bytes) -> Response:
        if method == "POST" and path in OTLP_PATHS:
            if (content_type or "").split(";")[0].strip().lower() == PROTOBUF:
                # An empty Export{Trace,Logs,Metrics}ServiceResponse encodes to zero bytes.
                return Response(b"", media_type=PROTOBUF)
            return Response(b"{}", media_type="application/json")
        if path == "/api/public/scores" and method == "POST":
            try:
                document = json.loads(body)
            except ValueError:
                document = {}
            score_id = document.get("id") if isinstance(document, dict) else None
            return JSONResponse({"id": score_id or str(uuid.uuid4())})
        if path == "/api/public/ingestion" and method == "POST":
            try:
                batch = json.loads(body).get("batch") or []
            except (ValueError, AttributeError):
                batch = []
            return JSONResponse(
                {"successes": [{"id": e.get("id", ""), "status": 201} for e in batch], "errors": []},
                status_code=207,
            )
        if path == "/api/public/projects":
            return JSONResponse(
                {
                    "data": [
                        {
                            "id": "recorder-project",
                            "name": "recorder",
                            "organization": {"id": "recorder-org", "name": "recorder"},
                            "metadata": {},
                        }
                    ]
                }
            )
        if path == "/api/public/media" and method == "POST":
            return JSONResponse({"mediaId": str(uuid.uuid4()), "uploadUrl": None})
        if path in ("/health", "/api/public/health", "/"):
            return JSONResponse({"status": "OK", "version": "3.0.0"})
        return JSONResponse({})


def describe(requests: list[Recorded]) -> list[dict[str, Any]]:
    """A short summary, for logs."""
    return [
        {
            "method": r.method,
            "path": r.path,
            "bytes": len(r.body),
            "type": r.content_type,
            "enc": r.content_encoding,
        }
        for r in requests
    ]
