"""`trajlake ingest jsonl`: conversations from chat-format JSONL files, as `source = 'import'` trajectories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands.options import LakeOption, build, fail, resolve_lake, values_for


def jsonl(
    files: Annotated[list[Path], typer.Argument(help="JSONL files: one chat-format conversation per line.")],
    lake: LakeOption = None,
) -> None:
    """Import conversations (OpenAI chat format: `messages`, optional `tools`, `id`, `model`,
    `started_at`, `metadata`, `feedback`) as trajectories; `feedback` becomes `user_feedback`.
    Every line is checked before anything is written; secrets are redacted as the collector's
    collector's redaction settings say; re-importing a file changes nothing."""
    from ingest.errors import IngestError
    from ingest.jsonl import import_files
    from store import StoreError

    the_lake = resolve_lake(lake)
    redaction = build("collector", values_for("collector")).redaction  # the collector's rules
    try:
        result = import_files(the_lake, files, redaction)
    except (IngestError, StoreError) as exc:
        raise fail(str(exc), 2) from None
    typer.echo(
        f"imported {result.trajectories} conversations from {result.files} file(s) into {the_lake.root} "
        f"({result.feedback} with feedback)"
    )
