"""`[lake]` read from the environment and `trajlake.toml` by pydantic-settings, with the sources
and precedence of `Settings` (`flows.config.root`) and none of its other sections."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict

from flows.config.errors import ConfigError
from flows.config.naming import ENV_PREFIX, NESTED
from flows.config.sections import LakeSettings
from flows.config.sources import DeclaredVariables, Environment, TomlFile


class LakeOnly(BaseSettings):
    """The `[lake]` table of the settings in effect; the other tables are `Settings`' to check."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED, extra="ignore")

    lake: LakeSettings = LakeSettings()


def read_lake(file: Path | None) -> LakeSettings:
    """`[lake]` from the environment, then `file`, then the declared defaults; a bad value is a
    `ConfigError` naming the key and where it came from."""
    sources = (
        InitSettingsSource(LakeOnly, {}),
        DeclaredVariables(LakeOnly),
        Environment(LakeOnly),
        TomlFile(LakeOnly, file),
    )
    try:
        return LakeOnly(_build_sources=(sources, {})).lake  # type: ignore[call-arg]  # (as in root.py)
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        name = getattr(cause, "field", None) or ".".join(str(p) for p in error["loc"][1:])
        key = f"lake.{name}" if name else "lake"
        variable = ENV_PREFIX + key.upper().replace(".", NESTED)
        source = f"${variable}" if variable in os.environ else str(file) if file else "default"
        raise ConfigError(key, str(cause) if cause else error["msg"], source) from None
