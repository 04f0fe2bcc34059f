"""Replay commands: `trajlake scenarios create|load`, `trajlake replay`, hidden `trajlake tiny-model`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def tiny_model(
    path: Annotated[Path, typer.Argument(help="Folder to build the tiny model and tokenizer into.")],
    seed: Annotated[int, typer.Option(help="Seed of the random weights and the tokenizer corpus.")] = 0,
) -> None:
    """Build the tiny Qwen2-style test model (offline, deterministic, a no-op if already built)."""
    from training.tiny import build_tiny_model

    typer.echo(str(build_tiny_model(path, seed=seed)))


def register(app: typer.Typer) -> None:
    """Add this stage's commands to the `trajlake` app."""
    app.command("tiny-model", hidden=True)(tiny_model)
