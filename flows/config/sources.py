"""Where settings come from, each one a pydantic-settings source: the command line (init
arguments), the environment (`TRAJLAKE_<SECTION>__<KEY>`, nested delimiter `__`, plus the few
variables a setting declares for itself: `TRAJLAKE_LAKE`), `trajlake.toml`, the declared defaults.

pydantic-settings reads and parses; what is ours is only what it has no word for: a path written
`./x` in a file is relative to that file, a secret is named in the file by the variable that
holds it (`api_key_env = "OPENAI_API_KEY"`), and which source gave a key (`trajlake config`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
)

from flows.config.errors import ConfigError
from flows.config.naming import MAX_TOML_DEPTH, declared_variables, lookup, section_fields, variable_of


class TomlFile(InitSettingsSource):
    """`trajlake.toml`, with `./x` paths made absolute against its folder (a configuration and the
    lake or model beside it move together) and secrets refused as values.

    The file is read here and handed to pydantic-settings as values, the way its own TOML source
    does, through public API only: overriding that source's private reader broke on a minor
    release (2.16 changed its signature)."""

    def __init__(self, settings_cls: type[BaseSettings], file: Path | None) -> None:
        self.file = file
        self.root = settings_cls
        self.toml_data = self.read(file) if file is not None and file.is_file() else {}
        super().__init__(settings_cls, self.toml_data)

    def read(self, file_path: Path) -> dict[str, Any]:
        """The file's values, checked and with its relative paths resolved."""
        try:
            data = tomllib.loads(file_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError("(syntax)", str(exc), str(file_path)) from None
        except RecursionError:
            raise ConfigError(
                "(syntax)", f"values are nested over {MAX_TOML_DEPTH} levels deep", str(file_path)
            ) from None
        if (key := too_deep(data)) is not None:
            raise ConfigError(key, f"the value is nested over {MAX_TOML_DEPTH} levels deep", str(file_path))
        for key, f, _ in section_fields(self.root):
            present, value = lookup(data, key)
            if not present:
                continue
            if "env" in f.metadata:
                raise ConfigError(
                    key,
                    f"a secret is not written in the file: name the variable that holds it (`{f.name}_env`)",
                    str(file_path),
                )
            if f.metadata.get("path") and isinstance(value, str) and value.startswith(("./", "../")):
                *parents, name = key.split(".")
                table = data
                for part in parents:
                    table = table[part]
                table[name] = str((file_path.parent / value).resolve())
        return data


class Environment(EnvSettingsSource):
    """`TRAJLAKE_<SECTION>__<KEY>` as pydantic-settings reads it, without the variables settings
    declare for themselves (those are `DeclaredVariables`'), whose derived spelling is refused."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        self.declared = declared_variables(settings_cls)
        for variable, key in self.declared.items():
            if variable_of(key) in os.environ:
                raise ConfigError(
                    key,
                    f"`${variable_of(key)}` is not read: this setting's variable is `${variable}`",
                    "environment",
                )
        super().__init__(settings_cls)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        value, key, complex_ = super().get_field_value(field, field_name)
        if variable_of(field_name) in self.declared:
            return None, key, complex_  # `TRAJLAKE_LAKE` is the lake's folder, not the `[lake]` table
        return value, key, complex_


class DeclaredVariables(PydanticBaseSettingsSource):
    """The variables settings declare for themselves, read as written (`TRAJLAKE_LAKE=2026`: a folder)."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self.declared = declared_variables(settings_cls)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: `__call__` reads the variables whole

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for variable, key in self.declared.items():
            if os.environ.get(variable):
                node = out
                *parents, name = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[name] = os.environ[variable]
        return out


def too_deep(data: dict[str, Any]) -> str | None:
    """The first key whose value nests past `MAX_TOML_DEPTH` levels, or None (iteratively)."""
    stack: list[tuple[str, Any, int]] = [(key, value, 1) for key, value in data.items()]
    while stack:
        key, value, depth = stack.pop()
        if depth > MAX_TOML_DEPTH:
            return key
        children = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        )
        stack.extend((f"{key}.{k}" if isinstance(value, dict) else key, v, depth + 1) for k, v in children)
    return None
