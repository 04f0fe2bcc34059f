"""trajlake's configuration: one typed `Settings` object (`flows.config.root`) whose sections
are the libraries' own declarations, read from the command line, the environment and
`trajlake.toml` by pydantic-settings (`flows.config.sources`).

`flows.config.legacy` is the string-keyed configuration the commands' options still read
while they move to `Settings`."""

from __future__ import annotations

import os

from flows.config.checks import check
from flows.config.errors import ConfigError
from flows.config.legacy import (
    DEFAULT_CONFIG_FILE,
    SECTIONS,
    TRAINING_SECTIONS,
    command_defaults,
    declared_variables,
    read_sources,
    setting_in_effect,
)
from flows.config.root import Settings, in_effect, load_settings


def load_config(path: str | os.PathLike[str] | None = None) -> Settings:
    """The settings in effect, checked as a pipeline run needs them: every section builds (TRL's
    too) and every reward, tool and selection they name resolves; else a `ConfigError`."""
    return check(load_settings(path), None if path is None else str(path))


__all__ = [
    "DEFAULT_CONFIG_FILE",
    "SECTIONS",
    "TRAINING_SECTIONS",
    "ConfigError",
    "Settings",
    "check",
    "command_defaults",
    "declared_variables",
    "in_effect",
    "load_config",
    "load_settings",
    "read_sources",
    "setting_in_effect",
]
