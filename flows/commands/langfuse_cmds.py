"""`trajlake ingest langfuse`: pull traces and scores from a Langfuse server, or import an export file.

Thin: options become a `LangfuseConfig` and `PullFilters` (keys from the environment
when not given), then one library call (`ingest.langfuse.pull_langfuse` or
`import_langfuse_export`), then a summary of what was written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.import_cmds import jsonl
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import build, configured
from flows.config.root import LangfuseSection
from ingest.langfuse.errors import LangfuseIngestError
from ingest.langfuse.export.importer import import_langfuse_export
from ingest.langfuse.pull import pull_langfuse
from ingest.scores import DEFAULT_CATEGORY_VALUES

ingest_app = command_app(
    name="ingest",
    help="Bring traces in from other systems (Langfuse) and conversations from files (JSONL).",
    no_args_is_help=True,
)


def _categories(pairs: list[str]) -> dict[str, float]:
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
    server: LangfuseSection,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Import a JSON/JSONL export (traces, v2 observations, scores) instead of pulling."
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
    target = resolve_lake(lake)
    categories = _categories(category or [])
    try:
        if file is not None:
            report = import_langfuse_export(
                target, file, category_values=categories, show_progress=progress, workers=workers
            )
            summary = dict(report.__dict__)
        else:
            host = server.host
            if host == LangfuseSection.host:  # the declared default: the Langfuse SDK's variables first
                host = os.environ.get("LANGFUSE_HOST") or os.environ.get("LANGFUSE_BASE_URL") or host
            if not server.public_key or not server.secret_key:
                raise fail(
                    "missing Langfuse keys: set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY "
                    "(or --public-key / --secret-key)",
                    2,
                )
            config = build(server, host=host, category_values=categories)
            pull = pull_langfuse(target, config, server.filters, show_progress=progress)
            summary = pull.summary()
    except LangfuseIngestError as exc:
        # A file that cannot be imported is bad input (2); a server that fails is not (1).
        raise fail(str(exc), 2 if isinstance(exc, ValueError | FileNotFoundError) else 1) from None
    summary["lake"] = target.root
    _print(summary, as_json)


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
ingest_app.command("jsonl")(jsonl)
ingest_app.command("langfuse")(configured(langfuse, server="langfuse"))
app.add_typer(ingest_app, name="ingest")
