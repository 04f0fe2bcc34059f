"""HTTP helpers of the collector: authentication, bounded body reads, OTLP error answers.

Error bodies are `google.rpc.Status`, in the request's own encoding (protobuf or JSON),
as the OTLP/HTTP specification asks; 401 answers carry `WWW-Authenticate`, 503 answers
`Retry-After`. Credentials are compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from google.rpc import status_pb2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ingest.errors import IngestError, PayloadTooLarge, Unauthorized
from ingest.otlp.config import CollectorConfig
from ingest.otlp.decode import JSON, PROTOBUF, media_type


def error_response(exc: IngestError, media: str) -> Response:
    headers = {}
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = f'{exc.scheme} realm="trajlake"'
    status = status_pb2.Status(code=_grpc_code(exc.status), message=str(exc))
    if media == PROTOBUF:
        return Response(
            status.SerializeToString(), status_code=exc.status, media_type=PROTOBUF, headers=headers
        )
    return JSONResponse(
        {"code": status.code, "message": status.message}, status_code=exc.status, headers=headers
    )


def _grpc_code(http: int) -> int:
    # google.rpc.Code values: INVALID_ARGUMENT 3, UNAUTHENTICATED 16, RESOURCE_EXHAUSTED 8, UNAVAILABLE 14.
    return {400: 3, 401: 16, 413: 8, 415: 3, 503: 14}.get(http, 13)


async def read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(limit, decompressed=False)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(limit, decompressed=False)
        chunks.append(chunk)
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
