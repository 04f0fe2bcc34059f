"""The one error of configuration: a key that is unknown, mistyped or out of range."""

from __future__ import annotations

from flows.settings import ConfigError

__all__ = ["ConfigError"]
