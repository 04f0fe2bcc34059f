"""The one error of configuration: a key that is unknown, mistyped or out of range."""

from __future__ import annotations

from store.errors import SettingError


class ConfigError(SettingError):
    """A configuration key is unknown, mistyped or out of range. Nothing has run.

    `field` is the full TOML key (`replay.sampling.temperature`), `source` where the value came
    from: the file's path, `$VARIABLE`, or `command line`.
    """

    def __init__(self, key: str, detail: str, source: str) -> None:
        super().__init__(f"bad configuration `{key}` ({source}): {detail}", field=key)
        self.source = source
        self.detail = detail
