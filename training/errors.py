"""Errors of the training package: one small hierarchy, context carried as attributes.

Every message names the offending item in backticks, shows the evidence and says what
to do next. Errors raised while checking inputs are raised before any training work
starts, so a bad selection or hyperparameter never leaves a half-written run behind.
"""

from __future__ import annotations

from store.errors import SettingError


class TrainingError(Exception):
    """Base class of everything the training package raises on purpose."""


# --- datasets (selection from the lake) -------------------------------------------------------


class MissingTokenData(TrainingError, ValueError):
    """GRPO was asked to train on trajectories that have no token data (text-only traces)."""

    def __init__(self, message: str, *, trajectory_ids: list[str]) -> None:
        super().__init__(message)
        self.trajectory_ids = trajectory_ids


class TokenDataMismatch(TrainingError, ValueError):
    """A trajectory's stored token data is inconsistent (turns that do not extend each other, lengths)."""

    def __init__(self, message: str, *, trajectory_id: str, turn: int, reason: str) -> None:
        super().__init__(message)
        self.trajectory_id = trajectory_id
        self.turn = turn
        self.reason = reason


# --- configuration ------------------------------------------------------------------------------


class BadHyperparameter(TrainingError, SettingError):
    """A training or publishing setting is outside what trajlake (or vLLM) accepts; `field` names it."""

    def __init__(self, message: str, *, field: str, value: object = None) -> None:
        super().__init__(message, field=field, value=value)


# --- running ------------------------------------------------------------------------------------


class NonFiniteLoss(TrainingError, RuntimeError):
    """The loss became NaN or infinite; the run stopped and the last good checkpoint was kept."""

    def __init__(self, message: str, *, step: int, last_checkpoint: str | None) -> None:
        super().__init__(message)
        self.step = step
        self.last_checkpoint = last_checkpoint


# --- publishing ---------------------------------------------------------------------------------


class PublishError(TrainingError):
    """Publishing an adapter failed or was refused."""


class AdapterNotServable(PublishError, ValueError):
    """The adapter would be rejected by vLLM (rank, modules_to_save, DoRA, bias, init)."""

    def __init__(self, message: str, *, path: str, problems: list[str]) -> None:
        super().__init__(message)
        self.path = path
        self.problems = problems


class PromotionRefused(PublishError):
    """The evaluation gate found the new adapter no better than the one it would replace."""

    def __init__(self, message: str, *, candidate: float, incumbent: float, incumbent_name: str) -> None:
        super().__init__(message)
        self.candidate = candidate
        self.incumbent = incumbent
        self.incumbent_name = incumbent_name


class AdapterNotFound(PublishError, KeyError):
    """An adapter name, version or alias is not in the registry."""

    def __init__(self, message: str, *, name: str, version: str | int | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.version = version

    def __str__(self) -> str:  # KeyError would otherwise print the message quoted
        return str(self.args[0])


# --- the tiny local model -----------------------------------------------------------------------


class TinyModelError(TrainingError, ValueError):
    """The tiny model could not be built where it was asked to be."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
