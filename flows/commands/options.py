"""Options shared by every command, and options derived from the libraries' config declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from flows.settings import ConfigError, Section
from flows.settings_cli import with_options
from store import DEFAULT_LAKE, Lake, LakeUnusable, open_lake

LakeOption = Annotated[
    str | None,
    typer.Option(
        "--lake",
        help=f"Lake path or URL (default: $TRAJLAKE_LAKE, then the config's lake.path, then {DEFAULT_LAKE}).",
        show_default=False,
    ),
]


def lake_settings() -> Any:
    """`[lake]` as in effect: the file, `$TRAJLAKE_LAKE`, the declared defaults."""
    return build("lake", values_for("lake"))


def resolve_lake(lake: str | None, *, must_exist: bool = False) -> Lake:
    """The lake named on the command line, else $TRAJLAKE_LAKE, else the config file's `lake.path`, else
    `store.DEFAULT_LAKE`.

    A path that is a file is refused (exit 2) for every command; commands that only read
    (`must_exist=True`) also refuse a lake that is not there, naming the path, rather than
    report zero rows of an empty one.
    """
    settings = lake_settings()
    try:
        return open_lake(lake or settings.path, sql_lake_only=settings.sql_lake_only, must_exist=must_exist)
    except LakeUnusable as exc:
        raise fail(str(exc), 2) from None


def values_for(key: str) -> dict[str, Any]:
    """A config table's values from the file and environment in effect; a bad one is a clean exit 2."""
    from flows.config import command_defaults

    try:
        return command_defaults(key)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def configured(command: Callable[..., Any], **tables: str | Section) -> Callable[..., Any]:
    """`command` with one option per setting of each config table it names (`replay="replay"`).

    The command receives each table as a dict of values: the options given on the
    command line over the config file and environment (`TRAJLAKE_REPLAY__GROUP_SIZE`);
    what is in neither keeps the library's declared default.
    """
    from flows.config import SECTIONS

    sections = {param: SECTIONS[t] if isinstance(t, str) else t for param, t in tables.items()}

    def file_values(section: Section) -> dict[str, Any]:
        return values_for(section.key) if section.key in SECTIONS else {}

    return with_options(command, sections, file_values)


def build(section: str | Section, values: dict[str, Any], **extra: Any) -> Any:
    """The library config of a table from a command's values; a refused value is a clean exit 2."""
    from flows.config import SECTIONS

    try:
        return (SECTIONS[section] if isinstance(section, str) else section).build(
            values, "command line", **extra
        )
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def quiet_libraries() -> None:
    """Keep the terminal for trajlake's own progress: no library deprecation noise or weight-loading bars."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|transformers|trl|peft)\b.*")
    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error without a traceback and return the Exit to raise."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)
