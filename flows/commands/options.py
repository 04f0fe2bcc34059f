"""Options derived from the settings' declarations (`flows.config`), and the settings commands read.

The lake's option is `flows.commands.lake`'s: `trajlake sql` reads `[lake]` alone and imports
nothing of this module (its option machinery validates with pydantic).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flows.commands.exits import fail
from flows.config.errors import ConfigError
from flows.config.naming import variable_of
from flows.config.options import configured, value_in_effect
from store.errors import SettingError

__all__ = [
    "build",
    "configured",
    "current_settings",
    "in_effect_help",
    "option_or_setting",
    "quiet_libraries",
    "setting",
]


def current_settings() -> Any:
    """The settings in effect (`flows.config.root.Settings`); a bad one is a clean exit 2."""
    from flows.config.root import load_settings

    try:
        return load_settings()
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def build(section: Any, **extra: Any) -> Any:
    """`section` (a settings dataclass) with `extra` fields replaced; a value it refuses is a clean
    exit 2 naming the field."""
    try:
        return dataclasses.replace(section, **extra)
    except SettingError as exc:
        raise fail(
            f"bad value for `{exc.field}` (command line): {exc}" if exc.field else str(exc), 2
        ) from None


def in_effect_help(key: str, text: str) -> str:
    """`text` with the value setting `key` has when the option is left out, and where it comes from
    (the help of an option that stands for a configuration key, as `configured` options show)."""
    from flows.config.root import in_effect

    try:
        value, source = in_effect().get(key, (None, "default"))
    except ConfigError:  # the command reports a bad file when it runs
        return text
    if source == "default" or value in (None, ""):
        return text
    return f"{text} [in effect: {value}, from {source}]"


def setting(key: str) -> Any:
    """The value of `key` (`select.sft`) in effect; a bad configuration is a clean exit 2."""
    try:
        return value_in_effect(key)[0]
    except ConfigError as exc:
        raise fail(str(exc), 2) from None


def option_or_setting(given: str | None, key: str, flag: str, meaning: str) -> str:
    """The option's value, else the configured `key`'s; neither: exit 2 saying how to give one."""
    if given:
        return given
    value = setting(key)
    if not value:
        table, _, name = key.rpartition(".")
        raise fail(
            f"{flag} is required: {meaning}; or set `{name}` in `[{table}]` of trajlake.toml "
            f"(${variable_of(key)})",
            2,
        )
    return str(value)


def quiet_libraries() -> None:
    """Keep the terminal for trajlake's own progress: no library deprecation noise or weight-loading bars."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|transformers|trl|peft)\b.*")
    import datasets
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
