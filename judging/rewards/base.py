"""The one reward signature, and how a reward function declares its version.

A reward function is `fn(trajectory, scenario) -> float | dict[str, float]` (see
`judging.trajectory` for what the two dicts hold). A dict return scores several named
components at once; each becomes its own `rewards` row named `<reward>.<key>`.

The version is part of the `scorer` column, so changing what a reward computes gives
new rows instead of silently mixing old and new values. Declare it with
`@reward_version("2")`; a function without one is versioned by a hash of its source.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

RewardValue = float | dict[str, float]
RewardFn = Callable[[dict[str, Any], dict[str, Any] | None], RewardValue]

F = TypeVar("F", bound=Callable[..., Any])

VERSION_ATTRIBUTE = "reward_version"


def reward_version(version: str) -> Callable[[F], F]:
    """Decorator: pin the version recorded in `scorer` (bump it when the reward's meaning changes)."""

    def mark(fn: F) -> F:
        setattr(fn, VERSION_ATTRIBUTE, str(version))
        return fn

    return mark


def version_of(fn: Callable[..., Any]) -> str:
    """`reward_version` when declared, else `src-<hash>` of the function's source (or its qualified name)."""
    declared = getattr(fn, VERSION_ATTRIBUTE, None)
    if declared is not None:
        return str(declared)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        source = getattr(fn, "__qualname__", repr(fn))
    return "src-" + hashlib.sha256(source.encode()).hexdigest()[:8]
