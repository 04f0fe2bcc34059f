"""`[lake]` alone, for the commands that only open the lake (`trajlake sql`, `tables`, `forget`):
the same sources as `Settings`, without importing any library's section."""

from __future__ import annotations

import os

from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, SettingsConfigDict

from flows.config.errors import ConfigError
from flows.config.sections import LakeSettings
from flows.config.sources import ENV_PREFIX, NESTED, DeclaredVariables, Environment, TomlFile, config_file


class LakeOnly(BaseSettings):
    """The `[lake]` table of the settings in effect; the other tables are `Settings`' to check."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED, extra="ignore")

    lake: LakeSettings = LakeSettings()


def load_lake(path: str | os.PathLike[str] | None = None) -> LakeSettings:
    """`[lake]` as in effect: `$TRAJLAKE_LAKE`, the environment, the file, the declared defaults."""
    file = config_file(path)
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
