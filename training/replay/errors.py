"""Errors of the replay stage: one base class, context carried as attributes.

Every error has a snake_case `reason` code (`no_scenarios`, `unknown_backend`,
`bad_json`, ...) that callers and tests branch on, and a message that names the
offending item in backticks and says what to do next.
"""

from __future__ import annotations

from store.errors import SettingError


class ReplayError(Exception):
    """Base class of everything the replay stage raises on purpose."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class ReplaySetupError(ReplayError, SettingError):
    """The replay stage was misconfigured (`bad_config`, the default) or selected nothing to replay
    (`no_scenarios`); `field` names the refused setting (None when no one setting is at fault)."""

    def __init__(
        self, message: str, *, reason: str = "bad_config", field: str | None = None, value: object = None
    ) -> None:
        ReplayError.__init__(self, message, reason=reason)
        self.field, self.value = field, value


class ScenarioError(ReplayError, ValueError):
    """A scenario could not be made or loaded (no prompt, bad JSONL line, unknown trajectory)."""

    def __init__(self, message: str, *, item: str, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.item = item  # trajectory id, scenario id or "file:line"


class SamplerError(ReplayError, RuntimeError):
    """A sampler backend failed or was misconfigured (unknown backend, server error, bad adapter)."""

    def __init__(self, message: str, *, backend: str, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.backend = backend


class BadSamplingParams(SamplerError, SettingError):
    """A sampling parameter is out of range (`temperature < 0`, `top_p` outside (0, 1], ...);
    `field` names the first refused one."""

    def __init__(self, message: str, *, field: str, value: object = None) -> None:
        SamplerError.__init__(self, message, backend="*", reason="bad_params")
        self.field, self.value = field, value


class ToolSourceError(ReplayError, ValueError):
    """A tool source could not be resolved (bad import path, not callable, unknown kind)."""

    def __init__(self, message: str, *, spec: str) -> None:
        super().__init__(message, reason="bad_tool_source")
        self.spec = spec


class RolloutError(ReplayError, RuntimeError):
    """The agent loop broke an invariant it must keep (a prompt that does not extend the last)."""

    def __init__(self, message: str, *, scenario_id: str, turn: int, reason: str) -> None:
        super().__init__(message, reason=reason)
        self.scenario_id = scenario_id
        self.turn = turn
