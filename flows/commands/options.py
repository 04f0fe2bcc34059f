"""Options shared by every command, and options derived from the libraries' config declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from flows.settings import ConfigError, Section, derived_variable
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
        from flows.config import command_defaults

        return command_defaults(section.key) if section.key in SECTIONS else {}

    return with_options(command, sections, file_values)


def build(section: str | Section, values: dict[str, Any], **extra: Any) -> Any:
    """The library config of a table from a command's values; a refused value is a clean exit 2
    naming where it came from: the command line, or the file (or variable) that set it."""
    from flows.config import SECTIONS

    chosen = SECTIONS[section] if isinstance(section, str) else section
    try:
        return chosen.build(values, "command line", **extra)
    except ConfigError as exc:
        raise fail(str(blamed(chosen, values, exc, extra)), 2) from None


def blamed(
    section: Section, values: dict[str, Any], error: ConfigError, extra: dict[str, Any]
) -> ConfigError:
    """`error` (raised building `section` from a command's `values`) naming the file or variable
    the refused value came from when the command line did not give it.

    When the library names no field, the file's values alone are built: refused too, the file is
    at fault (and the key is the field the message names, when it names one of the section's)."""
    from flows.config import SECTIONS, command_defaults, setting_in_effect

    if section.key not in SECTIONS:
        return error
    from_file = command_defaults(section.key)
    prefix = f"{section.key}."
    name = (error.field or "").removeprefix(prefix) if (error.field or "").startswith(prefix) else None
    if name is not None:
        top = name.split(".")[0]
        if top in values and values[top] != from_file.get(top, _UNSET):
            return error  # the command line gave it
    else:
        try:
            section.build(from_file, "file", **extra)
            return error  # the file's values build: the command line's broke them
        except ConfigError:
            pass
        name = next(
            (s.name for s in section.settings if f"`{s.name}`" in error.detail and s.name in from_file), None
        )
    key = f"{prefix}{name}" if name else section.key
    source = setting_in_effect(key)[1] if name and "." not in name else _file_source()
    return ConfigError(key, error.detail, source)


def _file_source() -> str:
    import os

    from flows.config import DEFAULT_CONFIG_FILE

    return os.environ.get("TRAJLAKE_CONFIG") or DEFAULT_CONFIG_FILE


_UNSET = object()


def in_effect_help(key: str, text: str) -> str:
    """`text` with the value setting `key` has when the option is left out, and where it comes from
    (the help of an option that stands for a configuration key, as `configured` options show)."""
    from flows.config import setting_in_effect

    try:
        value, source = setting_in_effect(key)
    except ConfigError:  # the command reports a bad file when it runs
        return text
    if source == "default" or value in (None, ""):
        return text
    return f"{text} [in effect: {value}, from {source}]"


def option_or_setting(given: str | None, key: str, flag: str, meaning: str) -> str:
    """The option's value, else the configured `key`'s; neither: exit 2 saying how to give one."""
    from flows.config import setting_in_effect

    if given:
        return given
    try:
        value, _ = setting_in_effect(key)
    except ConfigError as exc:
        raise fail(str(exc), 2) from None
    if not value:
        table, _, name = key.rpartition(".")
        raise fail(
            f"{flag} is required: {meaning}; or set `{name}` in `[{table}]` of trajlake.toml "
            f"(${derived_variable(key)})",
            2,
        )
    return str(value)


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
