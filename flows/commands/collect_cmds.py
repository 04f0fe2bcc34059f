"""`trajlake collect` (the OTLP/HTTP collector) and `trajlake assemble` (rebuild trajectories from spans)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

import typer

from flows.commands.options import LakeOption, fail, resolve_lake


def collect(
    lake: LakeOption = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (4318 is the OTLP/HTTP default).")] = 4318,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="TRAJLAKE_COLLECTOR_TOKEN", help="Require `Authorization: Bearer TOKEN` on /v1/*."
        ),
    ] = None,
    langfuse_public_key: Annotated[
        str | None,
        typer.Option(
            envvar="TRAJLAKE_LANGFUSE_PUBLIC_KEY", help="With the secret key: Basic auth on /api/public/*."
        ),
    ] = None,
    langfuse_secret_key: Annotated[
        str | None, typer.Option(envvar="TRAJLAKE_LANGFUSE_SECRET_KEY", help="See --langfuse-public-key.")
    ] = None,
    spool_dir: Annotated[
        str | None, typer.Option(help="Write-ahead spool directory (default: <lake>/_spool).")
    ] = None,
    flush_mb: Annotated[int, typer.Option(help="Seal spooled data into Parquet at this many MiB...")] = 64,
    flush_seconds: Annotated[float, typer.Option(help="...or after this many seconds.")] = 5.0,
    idle_timeout: Annotated[
        float,
        typer.Option(help="Assemble a trace whose root span never arrives after this many quiet seconds."),
    ] = 30.0,
    no_assemble: Annotated[
        bool, typer.Option("--no-assemble", help="Only store spans; run `trajlake assemble` later.")
    ] = False,
    max_body_mb: Annotated[
        int, typer.Option(help="Largest request body, also after decompression (MiB).")
    ] = 64,
    redact_emails: Annotated[bool, typer.Option(help="Replace email addresses before storing.")] = False,
    redact_phones: Annotated[bool, typer.Option(help="Replace phone numbers before storing.")] = False,
    redact_function: Annotated[
        str | None,
        typer.Option(
            help="Your own redaction, `package.module:function` taking and returning a string; runs last."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """OTLP/HTTP receiver: /v1/traces, /v1/logs, Langfuse /api/public/otel/v1/traces and /api/public/scores, GET /health."""
    from ingest.collector import serve
    from ingest.config import CollectorConfig
    from ingest.errors import IngestError
    from ingest.redact import RedactionConfig

    resolved = resolve_lake(lake)
    function = _import_function(redact_function) if redact_function else None
    try:
        config = CollectorConfig(
            lake=resolved.root,
            spool_dir=spool_dir,
            host=host,
            port=port,
            bearer_token=token,
            langfuse_public_key=langfuse_public_key,
            langfuse_secret_key=langfuse_secret_key,
            max_body_bytes=max_body_mb * 1024 * 1024,
            flush_bytes=flush_mb * 1024 * 1024,
            flush_seconds=flush_seconds,
            idle_timeout_s=idle_timeout,
            assemble=not no_assemble,
            redaction=RedactionConfig(emails=redact_emails, phones=redact_phones, function=function),
        )
    except IngestError as exc:
        raise fail(str(exc)) from None

    def ready() -> None:
        typer.echo(f"trajlake collect: listening on http://{host}:{port} -> {resolved.root}", err=True)

    serve(config, log_level=log_level, ready=ready)


def _import_function(path: str):  # type: ignore[no-untyped-def]
    import importlib

    module_name, _, attribute = path.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise fail(
            f"--redact-function `{path}` cannot be imported ({exc}); expected `package.module:function`"
        ) from None
    if not callable(function):
        raise fail(f"--redact-function `{path}` is not callable")
    return function


def assemble(
    lake: LakeOption = None,
    since: Annotated[
        datetime | None,
        typer.Option(
            formats=["%Y-%m-%d"],
            help="Only traces with a span on or after this date (each rebuilt from all its spans).",
        ),
    ] = None,
    trace_id: Annotated[
        list[str] | None, typer.Option("--trace-id", help="Only these traces (repeatable).")
    ] = None,
) -> None:
    """(Re)build trajectories and rewards from the raw `spans` table, deterministically."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from ingest.lakeio import rebuild

    resolved = resolve_lake(lake)
    since_day: date | None = since.date() if since else None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True) as progress:
        task = progress.add_task("assembling traces...", total=None)
        result = rebuild(
            resolved,
            since=since_day,
            trace_ids=trace_id or None,
            progress=lambda done: progress.update(task, description=f"assembled {done} traces"),
        )
    typer.echo(
        f"assembled {result.traces} traces -> {result.trajectories} trajectories, "
        f"{result.rewards} rewards in {resolved.root}"
    )


def register(app: typer.Typer) -> None:
    """Add `collect` and `assemble` to the `trajlake` app."""
    app.command("collect")(collect)
    app.command("assemble")(assemble)
