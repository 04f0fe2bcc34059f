"""`trajlake ingest jsonl`: conversations from chat-format JSONL files, as `source = 'import'` trajectories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import current_settings
from store.errors import StoreError


def jsonl(
    files: Annotated[list[Path], typer.Argument(help="JSONL files: one chat-format conversation per line.")],
    lake: LakeOption = None,
    max_line_bytes: Annotated[
        int, typer.Option("--max-line-bytes", min=1, help="Refuse a line longer than this (bytes).")
    ] = 16 * 1024 * 1024,  # ingest.jsonl.lines.DEFAULT_MAX_LINE_BYTES (a test holds them equal)
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite trajectories already imported with other content.")
    ] = False,
) -> None:
    """Import conversations (OpenAI chat format: `messages`, optional `tools`, `id`, `model`,
    `started_at`, `metadata`, `feedback`) as trajectories; `feedback` becomes `user_feedback`.
    Every line is checked before anything is written (a line over --max-line-bytes, nested over
    100 levels, with a non-finite number, or repeating an id is refused with its file:line);
    secrets are redacted as the collector's redaction settings say; re-importing a file
    changes nothing and commits nothing, and an id already imported with other content is
    refused unless --replace."""
    from ingest.errors import IngestError
    from ingest.jsonl import import_files

    the_lake = resolve_lake(lake)
    redaction = current_settings().collector.redaction  # the collector's rules
    try:
        result = import_files(the_lake, files, redaction, max_line_bytes=max_line_bytes, replace=replace)
    except (IngestError, StoreError) as exc:
        raise fail(str(exc), 2) from None
    if not result.trajectories and not result.feedback:
        typer.echo(
            f"nothing to import: all {result.unchanged} conversations of {result.files} file(s) are "
            f"already in {the_lake.root}, unchanged; nothing was written"
        )
        return
    typer.echo(
        f"imported {result.trajectories} conversations from {result.files} file(s) into {the_lake.root} "
        f"({result.feedback} with feedback; {result.unchanged} already there, unchanged)"
    )
