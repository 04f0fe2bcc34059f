"""Commands of this stage (filled in by the stage's owner)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this stage's commands to the `trajlake` app."""
