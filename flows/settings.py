"""Settings declared once: TOML keys, environment overrides, `trajlake config` and CLI options,
all derived from the dataclass fields where each library declares its settings.

A library owns its settings the way TRL does: a dataclass field with its default and a
`metadata={"help": ...}` text (`ReplayConfig.group_size`, `TrajlakeSFTConfig.lora_r`,
TRL's own `learning_rate`). A `Section` names such a dataclass under a TOML table
(`[replay]`, `[train.sft]`) and, for configs with hundreds of fields (TRL's), the few a
user sets there. Everything else is derived:

- TOML: `[replay] group_size = 8` is checked against the field's type;
- environment: `TRAJLAKE_REPLAY__GROUP_SIZE=8` (double underscore between levels);
- CLI: `trajlake replay --group-size 8` (`flows.settings_cli` builds the options);
- `trajlake config`: every key, its default and its help.

Precedence: CLI option > environment > TOML file > the declared default. Secrets (a
field with `metadata={"env": "VAR"}`) never live in the file: its TOML key is
`<field>_env`, the name of the environment variable that holds the value (default
`VAR`). Nested dataclass fields are TOML sub-tables (`[collector.redaction]`). A field
typed as a callable takes an import path `package.module:function`.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import re
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal, get_args, get_origin

from store.errors import SettingError

ENV_PREFIX = "TRAJLAKE_"


class ConfigError(SettingError):
    """A configuration key is unknown, mistyped or out of range. Nothing has run.

    `field` is the full TOML key (`replay.sampling.temperature`), `source` where the value came from.
    """

    def __init__(self, key: str, detail: str, source: str) -> None:
        super().__init__(f"bad configuration `{key}` ({source}): {detail}", field=key)
        self.source = source
        self.detail = detail


@dataclass(frozen=True)
class Setting:
    """One user-facing setting: a field of a library dataclass under a TOML key."""

    key: str  # full TOML key, e.g. "train.sft.learning_rate"
    name: str  # the dataclass field
    type: Any
    default: Any
    help: str
    env: str | None = None  # a secret: the default environment variable that holds it
    flag: str = ""  # CLI spelling, e.g. "--lr"
    variable: str | None = None  # the override variable it declares instead of TRAJLAKE_<TABLE>__<KEY>
    is_path: bool = False  # a local path: `./x` or `../x` in a config file is relative to that file

    @property
    def toml_key(self) -> str:
        return f"{self.key}_env" if self.env else self.key


@dataclass(frozen=True)
class Section:
    """A TOML table whose keys are fields of one dataclass (imported only when needed)."""

    key: str
    target: str  # "package.module:Class"
    fields: tuple[str, ...] = ()  # the fields users set ((): all but `exclude`)
    exclude: tuple[str, ...] = ()
    flags: Mapping[str, str] = field(default_factory=dict)  # field -> CLI spelling
    cli_prefix: str = ""  # "judge": --judge-model
    cli_exclude: tuple[str, ...] = ()  # settings a command takes its own way (a file path, say)

    @cached_property
    def cls(self) -> type:
        return import_path(self.target)

    @cached_property
    def settings(self) -> list[Setting]:
        """The exposed fields, in declaration order (nested dataclasses are separate sections)."""
        hints = typing.get_type_hints(self.cls)
        chosen = []
        for f in dataclasses.fields(self.cls):
            if (self.fields and f.name not in self.fields) or f.name in self.exclude or not f.init:
                continue
            if dataclasses.is_dataclass(hints[f.name]):
                continue
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            prefix = f"--{self.cli_prefix}-" if self.cli_prefix else "--"
            chosen.append(
                Setting(
                    key=f"{self.key}.{f.name}",
                    name=f.name,
                    type=hints[f.name],
                    default=None if default is dataclasses.MISSING else default,
                    help=first_sentence(f.metadata.get("help", "")),
                    env=f.metadata.get("env"),
                    variable=f.metadata.get("variable"),
                    is_path=bool(f.metadata.get("path")),
                    flag=self.flags.get(f.name) or prefix + f.name.replace("_", "-"),
                )
            )
        return chosen

    @cached_property
    def children(self) -> list[Section]:
        """Sub-tables for fields that are dataclasses themselves (`collector.redaction`)."""
        hints = typing.get_type_hints(self.cls)
        return [
            Section(
                f"{self.key}.{f.name}",
                f"{hints[f.name].__module__}:{hints[f.name].__qualname__}",
                cli_prefix=f.metadata.get("cli_prefix", f.name),
            )
            for f in dataclasses.fields(self.cls)
            if dataclasses.is_dataclass(hints[f.name]) and f.name not in self.exclude
        ]

    def parse(self, data: Mapping[str, Any], environ: Mapping[str, str], source: str) -> dict[str, Any]:
        """Validated constructor arguments from one TOML table (secrets read from `environ`)."""
        by_key = {s.toml_key.rsplit(".", 1)[-1]: s for s in self.settings}
        children = {c.key.rsplit(".", 1)[-1]: c for c in self.children}
        unknown = [k for k in data if k not in by_key and k not in children]
        if unknown:
            keys = ", ".join([*by_key, *children])
            raise ConfigError(f"{self.key}.{unknown[0]}", f"unknown key; `{self.key}` has: {keys}", source)
        values: dict[str, Any] = {}
        for name, raw in data.items():
            if name in children:
                if not isinstance(raw, Mapping):
                    raise ConfigError(f"{self.key}.{name}", f"expected a table, got {raw!r}", source)
                values[name] = children[name].parse(raw, environ, source)
                continue
            setting = by_key[name]
            if setting.env:
                variable = coerce(setting.toml_key, str, raw, source)
                if not environ.get(variable):
                    raise ConfigError(setting.toml_key, f"${variable} is not set", "environment")
                values[setting.name] = environ[variable]
            else:
                values[setting.name] = coerce(setting.key, setting.type, raw, source)
        return values

    def build(self, values: Mapping[str, Any], source: str, **extra: Any) -> Any:
        """The dataclass from `values` (sub-tables built too); its own checks' errors name this section."""
        kwargs = dict(values)
        for child in self.children:
            name = child.key.rsplit(".", 1)[-1]
            if name in kwargs:
                kwargs[name] = child.build(kwargs[name], source)
        try:
            return self.cls(**{**kwargs, **extra})
        except (ValueError, TypeError) as exc:
            failed = exc.field if isinstance(exc, SettingError) else None
            raise ConfigError(f"{self.key}.{failed}" if failed else self.key, str(exc), source) from None


# --- types ----------------------------------------------------------------------------------------


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<=[a-z0-9)`'\]])\. (?=[A-Z`])")


def first_sentence(text: str) -> str:
    """The first sentence of a (possibly long, TRL-style) help text.

    >>> first_sentence("Overrides `num_train_epochs`. If set to a positive number, ...")
    'Overrides `num_train_epochs`.'
    >>> first_sentence("Model name (e.g. `o3`, or a served one). More.")
    'Model name (e.g. `o3`, or a served one).'
    """
    text = " ".join(text.split())
    match = _SENTENCE_END.search(text)
    return text if match is None else text[: match.start() + 1]


def import_path(spec: str) -> Any:
    """`package.module:attribute` -> the object."""
    module, _, attribute = spec.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


def type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if get_origin(tp) in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))


def is_callable_type(tp: Any) -> bool:
    return tp is Callable or get_origin(tp) is getattr(Callable, "__origin__", Callable)


def coerce(key: str, tp: Any, value: Any, source: str) -> Any:
    """`value` as type `tp`, or a `ConfigError` naming the key, the value and the type."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for member in (a for a in args if a is not type(None)):
            try:
                return coerce(key, member, value, source)
            except ConfigError:
                continue
    elif origin is Literal:
        if value in args:
            return value
        raise ConfigError(key, f"got {value!r}; allowed: {type_name(tp)}", source)
    elif tp is Any:
        return value
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            raise ConfigError(
                key, f"got {value!r}; allowed: {', '.join(m.value for m in tp)}", source
            ) from None
    elif origin in (list, tuple) and isinstance(value, (list, tuple)):
        items = [coerce(f"{key}[{i}]", args[0] if args else Any, v, source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    elif origin is dict and isinstance(value, Mapping):
        return {str(k): coerce(f"{key}.{k}", args[1] if args else Any, v, source) for k, v in value.items()}
    elif tp is datetime and isinstance(value, (str, datetime)):
        try:
            parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(
                key, f"`{value}` is not an ISO-8601 time (e.g. 2026-11-01T12:00:00Z)", source
            ) from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    elif is_callable_type(tp) and isinstance(value, str):
        try:
            function = import_path(value)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(
                key, f"`{value}` cannot be imported ({exc}); write `package.module:function`", source
            ) from None
        if callable(function):
            return function
    raise ConfigError(key, f"expected {type_name(tp)}, got {value!r} ({type(value).__name__})", source)


# --- sources ----------------------------------------------------------------------------------------


def derived_variable(key: str) -> str:
    """The override variable of TOML key `key`: `train.grpo.beta` -> `TRAJLAKE_TRAIN__GRPO__BETA`."""
    return ENV_PREFIX + key.upper().replace(".", "__")


def env_overrides(environ: Mapping[str, str], declared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Nested dict of `TRAJLAKE_SECTION__KEY=value` overrides (values parsed as TOML values when they parse).

    `declared` maps the variables settings declare for themselves to their keys
    (`TRAJLAKE_LAKE` -> `lake.path`); such a setting is read from that variable only, and its
    derived name is refused, so one setting never has two variables.
    """
    declared = declared or {}
    derived = {derived_variable(key): variable for variable, key in declared.items()}
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if name in derived:
            variable = derived[name]
            raise ConfigError(
                declared[variable],
                f"`${name}` is not read: this setting's variable is `${variable}`",
                "environment",
            )
        if name in declared and raw:
            path = declared[name].split(".")
        elif name.startswith(ENV_PREFIX) and "__" in name:
            path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        else:
            continue
        value: Any = raw  # a declared variable holds its value as written (`TRAJLAKE_LAKE=2026`: a folder)
        if name not in declared:
            try:
                value = tomllib.loads(f"v = {raw}")["v"]
            except tomllib.TOMLDecodeError:
                pass
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it, tables merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def table_at(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    """The (possibly nested) table `key` ("train.sft") of parsed TOML, or an empty one."""
    node: Any = data
    path = []
    for part in key.split("."):
        path.append(part)
        node = node.get(part, {})
        if not isinstance(node, Mapping):
            raise ConfigError(".".join(path), f"expected a table, got {node!r}", source)
    return node
