"""How settings are named outside Python, with no settings library loaded: the TOML file in
effect, each key's environment variable, and the dotted keys of a section's dataclass fields.

`trajlake sql` reads `[lake]` through these alone when there is nothing for pydantic-settings to
parse (`flows.config.lake`): importing pydantic-settings is a third of that command's start-up.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flows.config.errors import ConfigError

ENV_PREFIX = "TRAJLAKE_"
NESTED = "__"
DEFAULT_CONFIG_FILE = "trajlake.toml"
CONFIG_VARIABLE = "TRAJLAKE_CONFIG"
# Deeper than any setting is: a 5,000-deep array was a RecursionError in every command.
MAX_TOML_DEPTH = 32


def variable_of(key: str) -> str:
    """The derived override variable of `key`: `train.grpo.beta` -> `TRAJLAKE_TRAIN__GRPO__BETA`."""
    return ENV_PREFIX + key.upper().replace(".", NESTED)


def config_file(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The TOML file in effect: `path`, `$TRAJLAKE_CONFIG`, `./trajlake.toml` when there is one."""
    chosen = path or os.environ.get(CONFIG_VARIABLE)
    if chosen is None:
        return Path(DEFAULT_CONFIG_FILE) if Path(DEFAULT_CONFIG_FILE).exists() else None
    file = Path(chosen)
    if not file.is_file():
        raise ConfigError("(file)", f"`{file}` does not exist or is not a file", str(file))
    return file


def dataclass_fields(cls: Any, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field[Any], Any]]:
    """(dotted key, field, type) of every field of dataclass `cls`, nested dataclasses walked into."""
    if not dataclasses.is_dataclass(cls):
        return
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}{f.name}"
        yield key, f, hints[f.name]
        if dataclasses.is_dataclass(hints[f.name]):
            yield from dataclass_fields(hints[f.name], f"{key}.")


def lookup(data: Mapping[str, Any], key: str) -> tuple[bool, Any]:
    """Whether dotted `key` is set in nested `data`, and its value."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def section_fields(settings_cls: Any) -> Iterator[tuple[str, dataclasses.Field[Any], Any]]:
    """Every dataclass field under the root settings, keyed from the root (`replay.sampling.seed`)."""
    for name, info in settings_cls.model_fields.items():
        yield from dataclass_fields(info.annotation, f"{name}.")


def declared_variables(settings_cls: Any) -> dict[str, str]:
    """Variables settings declare for themselves (`TRAJLAKE_LAKE`) -> their key (`lake.path`)."""
    return {
        f.metadata["variable"]: key for key, f, _ in section_fields(settings_cls) if "variable" in f.metadata
    }
