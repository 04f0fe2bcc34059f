"""How a command stops on an error it explains: one line on stderr, no traceback."""

from __future__ import annotations

import typer


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error without a traceback and return the Exit to raise."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)
