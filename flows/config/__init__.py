"""trajlake's configuration: one typed `Settings` object (`flows.config.root`) whose sections
are the libraries' own declarations (the flow's own in `flows.config.sections`), read from the
command line, the environment and `trajlake.toml` by pydantic-settings (`flows.config.sources`);
`flows.config.keys` describes every key, `flows.config.checks` checks what the settings name.

Importing this package imports none of the libraries (the lake's commands read `[lake]` alone).
`flows.config.legacy` is the string-keyed configuration the commands' options still read
while they move to `Settings`."""

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

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "SECTIONS",
    "TRAINING_SECTIONS",
    "ConfigError",
    "command_defaults",
    "declared_variables",
    "read_sources",
    "setting_in_effect",
]
