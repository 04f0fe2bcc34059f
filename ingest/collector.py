"""The OTLP/HTTP collector: Starlette routes over the spool, the Parquet flusher and the assembler.

Endpoints (all answers as the OTLP/HTTP specification says):

- `POST /v1/traces`, `POST /v1/logs`: OTLP protobuf or JSON, optionally gzip/deflate;
- `POST /api/public/otel/v1/traces`: the same, for a Langfuse SDK pointed at trajlake
  (rows get `source = 'langfuse'`); `POST /api/public/scores`: Langfuse scores -> rewards;
- `GET /health` (and `GET /api/public/health`).

A request is decoded, converted to rows, redacted, appended to the write-ahead spool
and answered only once the spool has fsynced it, so 200 means durable. A flusher
thread turns sealed spool segments into large Parquet files; an assembler thread
assembles traces whose root span has arrived (or that went idle).

Answers: 200 (with `partial_success` when some spans were rejected), 400 malformed,
401 bad credentials, 413 too large (also after decompression), 415 unknown content
type or encoding, 503 + Retry-After when the writer is behind or the disk failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import store
from ingest.config import CollectorConfig
from ingest.errors import IngestError, MalformedPayload, Overloaded
from ingest.http import check_bearer, check_langfuse, error_response, read_body, response_media
from ingest.lakeio import assemble_traces
from ingest.otlp import (
    JSON,
    ExportLogsServiceResponse,
    ExportTraceServiceResponse,
    decode_logs,
    decode_traces,
    encode_response,
)
from ingest.pending import PendingTraces
from ingest.redact import redact_table
from ingest.scores import scores_to_rewards
from ingest.spans import Converted, logs_from_request, spans_from_request
from ingest.spool import HEADER, MAGIC, Spool, decode_table, encode_table, read_segment

log = logging.getLogger("trajlake.ingest.collector")


@dataclass
class CollectorStats:
    requests: int = 0
    rows_accepted: int = 0
    rows_rejected: int = 0
    rows_flushed: int = 0
    files_written: int = 0
    trajectories_written: int = 0
    errors: int = 0


def default_spool_dir(lake: store.Lake) -> Path:
    if lake.is_local:
        return Path(lake.root) / "_spool"
    return Path(".trajlake-spool")


class Collector:
    """The stateful part: spool, flusher thread, assembler thread. One per process."""

    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.lake = store.Lake.of(config.lake)
        self._sealed = threading.Event()
        self.spool = Spool(
            config.spool_dir or default_spool_dir(self.lake),
            segment_bytes=config.flush_bytes,
            segment_seconds=config.flush_seconds,
            on_sealed=self._sealed.set,
        )
        self.pending = PendingTraces(idle_timeout_s=config.idle_timeout_s)
        self.stats = CollectorStats()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._flush_lock = threading.Lock()
        self.last_error: str | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Open the spool (recovering what a previous run left) and start the background threads."""
        self.spool.start()
        self._sealed.set()  # recovered segments are flushed right away
        workers: list[tuple[str, Callable[[], None]]] = [("trajlake-flusher", self._flush_loop)]
        if self.config.assemble:
            workers.append(("trajlake-assembler", self._assemble_loop))
        for name, target in workers:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Commit and flush everything, assemble what is pending, stop the threads."""
        self.spool.close()
        self._stop.set()
        self._sealed.set()
        for thread in self._threads:
            thread.join(timeout=120)
        self._threads.clear()
        self.flush_sealed()
        if self.config.assemble:
            self.assemble_ready(everything=True)

    # --- accepting ------------------------------------------------------------------------------

    def check_capacity(self) -> None:
        pending = self.spool.pending_bytes
        if pending > self.config.max_pending_bytes:
            raise Overloaded(pending, self.config.max_pending_bytes, self.config.retry_after_s)

    async def accept(self, table: pa.Table) -> None:
        """Redact and durably spool rows; returns once they are fsynced."""
        table = redact_table(table, self.config.redaction)
        if table.num_rows:
            await asyncio.wrap_future(self.spool.append(encode_table(table)))
        self.stats.rows_accepted += table.num_rows

    # --- flushing -----------------------------------------------------------------------------------

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._sealed.wait(timeout=0.5)
            self._sealed.clear()
            try:
                self.flush_sealed()
            except Exception as exc:
                # The segment stays in the spool and is retried; nothing acknowledged is lost.
                self.stats.errors += 1
                self.last_error = f"flushing the spool failed: {exc}; retrying"
                log.exception("flushing the spool to %s failed; will retry", self.lake)
                self._stop.wait(1.0)

    def flush(self) -> int:
        """Seal the active spool segment and write everything spooled to the lake now."""
        self.spool.rotate().result(timeout=60)
        return self.flush_sealed()

    def flush_sealed(self) -> int:
        """Write every sealed spool segment to the lake's `spans` table, then delete it."""
        rows = 0
        with self._flush_lock:
            for segment in self.spool.sealed_segments():
                records, _ = read_segment(segment)
                if records:
                    try:
                        table = pa.concat_tables(
                            [decode_table(r) for r in records], promote_options="default"
                        )
                        result = store.write(self.lake, "spans", table)
                    except (pa.ArrowInvalid, store.SchemaViolation) as exc:
                        # Not a transient failure (those are OSErrors, retried): write the
                        # records one by one and keep only the bad ones aside, rather than
                        # block the spool forever or hold good rows back with a bad one.
                        rows += self._write_one_by_one(segment, records, exc)
                        self.spool.remove(segment)
                        continue
                    self.stats.rows_flushed += result.rows
                    self.stats.files_written += len(result.files)
                    rows += result.rows
                    if self.config.assemble:
                        self.pending.observe(table)
                self.spool.remove(segment)
        return rows

    def _write_one_by_one(self, segment: Path, records: list[bytes], first_error: Exception) -> int:
        rows = 0
        failed = segment.with_suffix(".failed")
        for record in records:
            try:
                table = decode_table(record)
                result = store.write(self.lake, "spans", table)
            except (pa.ArrowInvalid, store.SchemaViolation) as exc:
                with failed.open("ab") as handle:  # same record format: readable with `read_segment`
                    handle.write(HEADER.pack(MAGIC, len(record), zlib.crc32(record)) + record)
                    handle.flush()
                    os.fsync(handle.fileno())
                self.stats.errors += 1
                self.last_error = f"a spooled batch could not be written ({exc}); kept in `{failed}`"
                log.error(self.last_error)
                continue
            rows += result.rows
            self.stats.rows_flushed += result.rows
            self.stats.files_written += len(result.files)
            if self.config.assemble:
                self.pending.observe(table)
        log.warning("segment %s needed a record-by-record write after: %s", segment.name, first_error)
        return rows

    # --- assembling -------------------------------------------------------------------------------

    def _assemble_loop(self) -> None:
        while not self._stop.wait(self.config.assemble_interval_s):
            try:
                self.assemble_ready()
            except Exception as exc:
                self.stats.errors += 1
                self.last_error = f"assembling trajectories failed: {exc}; `trajlake assemble` rebuilds them"
                log.exception("assembling trajectories in %s failed", self.lake)

    def assemble_ready(self, *, everything: bool = False) -> int:
        ready = self.pending.take_ready(everything=everything)
        if not ready:
            return 0
        result = assemble_traces(
            self.lake, ready.trace_ids, ready.dts, written_after_ns=_minus_skew(ready.first_start_ns)
        )
        self.stats.trajectories_written += result.trajectories
        return result.trajectories

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "last_error": self.last_error,
            "lake": self.lake.root,
            "pending_bytes": self.spool.pending_bytes,
            "pending_traces": len(self.pending),
            "spool_segments": len(self.spool.segments()),
            **self.stats.__dict__,
        }


def _minus_skew(start_ns: int | None, skew_s: float = 600.0) -> int | None:
    # Span start times come from the senders' clocks; a generous margin covers clock skew.
    return None if start_ns is None else start_ns - int(skew_s * 1e9)


# --- HTTP -----------------------------------------------------------------------------------------


def create_app(config: CollectorConfig, collector: Collector | None = None) -> Starlette:
    """The collector's ASGI app; its lifespan starts and stops the `Collector`.

    >>> import uvicorn  # doctest: +SKIP
    >>> uvicorn.run(create_app(CollectorConfig(lake="./lake")), host="127.0.0.1", port=4318)
    """
    runtime = collector or Collector(config)

    async def otlp(request: Request, *, logs: bool, source: str, langfuse: bool) -> Response:
        media = response_media(request)
        runtime.stats.requests += 1
        try:
            if langfuse:
                check_langfuse(request, config)
            else:
                check_bearer(request, config.bearer_token)
            runtime.check_capacity()
            body = await read_body(request, config.max_body_bytes)
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
            try:
                await runtime.accept(converted.table)
            except OSError as exc:
                log.error("spool write failed: %s", exc)
                raise Overloaded(
                    runtime.spool.pending_bytes, config.max_pending_bytes, config.retry_after_s
                ) from None
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
            body = await read_body(request, config.max_body_bytes)
            try:
                document = json.loads(body)
            except (ValueError, UnicodeDecodeError) as exc:
                raise MalformedPayload("scores JSON", str(exc)[:200]) from None
            batch = scores_to_rewards(document, config.redaction)
            if batch.rows:
                await asyncio.to_thread(store.write, runtime.lake, "rewards", batch.table())
        except IngestError as exc:
            return error_response(exc, JSON)
        if not isinstance(document, list):
            if batch.errors:
                return JSONResponse({"message": batch.errors[0]}, status_code=400)
            return JSONResponse({"id": document.get("id") or ""}, status_code=200)
        if batch.errors:
            return JSONResponse(
                {
                    "accepted": len(batch.rows),
                    "rejected": len(batch.errors),
                    "errors": [{"message": e} for e in batch.errors],
                },
                status_code=207,
            )
        return JSONResponse({"message": "Accepted"}, status_code=202)

    async def health(request: Request) -> Response:
        return JSONResponse(runtime.health())

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
            Route("/api/public/otel/v1/traces", langfuse_traces, methods=["POST"]),
            Route("/api/public/scores", scores, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/api/public/health", health, methods=["GET"]),
            Route("/api/public/projects", projects, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.collector = runtime
    return app


def serve(
    config: CollectorConfig, *, log_level: str = "warning", ready: Callable[[], None] | None = None
) -> None:
    """Run the collector in the foreground until interrupted (SIGINT/SIGTERM flush and stop cleanly)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            host=config.host,
            port=config.port,
            log_level=log_level,
            access_log=False,
            lifespan="on",
        )
    )
    if ready is not None:
        threading.Thread(target=_announce, args=(server, ready), daemon=True).start()
    server.run()


def _announce(server: Any, ready: Callable[[], None]) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        ready()
