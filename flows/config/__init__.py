"""trajlake's configuration: one typed `Settings` object (`flows.config.root`) whose sections
are the libraries' own declarations, read from the command line, the environment and
`trajlake.toml` by pydantic-settings (`flows.config.sources`).

`flows.config.legacy` is the string-keyed configuration the commands' options still read
while they move to `Settings`."""

from flows.config.errors import ConfigError
from flows.config.legacy import (
    DEFAULT_CONFIG_FILE,
    SECTIONS,
    TRAINING_SECTIONS,
    TrajlakeConfig,
    check_references,
    command_defaults,
    declared_variables,
    describe,
    load_config,
    read_sources,
    setting_in_effect,
)

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "SECTIONS",
    "TRAINING_SECTIONS",
    "ConfigError",
    "TrajlakeConfig",
    "check_references",
    "command_defaults",
    "declared_variables",
    "describe",
    "load_config",
    "read_sources",
    "setting_in_effect",
]
