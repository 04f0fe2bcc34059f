"""trajlake's configuration: one typed `Settings` object (`flows.config.root`) whose sections
are the libraries' own declarations (the flow's own in `flows.config.sections`, TRL's fields in
`flows.config.trainers`), read from the command line, the environment and `trajlake.toml` by
pydantic-settings (`flows.config.sources`). `flows.config.keys` describes every key,
`flows.config.checks` checks what the settings name, `flows.config.options` makes the commands'
options, `flows.config.lake` reads `[lake]` alone.

Importing this package imports none of the libraries."""

from flows.config.errors import ConfigError

__all__ = ["ConfigError"]
