"""Options shared by every command."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from store import DEFAULT_LAKE, Lake

LakeOption = Annotated[
    str | None,
    typer.Option(
        "--lake", help="Lake path or URL (default: $TRAJLAKE_LAKE, then ./lake).", show_default=False
    ),
]


def resolve_lake(lake: str | None) -> Lake:
    """The lake named on the command line, else $TRAJLAKE_LAKE, else the config file's `lake.path`, else ./lake."""
    if lake or os.environ.get("TRAJLAKE_LAKE"):
        return Lake(lake or os.environ["TRAJLAKE_LAKE"])
    from flows.config import config_file_present, load_config

    if config_file_present():
        return Lake(load_config().lake.path)
    return Lake(DEFAULT_LAKE)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error without a traceback and return the Exit to raise."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)
