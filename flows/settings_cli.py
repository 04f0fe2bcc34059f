"""Command-line options derived from settings: one typer option per field of a `Section`, whose
values reach the command as `{field: value}` over what the file and the environment gave
(`flows.settings` holds the declarations and the TOML/environment side)."""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Literal, get_args, get_origin

from flows.settings import ConfigError, Section, coerce, is_callable_type, merge


def cli_parameters(
    section: Section, in_effect: Mapping[str, tuple[Any, str]] | None = None
) -> list[inspect.Parameter]:
    """Typer options for a section's settings (nested sections included); all default to None (= not given).

    `in_effect`: TOML key -> (value, where from) of the keys the file or the environment set; the
    help shows that value, which is what the command uses when the option is left out.
    """
    import typer

    in_effect = in_effect or {}
    params = []
    for setting in [*section.settings, *(s for child in section.children for s in child.settings)]:
        option_type = cli_type(setting.type)
        if option_type is None or setting.name in section.cli_exclude:
            continue  # a dict or other shape with no flag form: TOML only
        if setting.key in in_effect and not setting.env:
            value, source = in_effect[setting.key]
            shown = f" [in effect: {value}, from {source}]"
        elif setting.default in (None, "", (), []) or setting.env:
            shown = ""
        else:
            shown = f" [default: {setting.default}]"
        flags = setting.flag.split()  # the long spelling, then any short ones ("--group-size -g")
        if option_type is bool:
            flags = [f"{flags[0]}/--no-{flags[0].removeprefix('--')}", *flags[1:]]
        info = typer.Option(*flags, help=setting.help + shown, envvar=setting.env, show_default=False)
        params.append(
            inspect.Parameter(
                param_name(setting.flag),
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=typing.Annotated[option_type | None, info],
            )
        )
    return params


def param_name(flag: str) -> str:
    return flag.split()[0].removeprefix("--").replace("-", "_")


def cli_type(tp: Any) -> Any:
    """The click-friendly type of a setting, or None when it has no command-line form."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return cli_type(next(a for a in args if a is not type(None)))
    if origin is Literal or tp in (bool, int, float, str):
        return tp
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return str
    if origin in (list, tuple) and args and args[0] in (str, int, float):
        return list[args[0]]  # type: ignore[valid-type]
    if is_callable_type(tp) or tp is datetime:
        return str
    return None


def cli_values(section: Section, given: Mapping[str, Any], source: str = "command line") -> dict[str, Any]:
    """Constructor arguments from the options a command received (None = not given), checked like TOML."""
    values: dict[str, Any] = {}
    for setting in section.settings:
        raw = given.get(param_name(setting.flag))
        if raw is not None:
            values[setting.name] = coerce(setting.flag, setting.type, raw, source) if not setting.env else raw
    for child in section.children:
        nested = cli_values(child, given, source)
        if nested:
            values[child.key.rsplit(".", 1)[-1]] = nested
    return values


def with_options(
    command: Callable[..., Any],
    sections: Mapping[str, Section],
    values_for: Callable[[Section], dict[str, Any]],
) -> Callable[..., Any]:
    """`command` with one option per setting of each section, receiving each section's values as a dict.

    `sections` maps a parameter of `command` to the section it stands for; the command
    gets `{field: value}` with what the command line gave, over what `values_for(section)`
    (the file and the environment) gave. The declared defaults stay the dataclass's own.
    `values_for` raises `ConfigError` for a bad file and prints nothing: the command reports it,
    once, when it runs (`--help` still works).
    """
    signature = inspect.signature(command)
    hints = typing.get_type_hints(command, include_extras=True)  # resolve postponed annotations here
    kept = [
        p.replace(annotation=hints.get(name, p.annotation))
        for name, p in signature.parameters.items()
        if name not in sections
    ]
    derived = {
        key: cli_parameters(section, shown_in_effect(section, values_for))
        for key, section in sections.items()
    }

    def run(*args: Any, **kwargs: Any) -> Any:
        for key, section in sections.items():
            mine = {p.name: kwargs.pop(p.name) for p in derived[key]}
            try:
                # a bad file or option: one line, not 45 (`--redact-function nosuch.module:fn`), and
                # once: building the help read the file too, and said nothing
                kwargs[key] = merge(values_for(section), cli_values(section, mine))
            except ConfigError as exc:
                import typer

                typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
                raise typer.Exit(2) from None
        return command(*args, **kwargs)

    extra = [p for params in derived.values() for p in params]
    run.__signature__ = signature.replace(parameters=[*kept, *extra], return_annotation=None)  # type: ignore[attr-defined]
    run.__name__, run.__doc__ = command.__name__, command.__doc__
    run.__annotations__ = {p.name: p.annotation for p in [*kept, *extra]}
    return run


def shown_in_effect(
    section: Section, values_for: Callable[[Section], dict[str, Any]]
) -> dict[str, tuple[Any, str]]:
    """TOML key -> (value, source) of what the file and environment set in `section` (and its
    sub-tables), for the help; a configuration that does not read leaves the declared defaults."""
    import os

    from flows.settings import ConfigError, derived_variable

    try:
        values = values_for(section)
    except (ConfigError, SystemExit, Exception):  # the command itself reports a bad file
        return {}
    shown: dict[str, tuple[Any, str]] = {}
    config_file = os.environ.get("TRAJLAKE_CONFIG") or "trajlake.toml"
    for setting in [*section.settings, *(s for child in section.children for s in child.settings)]:
        node: Any = values
        for part in setting.key[len(section.key) + 1 :].split("."):
            node = node.get(part, _MISSING) if isinstance(node, Mapping) else _MISSING
        if node is _MISSING:
            continue
        variable = setting.variable or derived_variable(setting.key)
        shown[setting.key] = (node, f"${variable}" if variable in os.environ else config_file)
    return shown


_MISSING = object()
