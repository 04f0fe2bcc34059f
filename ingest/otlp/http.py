"""HTTP helpers of the collector: authentication, bounded body reads, OTLP error answers.

Error bodies are `google.rpc.Status`, in the request's own encoding (protobuf or JSON),
as the OTLP/HTTP specification asks; 401 answers carry `WWW-Authenticate`, 503 answers
`Retry-After`. Credentials are compared in constant time.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
from asyncio import TimerHandle, Transport
from typing import Any

from google.rpc import status_pb2
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ingest.errors import ClientDisconnected, IngestError, PayloadTooLarge, RequestTimeout, Unauthorized
from ingest.otlp.config import CollectorConfig
from ingest.otlp.decode import JSON, PROTOBUF, media_type

log = logging.getLogger("trajlake.ingest.otlp.http")


class SafeJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped: an answer that quotes the client's own
    text (a score name holding a lone surrogate) must still encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def error_response(exc: IngestError, media: str) -> Response:
    headers = {}
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = f'{exc.scheme} realm="trajlake"'
    if isinstance(exc, RequestTimeout):
        headers["Connection"] = "close"  # the rest of a stalled body is not worth waiting for
    status = status_pb2.Status(code=_grpc_code(exc.status), message=str(exc))
    if media == PROTOBUF:
        return Response(
            status.SerializeToString(), status_code=exc.status, media_type=PROTOBUF, headers=headers
        )
    return SafeJSONResponse(
        {"code": status.code, "message": status.message}, status_code=exc.status, headers=headers
    )


def _grpc_code(http: int) -> int:
    # google.rpc.Code values: INVALID_ARGUMENT 3, UNAUTHENTICATED 16, RESOURCE_EXHAUSTED 8,
    # UNAVAILABLE 14, DEADLINE_EXCEEDED 4, CANCELLED 1.
    return {400: 3, 401: 16, 408: 4, 413: 8, 415: 3, 499: 1, 503: 14}.get(http, 13)


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The request body, at most `limit` bytes (413 above), within `timeout_s` seconds
    (408 after: a client that stalls mid-body must not hold its buffer and connection)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(limit, decompressed=False)
    chunks = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(limit, decompressed=False)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(timeout_s or 0.0, size) from None
    except ClientDisconnect:
        # An everyday event (a client timing out, a deploy): one line, not a traceback.
        log.info("client %s disconnected after %d bytes of its request", request.client, size)
        raise ClientDisconnected() from None
    return b"".join(chunks)


def check_bearer(request: Request, token: str | None) -> None:
    if not token:
        return
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise Unauthorized("Bearer")


def check_langfuse(request: Request, config: CollectorConfig) -> None:
    if not config.langfuse_public_key:
        check_bearer(request, config.bearer_token)
        return
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized("Basic") from None
    expected = f"{config.langfuse_public_key}:{config.langfuse_secret_key}"
    if scheme.lower() != "basic" or not hmac.compare_digest(decoded.encode(), expected.encode()):
        raise Unauthorized("Basic")


def response_media(request: Request) -> str:
    try:
        return media_type(request.headers.get("content-type"))
    except IngestError:
        return JSON


def guarded_protocol(timeout_s: float) -> type[Any]:
    """uvicorn's httptools protocol with a deadline for each request's headers.

    uvicorn times out idle keep-alive connections but not a connection that was just
    opened, nor headers sent a byte at a time: such a client would hold its connection
    (and a file descriptor) forever. The deadline starts when the connection opens and
    when each request begins, and ends when the request's headers are complete; the body
    has its own deadline in `read_body`.
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _headers_deadline: TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._headers_deadline = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._headers_deadline is not None:
                self._headers_deadline.cancel()
                self._headers_deadline = None

        def _headers_too_slow(self) -> None:
            self._headers_deadline = None
            if not self.transport.is_closing():
                log.info(
                    "closing a connection from %s: no complete request headers in %gs", self.client, timeout_s
                )
                self.transport.close()

        def connection_made(self, transport: Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._arm()
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

    return GuardedHttpToolsProtocol
