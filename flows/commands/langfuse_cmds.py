"""`trajlake ingest langfuse`: pull traces and scores from a Langfuse server, or import an export file.

Thin: options become a `LangfuseConfig` and `PullFilters` (keys from the environment
when not given), then one library call (`ingest.langfuse.pull_langfuse` or
`import_langfuse_export`), then a summary of what was written.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands.options import LakeOption, fail, resolve_lake

ingest_app = typer.Typer(
    name="ingest",
    help="Bring traces in from other systems (Langfuse).",
    no_args_is_help=True,
)


def _time(value: str | None, option: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise fail(
            f"{option} `{value}` is not an ISO-8601 time (e.g. 2026-11-01 or 2026-11-01T12:00:00Z)", 2
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _categories(pairs: list[str]) -> dict[str, float]:
    from ingest.langfuse import DEFAULT_CATEGORY_VALUES

    mapping = dict(DEFAULT_CATEGORY_VALUES)
    for pair in pairs:
        label, sep, value = pair.rpartition("=")
        try:
            if not sep or not label:
                raise ValueError
            mapping[label.strip().lower()] = float(value)
        except ValueError:
            raise fail(
                f"--category `{pair}` must be LABEL=NUMBER, e.g. --category excellent=1.0", 2
            ) from None
    return mapping


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report, default=str))
        return
    for key, value in report.items():
        if value in (None, {}, [], 0, 0.0) and key not in ("trajectories", "rewards"):
            continue
        typer.echo(f"{key:>14}: {value}")


def langfuse(
    host: Annotated[
        str | None,
        typer.Option(
            help="Langfuse URL (default: $LANGFUSE_HOST, then $LANGFUSE_BASE_URL).", show_default=False
        ),
    ] = None,
    public_key: Annotated[
        str | None, typer.Option(help="Public key (default: $LANGFUSE_PUBLIC_KEY).", show_default=False)
    ] = None,
    secret_key: Annotated[
        str | None, typer.Option(help="Secret key (default: $LANGFUSE_SECRET_KEY).", show_default=False)
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Import a JSON/JSONL export (traces, v2 observations, scores) instead of pulling."
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only observations starting at/after this ISO time.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Only observations starting before this ISO time.")
    ] = None,
    environment: Annotated[
        list[str] | None, typer.Option(help="Langfuse environment (repeatable: any of).")
    ] = None,
    trace_name: Annotated[str | None, typer.Option(help="Only traces with this name.")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="Traces with this tag (repeatable: any of).")] = None,
    user: Annotated[str | None, typer.Option(help="Only this user's traces.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session's traces.")] = None,
    overlap_minutes: Annotated[
        float, typer.Option(help="Re-read window before the watermark (late data).")
    ] = 30.0,
    page_size: Annotated[int, typer.Option(help="Observations per page (max 1000).")] = 500,
    max_retries: Annotated[int, typer.Option(help="Retries per request on 429/5xx/dropped connections.")] = 6,
    scores: Annotated[bool, typer.Option(help="Also pull scores into `rewards`.")] = True,
    expand_metadata: Annotated[
        list[str] | None,
        typer.Option(
            help="Metadata key to fetch untruncated (repeatable; the API cuts others at 200 chars)."
        ),
    ] = None,
    category: Annotated[
        list[str] | None,
        typer.Option(help="Categorical score mapping LABEL=VALUE (repeatable; adds to defaults)."),
    ] = None,
    workers: Annotated[int, typer.Option(help="Processes assembling trajectories of a --file import.")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    lake: LakeOption = None,
) -> None:
    """Pull traces, observations and scores from Langfuse (incrementally), or import an export file."""
    from ingest.langfuse import (
        LangfuseConfig,
        LangfuseIngestError,
        PullFilters,
        import_langfuse_export,
        pull_langfuse,
    )

    target = resolve_lake(lake)
    categories = _categories(category or [])
    try:
        if file is not None:
            report = import_langfuse_export(
                target, file, category_values=categories, show_progress=progress, workers=workers
            )
            summary = dict(report.__dict__)
        else:
            host = host or os.environ.get("LANGFUSE_HOST") or os.environ.get("LANGFUSE_BASE_URL")
            if not host:
                raise fail(
                    "no Langfuse host: pass --host URL or set LANGFUSE_HOST (or --file PATH to import)", 2
                )
            public_key = public_key or os.environ.get("LANGFUSE_PUBLIC_KEY")
            secret_key = secret_key or os.environ.get("LANGFUSE_SECRET_KEY")
            if not public_key or not secret_key:
                raise fail(
                    "missing Langfuse keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
                    "(or --public-key / --secret-key)",
                    2,
                )
            config = LangfuseConfig(
                host=host,
                public_key=public_key,
                secret_key=secret_key,
                observations_page_size=page_size,
                max_retries=max_retries,
                overlap=timedelta(minutes=overlap_minutes),
                scores=scores,
                category_values=categories,
                expand_metadata=tuple(expand_metadata or ()),
            )
            filters = PullFilters(
                since=_time(since, "--since"),
                until=_time(until, "--until"),
                environments=tuple(environment or ()),
                trace_name=trace_name,
                tags=tuple(tag or ()),
                user_id=user,
                session_id=session,
            )
            summary = pull_langfuse(target, config, filters, show_progress=progress).summary()
    except LangfuseIngestError as exc:
        raise fail(str(exc)) from None
    summary["lake"] = target.root
    _print(summary, as_json)


def register(app: typer.Typer) -> None:
    """Add the `ingest` group (with `ingest langfuse`) to the `trajlake` app."""
    ingest_app.command("langfuse")(langfuse)
    app.add_typer(ingest_app, name="ingest")
