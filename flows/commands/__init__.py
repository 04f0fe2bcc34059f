"""One module per stage, each exposing `register(app)`; shared options live in `options.py`."""

from __future__ import annotations

from typing import Any

import typer


def command_app(**options: Any) -> typer.Typer:
    """A typer app of trajlake's commands: no shell-completion commands, and click's plain help,
    which reads well at 80 columns (rich's option table cuts long option names short there and
    lists `--help` with a type)."""
    return typer.Typer(add_completion=False, rich_markup_mode=None, **options)
