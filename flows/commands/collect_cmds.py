"""`trajlake collect` (the OTLP/HTTP collector) and `trajlake assemble` (rebuild trajectories from spans)."""

from __future__ import annotations

import os
from datetime import date, datetime
from typing import Annotated

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import build, configured
from ingest.lakeio import rebuild
from ingest.otlp.config import CollectorConfig
from ingest.otlp.memory import reexec_bounded


def collect(
    collector: CollectorConfig,
    lake: LakeOption = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """OTLP/HTTP receiver: /v1/traces, /v1/logs, Langfuse /api/public/otel/v1/traces and /api/public/scores, GET /health."""
    from dataclasses import fields

    from ingest.otlp.server import serve

    resolved = resolve_lake(lake)
    config = build(collector, lake=resolved.root)
    # Click reads an empty variable as unset, which would turn authentication off without a word.
    for setting in fields(CollectorConfig):
        variable = setting.metadata.get("env")
        if variable and getattr(config, setting.name) is None and os.environ.get(variable) == "":
            raise fail(
                f"${variable} is set but empty: it would turn authentication off; unset it or give a value", 2
            )
    if config.bounded_memory:
        reexec_bounded("collect")  # allocator settings a running process can no longer take

    def ready() -> None:
        typer.echo(
            f"trajlake collect: listening on http://{config.host}:{config.port} -> {resolved.root}", err=True
        )

    serve(config, log_level=log_level, ready=ready)


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

    resolved = resolve_lake(lake, must_exist=True)
    since_day: date | None = since.date() if since else None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True) as progress:
        task = progress.add_task("assembling traces...", total=None)
        result = rebuild(
            resolved,
            since=since_day,
            trace_ids=trace_id or None,
            progress=lambda done: progress.update(task, description=f"assembled {done} traces"),
        )
    # Traces that failed are recorded, not fatal: only an unreadable or unwritable lake exits non-zero.
    typer.echo(f"assembled {result.summary()} in {resolved.root}")


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("collect")(configured(collect, collector="collector"))
app.command("assemble")(assemble)
