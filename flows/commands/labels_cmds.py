"""`trajlake labels import`: labels (the right answer, or a verdict) and the users' feedback from
JSONL files into the lake."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from store.errors import StoreError

labels_app = command_app(
    help="Labels: what a conversation's right answer was (`labels` table), from files or with feedback.",
    no_args_is_help=True,
)


def import_(
    files: Annotated[list[Path], typer.Argument(help="JSONL files: one label object per line.")],
    lake: LakeOption = None,
) -> None:
    """Import labels and feedback: per line `trajectory_id` or `trace_id`, and `expected` (the right
    answer, any JSON), `verdict` (0..1 or a boolean) and/or `feedback` (the user's score, a number
    or a boolean: the conversation's `user_feedback` reward, as `ingest.feedback` sends it);
    optionally `name`, `user_id`, `labeled_by`, `comment`, `labeled_at`, `source` (`file` or
    `person`), `metadata`. Every line is checked before anything is written; a bad line is refused
    with its file:line (exit 2). Scenarios take a labelled conversation's `expected` from its label."""
    from ingest.errors import IngestError
    from ingest.labels import import_labels

    the_lake = resolve_lake(lake)
    try:
        result = import_labels(the_lake, files)
    except (IngestError, StoreError) as exc:
        raise fail(str(exc), 2) from None
    if not result.labels and not result.feedback:
        raise fail(f"{', '.join(map(str, files))}: no labels (empty file); nothing was written", 2)
    typer.echo(
        f"imported {result.labels} labels and {result.feedback} feedback from {result.files} file(s) into "
        f"{the_lake.root} ({result.matched} of their conversations are in the lake)"
    )


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
labels_app.command("import")(import_)
app.add_typer(labels_app, name="labels")
