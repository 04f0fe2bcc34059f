"""HTTP helpers of the collector: authentication, deadline-bound body reads, OTLP error answers.

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
    if isinstance(exc, RequestTimeout | ShuttingDown):
        headers["Connection"] = "close"  # the rest of the body is not worth waiting for
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


class ShuttingDown(IngestError, RuntimeError):
    """The collector is stopping: a body still on its way is not waited for (retry elsewhere or later)."""

    status = 503

    def __init__(self, received: int, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(
            f"the collector is shutting down; {received} bytes of the request body came and nothing "
            "was written: send it again"
        )


class BodyReader:
    """Reads request bodies, each under the same deadline, on every route.

    `stop()` (the server's shutdown) ends every read in progress at once with 503 +
    Retry-After, and refuses later ones: shutdown never waits on a client's upload, and
    a body that never fully arrived was never acknowledged, so nothing is lost.
    """

    def __init__(self, limit: int, timeout_s: float, retry_after: int) -> None:
        self.limit = limit
        self.timeout_s = timeout_s
        self.retry_after = retry_after
        self.stopping = False
        self._reads: set[asyncio.Timeout] = set()

    def stop(self) -> None:
        """End every body read now (each answers 503); called on the event loop."""
        self.stopping = True
        now = asyncio.get_running_loop().time()
        for deadline in self._reads:
            deadline.reschedule(now)

    async def read(self, request: Request) -> bytes:
        """The request body, at most `limit` bytes (413 above), within `timeout_s` seconds
        (408 after: a client that stalls mid-body must not hold its buffer and connection)."""
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            raise PayloadTooLarge(self.limit, decompressed=False)
        if self.stopping:
            raise ShuttingDown(0, self.retry_after)
        chunks = []
        size = 0
        try:
            async with asyncio.timeout(self.timeout_s) as deadline:
                self._reads.add(deadline)
                try:
                    async for chunk in request.stream():
                        size += len(chunk)
                        if size > self.limit:
                            raise PayloadTooLarge(self.limit, decompressed=False)
                        chunks.append(chunk)
                finally:
                    self._reads.discard(deadline)
        except TimeoutError:
            if self.stopping:
                raise ShuttingDown(size, self.retry_after) from None
            raise RequestTimeout(self.timeout_s, size) from None
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
