"""The OTLP/HTTP collector's endpoints: a Starlette app over one `Collector` (spool, flusher, assembler).

Endpoints (all answers as the OTLP/HTTP specification says):

- `POST /v1/traces`, `POST /v1/logs`: OTLP protobuf or JSON, optionally gzip/deflate;
- `POST /v1/metrics`: decoded, acknowledged and counted (`/health`), not stored;
- `POST /api/public/otel/v1/traces`: the same, for a Langfuse SDK pointed at trajlake
  (rows get `source = 'langfuse'`); `POST /api/public/scores`: Langfuse scores -> rewards;
- `GET /health` (and `GET /api/public/health`).

A request is decoded, converted to rows, redacted, appended to the write-ahead spool
and answered only once the spool has fsynced it, so 200 means durable.

Answers: 200 (with `partial_success` when some spans were rejected), 400 malformed,
401 bad credentials, 408 a body not sent within `request_timeout_s` (every route), 413
too large (also after decompression), 415 unknown content type or encoding, 503 +
Retry-After when the writer is behind, the disk failed or the server is stopping.
How the app is served (header deadlines, bounded shutdown): `ingest.otlp.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import pyarrow as pa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ingest.errors import IngestError, LakeUnavailable, MalformedPayload
from ingest.langfuse.sink import correction_labels, write_labels
from ingest.otlp.collector import Collector
from ingest.otlp.config import CollectorConfig
from ingest.otlp.convert import Converted, logs_from_request, spans_from_request
from ingest.otlp.decode import (
    JSON,
    ExportLogsServiceResponse,
    ExportMetricsServiceResponse,
    ExportTraceServiceResponse,
    decode_logs,
    decode_metrics,
    decode_traces,
    encode_response,
    metric_points,
)
from ingest.otlp.http import (
    BodyReader,
    SafeJSONResponse,
    check_bearer,
    check_langfuse,
    error_response,
    response_media,
)
from ingest.scores import ScoreBatch, scores_to_rewards
from store.errors import SchemaViolation
from store.lake import Lake
from store.rows import utc_now
from store.writer import write

log = logging.getLogger("trajlake.ingest.otlp.app")


def create_app(config: CollectorConfig, collector: Collector | None = None) -> Starlette:
    """The collector's ASGI app; its lifespan starts and stops the `Collector`.

    >>> import uvicorn  # doctest: +SKIP
    >>> uvicorn.run(create_app(CollectorConfig(lake="./lake")), host="127.0.0.1", port=4318)
    """
    runtime = collector or Collector(config)
    # One reader for every route: the same size limit and deadline, and one switch that ends
    # every upload in progress when the server shuts down.
    bodies = BodyReader(config.max_body_bytes, config.request_timeout_s, config.retry_after_s)

    async def otlp(request: Request, *, logs: bool, source: str, langfuse: bool) -> Response:
        media = response_media(request)
        runtime.stats.requests += 1
        try:
            if langfuse:
                check_langfuse(request, config)
            else:
                check_bearer(request, config.bearer_token)
            runtime.check_capacity()
            body = await bodies.read(request)
            content_type = request.headers.get("content-type")
            encoding = request.headers.get("content-encoding")
            converted: Converted
            try:
                if logs:
                    converted = logs_from_request(
                        decode_logs(body, content_type, encoding, config.max_body_bytes), source=source
                    )
                else:
                    converted = spans_from_request(
                        decode_traces(body, content_type, encoding, config.max_body_bytes), source=source
                    )
            except IngestError:
                raise
            except (ValueError, TypeError, OverflowError, RecursionError, pa.ArrowException) as exc:
                raise MalformedPayload("OTLP request", f"could not convert: {exc}") from None
            await runtime.accept(converted.table)
        except IngestError as exc:
            runtime.stats.errors += 1
            return error_response(exc, media)
        runtime.stats.rows_rejected += converted.rejected
        response: ExportTraceServiceResponse | ExportLogsServiceResponse
        if logs:
            response = ExportLogsServiceResponse()
            if converted.rejected:
                response.partial_success.rejected_log_records = converted.rejected
                response.partial_success.error_message = converted.error_message
        else:
            response = ExportTraceServiceResponse()
            if converted.rejected:
                response.partial_success.rejected_spans = converted.rejected
                response.partial_success.error_message = converted.error_message
        return Response(encode_response(response, media), media_type=media)

    async def traces(request: Request) -> Response:
        return await otlp(request, logs=False, source="otel", langfuse=False)

    async def logs(request: Request) -> Response:
        return await otlp(request, logs=True, source="otel", langfuse=False)

    async def langfuse_traces(request: Request) -> Response:
        return await otlp(request, logs=False, source="langfuse", langfuse=True)

    async def scores(request: Request) -> Response:
        try:
            check_langfuse(request, config)
            body = await bodies.read(request)
            try:
                document = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError) as exc:
                raise MalformedPayload("scores JSON", str(exc)[:200]) from None
            batch = scores_to_rewards(document, received_at=utc_now(), redaction=config.redaction)
            if batch.rows:
                await asyncio.to_thread(write_scores, runtime.lake, batch, config.retry_after_s)
        except IngestError as exc:
            return error_response(exc, JSON)
        if not isinstance(document, list):
            # Langfuse answers a created score with 200 and its id.
            if batch.errors:
                return SafeJSONResponse({"message": batch.errors[0]}, status_code=400)
            return SafeJSONResponse({"id": batch.ids[0]}, status_code=200)
        if batch.errors and not batch.rows:
            return SafeJSONResponse(
                {"message": batch.errors[0], "errors": [{"message": e} for e in batch.errors]},
                status_code=400,
            )
        if batch.errors:
            return SafeJSONResponse(
                {
                    "accepted": len(batch.rows),
                    "rejected": len(batch.errors),
                    "errors": [{"message": e} for e in batch.errors],
                },
                status_code=207,
            )
        return SafeJSONResponse({"message": "Accepted"}, status_code=202)

    async def metrics(request: Request) -> Response:
        # Acknowledged and counted, not stored: trajectories carry each call's usage already, and
        # an exporter that gets 404 logs an error every interval (logfire, traceloop-sdk).
        media = response_media(request)
        runtime.stats.requests += 1
        try:
            check_bearer(request, config.bearer_token)
            body = await bodies.read(request)
            points = metric_points(
                decode_metrics(
                    body,
                    request.headers.get("content-type"),
                    request.headers.get("content-encoding"),
                    config.max_body_bytes,
                )
            )
        except IngestError as exc:
            runtime.stats.errors += 1
            return error_response(exc, media)
        runtime.stats.metric_points += sum(points.values())
        return Response(encode_response(ExportMetricsServiceResponse(), media), media_type=media)

    async def health(request: Request) -> Response:
        # 503 while writes fail, so a readiness probe sends traffic to a replica that can store it.
        health = runtime.health()
        return JSONResponse(health, status_code=503 if health["status"] == "failing" else 200)

    async def projects(request: Request) -> Response:
        # What `Langfuse().auth_check()` reads: one project, when the keys are right.
        try:
            check_langfuse(request, config)
        except IngestError as exc:
            return error_response(exc, JSON)
        project = {
            "id": "trajlake",
            "name": "trajlake",
            "organization": {"id": "trajlake", "name": "trajlake"},
            # Only where the caller proved its keys, or where there are none to prove.
            "metadata": {"lake": runtime.lake.root},
        }
        return JSONResponse({"data": [project]})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(runtime.start)
        try:
            yield
        finally:
            await asyncio.to_thread(runtime.stop)

    app = Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/v1/logs", logs, methods=["POST"]),
            Route("/v1/metrics", metrics, methods=["POST"]),
            Route("/api/public/otel/v1/traces", langfuse_traces, methods=["POST"]),
            Route("/api/public/scores", scores, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/api/public/health", health, methods=["GET"]),
            Route("/api/public/projects", projects, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.collector = runtime
    app.state.bodies = bodies
    return app


def write_scores(lake: Lake, batch: ScoreBatch, retry_after: int) -> None:
    """Write a batch's reward rows; a row the lake refuses moves to the batch's errors
    without holding the others back. A failing disk is a retryable 503."""
    try:
        try:
            write(lake, "rewards", batch.rows)
        except SchemaViolation:
            _write_one_by_one(lake, batch)  # one row is bad: find it (scores are few)
        # a correction is also the conversation's right answer: a label, as pulled ones are
        # (written after its reward: a retried request rewrites both under their keys)
        write_labels(
            lake, correction_labels(lake, zip(batch.scores, batch.rows, batch.trace_ids, strict=True))
        )
    except OSError as exc:
        log.error("writing scores failed: %s", exc)
        raise LakeUnavailable(lake.root, exc, retry_after) from None


def _write_one_by_one(lake: Lake, batch: ScoreBatch) -> None:
    """Write a batch's reward rows one at a time; a row the lake refuses moves to the batch's
    errors without holding the others back."""
    kept = []
    for row, score_id, score, trace_id in zip(
        batch.rows, batch.ids, batch.scores, batch.trace_ids, strict=True
    ):
        try:
            write(lake, "rewards", [row])
        except SchemaViolation as exc:
            batch.errors.append(f"score `{score_id}`: {exc}")
            continue
        kept.append((row, score_id, score, trace_id))
    batch.rows = [k[0] for k in kept]
    batch.ids = [k[1] for k in kept]
    batch.scores = [k[2] for k in kept]
    batch.trace_ids = [k[3] for k in kept]
