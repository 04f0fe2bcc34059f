"""`Settings`: the whole configuration as one typed object, each section an attribute.

A section is the dataclass its library declares (`settings.replay` is
`training.replay.ReplayConfig`, `settings.judge` is `judging.JudgeConfig`), or one of the
flow's own (`flows.config.sections`); its fields, defaults, checks and help live there, once.
pydantic-settings validates each section with the library's own `__post_init__` checks and
merges the sources, in precedence: command line > environment > `trajlake.toml` > defaults.

TRL's arguments stay TRL's: `[train.sft]` and `[train.grpo]` hold overrides of the few TRL
fields a user sets in the file, checked against TRL's declarations when a trainer's config is
built (`Settings.train.sft_config`), so reading the configuration never imports TRL.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from flows.config.errors import ConfigError
from flows.config.naming import ENV_PREFIX, NESTED, config_file, lookup, section_fields, variable_of
from flows.config.sections import (
    EvaluateSettings,
    LakeSettings,
    PipelineSettings,
    Schedules,
    ScoreSettings,
    Selections,
)
from flows.config.sources import DeclaredVariables, Environment, TomlFile
from flows.config.trainers import TrainSettings
from ingest.langfuse.config import LangfuseConfig, PullFilters
from ingest.otlp.config import CollectorConfig
from judging.config import JudgeConfig
from store.erasure.retention import RetentionConfig
from store.errors import SettingError
from training.publish import PublishConfig
from training.replay.rollout.request_limits import RequestLimits
from training.replay.rollout.tools import ToolsConfig
from training.replay.samplers import SamplerConfig
from training.replay.samplers.base import SamplingParams
from training.replay.scenarios import ScenarioConfig
from training.replay.stage import ReplayConfig


@dataclass
class LangfuseSection(LangfuseConfig):
    """`[langfuse]`: the server and how to pull, with what to pull in `[langfuse.filters]`."""

    filters: PullFilters = field(
        default_factory=PullFilters, metadata={"help": "Which traces to pull.", "cli_prefix": ""}
    )


@dataclass(frozen=True)
class ServeSamplerSection(SamplingParams):
    """`[serve_sampler]`: the sampling parameters of requests that set none, and in
    `[serve_sampler.limits]` what one request may ask for."""

    limits: RequestLimits = field(
        default_factory=RequestLimits, metadata={"help": "What one request may ask for.", "cli_prefix": ""}
    )

    def sampling(self) -> SamplingParams:
        """The request defaults as the samplers take them."""
        return SamplingParams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SamplingParams)})


# Fields of a library's section that the configuration sets from another key: one setting, one key.
DERIVED = {
    "collector.lake": "lake.path",  # the collector writes the lake every command reads
    "replay.greedy": "evaluate.greedy",  # the evaluation's own choice, not a replay setting
}


class Settings(BaseSettings):
    """Every section of trajlake's configuration, as the sources in effect give it."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED,
        extra="forbid",
        frozen=True,
        nested_model_default_partial_update=True,
    )

    lake: LakeSettings = LakeSettings()
    retention: RetentionConfig = RetentionConfig()
    collector: CollectorConfig = CollectorConfig()
    langfuse: LangfuseSection = LangfuseSection()
    scenarios: ScenarioConfig = ScenarioConfig()
    sampler: SamplerConfig = SamplerConfig()
    replay: ReplayConfig = ReplayConfig()
    tools: ToolsConfig = ToolsConfig()
    serve_sampler: ServeSamplerSection = ServeSamplerSection()
    judge: JudgeConfig = JudgeConfig()
    train: TrainSettings = TrainSettings()
    publish: PublishConfig = PublishConfig()
    select: Selections = Selections()
    score: ScoreSettings = ScoreSettings()
    evaluate: EvaluateSettings = EvaluateSettings()
    pipeline: PipelineSettings = PipelineSettings()
    schedules: Schedules = Schedules()

    @model_validator(mode="before")
    @classmethod
    def _secrets(cls, data: Any) -> Any:
        """A secret's key in the file is `<field>_env`, the variable that holds it: read it now."""
        if not isinstance(data, dict):
            return data
        for key, instead in DERIVED.items():
            if lookup(data, key)[0]:
                raise SettingError(f"not a key of its own: set `{instead}`", field=key)
        for key, _, tp in section_fields(cls):
            present, value = lookup(data, key)
            if present and isinstance(value, str) and takes_callable(tp):
                *parents, name = key.split(".")
                lookup(data, ".".join(parents))[1][name] = import_callable(key, value)
        for key, f, _ in section_fields(cls):
            if "env" not in f.metadata:
                continue
            *parents, name = key.split(".")
            present, table = lookup(data, ".".join(parents))
            if not present or not isinstance(table, dict) or f"{name}_env" not in table:
                continue
            variable = table.pop(f"{name}_env")
            if not isinstance(variable, str) or not os.environ.get(variable):
                raise SettingError(f"${variable} is not set", field=f"{key}_env")
            table[name] = os.environ[variable]
        return data

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """`Settings()`: the sources of `load_settings()` (which names the file)."""
        return tuple(source for _, source in sources(settings_cls, init_settings, config_file()))

    @model_validator(mode="after")
    def _one_lake(self) -> Settings:
        return self._collector_writes_the_lake()

    def _collector_writes_the_lake(self) -> Settings:
        if self.collector.lake != self.lake.path:  # frozen: set once, while the object is being built
            object.__setattr__(self, "collector", dataclasses.replace(self.collector, lake=self.lake.path))
        return self

    def with_values(self, section: str, **values: Any) -> Settings:
        """These settings with some fields of `section` replaced (a command's options, a stage's
        own choice); a value the section refuses is a `ConfigError` naming the key."""
        try:
            replaced = dataclasses.replace(getattr(self, section), **values)
        except SettingError as exc:
            key = f"{section}.{exc.field}" if exc.field else section
            raise ConfigError(key, str(exc), "command line") from None
        return self.model_copy(update={section: replaced})._collector_writes_the_lake()

    def with_lake(self, lake: str | None) -> Settings:
        """These settings with `lake.path` replaced when a `--lake` option was given."""
        return self.with_values("lake", path=lake) if lake else self


def takes_callable(tp: Any) -> bool:
    """Whether a field's type is a function (`Callable[[str], str] | None`): written as an import path."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return any(takes_callable(a) for a in typing.get_args(tp))
    return tp is Callable or typing.get_origin(tp) is Callable


def import_callable(key: str, spec: str) -> Callable[..., Any]:
    """The function `package.module:function` names; else a `SettingError` naming `key`."""
    module, _, attribute = spec.partition(":")
    try:
        function: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            function = getattr(function, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SettingError(
            f"`{spec}` cannot be imported ({exc}); write `package.module:function`", field=key
        ) from None
    if not attribute or not callable(function):
        raise SettingError(f"`{spec}` is not a function; write `package.module:function`", field=key)
    return function  # type: ignore[no-any-return]


def sources(
    settings_cls: type[BaseSettings], command_line: PydanticBaseSettingsSource, file: Path | None
) -> list[tuple[str, PydanticBaseSettingsSource]]:
    """(name, source) in precedence order: what `trajlake config` says a value came from."""
    return [
        ("command line", command_line),
        ("environment", DeclaredVariables(settings_cls)),
        ("environment", Environment(settings_cls)),
        (str(file) if file else "trajlake.toml", TomlFile(settings_cls, file)),
    ]


def load_settings(
    path: str | os.PathLike[str] | None = None, command_line: Mapping[str, Any] | None = None
) -> Settings:
    """The settings in effect: `command_line` values (`{"replay": {"group_size": 8}}`) over the
    environment over the TOML file (`path`, `$TRAJLAKE_CONFIG`, `./trajlake.toml`) over the defaults.

    A bad value is one `ConfigError` naming the key and where it came from (the file, the
    variable or the command line).
    """
    file = config_file(path)
    given = dict(command_line or {})
    try:
        chosen = sources(Settings, InitSettingsSource(Settings, given), file)
        # `_build_sources` is BaseSettings' documented argument, which mypy's view of the fields lacks
        return Settings(_build_sources=(tuple(source for _, source in chosen), given))  # type: ignore[call-arg]
    except ValidationError as exc:
        raise config_error(exc, file, given) from None
    except ConfigError:
        raise
    except SettingError as exc:  # raised before validation (a secret's variable, a derived key)
        key = exc.field or "(settings)"
        source = "environment" if key.endswith("_env") else source_of(key, file, given)
        raise ConfigError(key, str(exc), source) from None


def config_error(exc: ValidationError, file: Path | None, given: Mapping[str, Any]) -> ConfigError:
    """The first error of `exc` as one line: the key, what is wrong, and which source gave it."""
    error = exc.errors()[0]
    parts = [str(p) for p in error["loc"]]
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, SettingError) and cause.field:
        parts += cause.field.split(".")
    detail = str(cause) if isinstance(cause, Exception) else error["msg"]
    if isinstance(cause, Exception) and not getattr(cause, "field", None) and parts:
        # a library that names no field: the key its message names, when it is one of the table's
        named = [name for name in known_keys(".".join(parts)) if f"`{name}`" in detail]
        parts += named[:1]
    key = ".".join(parts) or "(settings)"
    if error["type"] == "extra_forbidden" and len(parts) == 1:
        detail = f"unknown table; the configuration has: {', '.join(sorted(Settings.model_fields))}"
    elif error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
        detail = f"unknown key; `{'.'.join(parts[:-1])}` has: {', '.join(known_keys('.'.join(parts[:-1])))}"
    elif error["type"] in ("dataclass_type", "model_type", "dict_type"):
        detail = f"expected a table, got {error.get('input')!r}"
    elif cause is None:
        detail = f"{error['msg']}, got {error.get('input')!r}"
    return ConfigError(key, detail, source_of(key, file, given))


def known_keys(table: str) -> list[str]:
    """The keys of `table` (`replay`, `replay.sampling`): its fields, secrets as `<field>_env`."""
    depth = table.count(".") + 1
    return [
        f"{key.rsplit('.', 1)[-1]}_env" if "env" in f.metadata else key.rsplit(".", 1)[-1]
        for key, f, _ in section_fields(Settings)
        if key.startswith(f"{table}.") and key.count(".") == depth
    ]


def source_of(key: str, file: Path | None, given: Mapping[str, Any]) -> str:
    """Where the value of `key` (or the nearest table holding it) came from: `command line`,
    `$VARIABLE`, the file's path, or `default`."""
    path = key
    while path:
        if lookup(given, path)[0]:
            return "command line"
        for variable, declared in DeclaredVariables(Settings).declared.items():
            if declared == path and os.environ.get(variable):
                return f"${variable}"
        variable = variable_of(path)
        if any(name.upper() == variable for name in os.environ):
            return f"${variable}"
        if file is not None:
            data = TomlFile(Settings, file).toml_data
            if lookup(data, path)[0] or lookup(data, f"{path}_env")[0]:
                return str(file)
        path = path.rpartition(".")[0]
    return str(file) if file else "default"


def in_effect(path: str | os.PathLike[str] | None = None) -> dict[str, tuple[Any, str]]:
    """Every key set by a source -> (value, where from), the highest-precedence source's.

    Values are read as the sources give them (nothing is validated or imported): what a
    command would use when no option gives the key.
    """
    file = config_file(path)
    found: dict[str, tuple[Any, str]] = {}
    named = [
        ("environment", DeclaredVariables(Settings)),
        ("environment", Environment(Settings)),
        (str(file) if file else "trajlake.toml", TomlFile(Settings, file)),
    ]
    declared = {key: variable for variable, key in DeclaredVariables(Settings).declared.items()}
    for name, source in named:
        for key, value in _leaves(source()):
            if key in found:
                continue
            if name == "environment":
                found[key] = (value, f"${declared.get(key, variable_of(key))}")
            else:
                found[key] = (value, name)
    return found


def _leaves(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and value and f"{prefix}{key}" not in _DICT_KEYS:
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


# Keys whose value is a table (a dict setting), shown whole.
_DICT_KEYS = {key for key, _, tp in section_fields(Settings) if typing.get_origin(tp) is dict or tp is dict}

__all__ = ["InitSettingsSource", "Settings", "TrainSettings", "in_effect", "load_settings"]
