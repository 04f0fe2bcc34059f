"""The lake every command reads or writes: `--lake`, and `[lake]` as in effect.

Apart from the other shared options (`flows.commands.options`) so that the commands that only
open the lake (`trajlake sql`, `tables`, `forget`) import no more than `[lake]` needs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flows.commands.exits import fail
from flows.config.errors import ConfigError
from flows.config.lake import load_lake
from flows.config.sections import LakeSettings
from store.errors import LakeUnusable
from store.lake import DEFAULT_LAKE, Lake, open_lake

LakeOption = Annotated[
    str | None,
    typer.Option(
        "--lake",
        help=f"Lake path or URL (default: $TRAJLAKE_LAKE, then the config's lake.path, then {DEFAULT_LAKE}).",
        show_default=False,
    ),
]


def lake_settings() -> LakeSettings:
    """`[lake]` as in effect: `$TRAJLAKE_LAKE`, the environment, the file, the declared defaults."""
    try:
        return load_lake()
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def resolve_lake(lake: str | None, *, must_exist: bool = False) -> Lake:
    """The lake named on the command line, else $TRAJLAKE_LAKE, else the config file's `lake.path`, else
    `store.lake.DEFAULT_LAKE`.

    A path that is a file is refused (exit 2) for every command; commands that only read
    (`must_exist=True`) also refuse a lake that is not there, naming the path, rather than
    report zero rows of an empty one.
    """
    settings = lake_settings()
    try:
        return open_lake(lake or settings.path, sql_lake_only=settings.sql_lake_only, must_exist=must_exist)
    except LakeUnusable as exc:
        raise fail(str(exc), 2) from None
