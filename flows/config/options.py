"""Command-line options of the settings: one typer option per field of a section a command reads,
and the section the command receives, built by `load_settings` with the options given as the
command-line source (so an option beats the environment, which beats the file).

A command declares the sections it takes (`configured(replay_command, replay="replay")`); the
option's help shows the value in effect when it is left out and where it came from.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args, get_origin

import typer
from pydantic import TypeAdapter, ValidationError

from flows.config.errors import ConfigError
from flows.config.keys import first_sentence
from flows.config.naming import dataclass_fields, lookup
from flows.config.trainers import TRAIN_FLAGS, TRAINERS


@dataclass(frozen=True)
class Spelling:
    """How one section's fields are spelled on the command line."""

    flags: Mapping[str, str] = field(default_factory=dict)  # field key -> "--flag -f"
    exclude: tuple[str, ...] = ()  # fields a command takes its own way (a file path, say)


# By section (or, for a command's own dataclass, its class name); keys are relative to the
# section; a nested dataclass field's options are `--<cli_prefix>-<name>`.
SPELLINGS: dict[str, Spelling] = {
    "collector": Spelling({"bearer_token": "--token", "idle_timeout_s": "--idle-timeout"}, ("lake",)),
    "langfuse": Spelling(
        {
            "observations_page_size": "--page-size",
            "filters.environments": "--environment",
            "filters.tags": "--tag",
            "filters.user_id": "--user",
            "filters.session_id": "--session",
        },
        ("category_values",),
    ),
    "replay": Spelling({"group_size": "--group-size -g"}, ("greedy",)),
    "tools": Spelling({"recorded": "--recorded-tools"}),
    "serve_sampler": Spelling({"limits.max_tokens": "--max-tokens-limit"}),
    "judge": Spelling(
        {"use_cache": "--cache", "max_attempts": "--max-attempts", "concurrency": "--concurrency"},
        ("rubric",),
    ),
    "CompactConfig": Spelling({"tables": "--table -t"}),  # `trajlake compact`'s own
    "train.sft": Spelling(TRAIN_FLAGS),
    "train.grpo": Spelling(TRAIN_FLAGS),
}
PREFIXES = {"judge": "judge"}  # `--judge-model`: the judge's options beside the command's own


@dataclass(frozen=True)
class Option:
    """One option: the field it sets (relative to its section), its flag, type, default and help."""

    key: str
    flag: str
    type: Any
    default: Any
    help: str
    env: str | None = None

    @property
    def param(self) -> str:
        return self.flag.split()[0].removeprefix("--").replace("-", "_")


def section_options(section: str, cls: Any, fields: tuple[str, ...] = ()) -> list[Option]:
    """The options of `section` (declared by dataclass `cls`; `fields`: only these)."""
    spelling = SPELLINGS.get(section, Spelling())
    prefix = PREFIXES.get(section, "")
    options = []
    for key, f, tp in dataclass_fields(cls):
        top = key.split(".")[0]
        if dataclasses.is_dataclass(tp) or (fields and key not in fields) or top in spelling.exclude:
            continue
        if key in spelling.exclude or cli_type(tp) is None:
            continue  # a dict or other shape with no flag form: TOML only
        if key in spelling.flags:
            flag = spelling.flags[key]
        else:
            parts = key.split(".")
            nested = ""
            if len(parts) > 1:
                parent = next(g for g in dataclasses.fields(cls) if g.name == parts[0])
                nested = parent.metadata.get("cli_prefix", parts[0])
            words = [w for w in (prefix, nested, parts[-1].replace("_", "-")) if w]
            flag = "--" + "-".join(words)
        default = None
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        elif f.default is not dataclasses.MISSING:
            default = f.default
        options.append(
            Option(key, flag, tp, default, first_sentence(f.metadata.get("help", "")), f.metadata.get("env"))
        )
    return options


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
    if tp is datetime or tp is Callable or origin is getattr(Callable, "__origin__", Callable):
        return str
    return None


def typer_parameter(option: Option, in_effect: Mapping[str, tuple[Any, str]], key: str) -> inspect.Parameter:
    """The typer option of `option` (`key`: its full TOML key), defaulting to None (= not given)."""
    option_type = cli_type(option.type)
    if key in in_effect and not option.env:
        value, source = in_effect[key]
        shown = f" [in effect: {value}, from {source}]"
    elif option.default in (None, "", (), []) or option.env:
        shown = ""
    else:
        shown = f" [default: {option.default}]"
    flags = option.flag.split()
    if option_type is bool:
        flags = [f"{flags[0]}/--no-{flags[0].removeprefix('--')}", *flags[1:]]
    info = typer.Option(*flags, help=option.help + shown, envvar=option.env, show_default=False)
    return inspect.Parameter(
        option.param,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=typing.Annotated[option_type | None, info],
    )


def options_of(section: str | type) -> tuple[str, list[Option]]:
    """(TOML key or "", options) of a section of `Settings` (`"replay"`) or a command's own dataclass."""
    if not isinstance(section, str):
        return "", section_options(section.__name__, section)
    if section.startswith("train."):
        import importlib

        module, name, fields = TRAINERS[section.removeprefix("train.")]
        return section, section_options(section, getattr(importlib.import_module(module), name), fields)
    from flows.config.root import Settings

    node: Any = Settings.model_fields[section.split(".")[0]].annotation
    for part in section.split(".")[1:]:
        node = typing.get_type_hints(node)[part]
    return section, section_options(section, node)


def given_values(options: list[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Nested `{field: value}` of the options given (None: not given)."""
    out: dict[str, Any] = {}
    for option in options:
        value = given.get(option.param)
        if value is None:
            continue
        node = out
        *parents, name = option.key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = value
    return out


def nest(key: str, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = values
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def configured(command: Callable[..., Any], **sections: str | type) -> Callable[..., Any]:
    """`command` with one option per field of each section it names (`replay="replay"`), receiving
    each as the typed section (a command's own dataclass built from its options alone).

    `Settings` reads the options as its command-line source: what an option leaves out is
    the environment's, else the file's, else the declared default. A bad value exits 2 with one
    line naming the key and where it came from (printed once: `--help` says nothing of it).
    """
    from flows.config.root import in_effect as values_in_effect

    signature = inspect.signature(command)
    hints = typing.get_type_hints(command, include_extras=True)
    kept = [
        p.replace(annotation=hints.get(name, p.annotation))
        for name, p in signature.parameters.items()
        if name not in sections
    ]
    try:
        shown = values_in_effect()
    except ConfigError:  # the command reports a bad file when it runs
        shown = {}
    derived = {param: options_of(section) for param, section in sections.items()}
    parameters = {
        param: [typer_parameter(o, shown, f"{key}.{o.key}" if key else "") for o in options]
        for param, (key, options) in derived.items()
    }

    def run(*args: Any, **kwargs: Any) -> Any:
        from flows.config.root import load_settings

        given = {param: {p.name: kwargs.pop(p.name) for p in parameters[param]} for param in sections}
        command_line: dict[str, Any] = {}
        for param, (key, options) in derived.items():
            values = given_values(options, given[param])
            if key and values:
                command_line = _merge(command_line, nest(key, values))
        try:
            settings = load_settings(None, command_line)
            for param, (key, options) in derived.items():
                section = sections[param]
                if isinstance(section, type):
                    kwargs[param] = _own_section(section, options, given[param])
                elif key.startswith("train."):
                    kwargs[param] = settings.train
                else:
                    kwargs[param] = _at(settings, key)
        except ConfigError as exc:
            if exc.source == "command line":  # the option's value: name the option
                flag = next(
                    (
                        o.flag.split()[0]
                        for key, options in derived.values()
                        for o in options
                        if f"{key}.{o.key}" == exc.field
                    ),
                    exc.field,
                )
                exc = ConfigError(flag or "(command line)", exc.detail, exc.source)
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2) from None
        return command(*args, **kwargs)

    extra = [p for params in parameters.values() for p in params]
    run.__signature__ = signature.replace(parameters=[*kept, *extra], return_annotation=None)  # type: ignore[attr-defined]
    run.__name__, run.__doc__ = command.__name__, command.__doc__
    run.__annotations__ = {p.name: p.annotation for p in [*kept, *extra]}
    return run


def _own_section(cls: type, options: list[Option], given: Mapping[str, Any]) -> Any:
    """A command's own dataclass from its options, checked by pydantic and the class itself."""
    values = given_values(options, given)
    try:
        return TypeAdapter(cls).validate_python(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        detail = str(cause) if cause else error["msg"]
        name = getattr(cause, "field", None) or ".".join(str(p) for p in error["loc"])
        # no field named: the one the message names, else the one option given
        named = [o for o in options if o.key == name or (not name and f"`{o.key}`" in detail)]
        named = named or [o for o in options if not name and given.get(o.param) is not None]
        flag = named[0].flag.split()[0] if len(named) == 1 else name or cls.__name__
        raise ConfigError(flag, detail, "command line") from None


def _at(settings: Any, key: str) -> Any:
    node = settings
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def value_in_effect(key: str) -> tuple[Any, str]:
    """The value a command uses for `key` (`select.scenarios`) when no option gives it, and where it
    comes from (`default`, the file, `$VARIABLE`); a bad configuration is a `ConfigError`."""
    from flows.config.root import in_effect, load_settings

    value = _at(load_settings(), key)
    found = in_effect()
    return value, found[key][1] if key in found else "default"


__all__ = ["configured", "lookup", "value_in_effect"]
