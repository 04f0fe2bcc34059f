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
from dataclasses import dataclass
from typing import Any, TypeVar

from store.selections import HAS_EXPECTED
from store.vocabulary import equals

RewardValue = float | dict[str, float]
RewardFn = Callable[[dict[str, Any], dict[str, Any] | None], RewardValue]

F = TypeVar("F", bound=Callable[..., Any])

VERSION_ATTRIBUTE = "reward_version"
SCOPE_ATTRIBUTE = "reward_scope"


@dataclass(frozen=True)
class RewardScope:
    """What a reward can score: a condition over `candidates`, and what it selects in words.

    A scoring run without its own `where` scores only this; every trajectory outside it
    would be a failed row (say `no_expected` for a production trace), written again by
    every rerun, so the run counts those it left out instead.
    """

    where: str
    meaning: str


# Rewards that compare with the scenario's expected outcome can score replays of scenarios that have one.
EXPECTED_OUTCOME = RewardScope(
    f"{equals('source', 'replay', table='trajectories')} AND {HAS_EXPECTED}",
    "replayed trajectories of scenarios with an expected outcome",
)


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


def reward_scope(scope: RewardScope) -> Callable[[F], F]:
    """Decorator: what the reward can score by default (a run's own `where` still wins)."""

    def mark(fn: F) -> F:
        setattr(fn, SCOPE_ATTRIBUTE, scope)
        return fn

    return mark


def needs_expected(fn: F) -> F:
    """Decorator: the reward compares with the scenario's expected outcome (`EXPECTED_OUTCOME`)."""
    return reward_scope(EXPECTED_OUTCOME)(fn)


def scope_of(fn: Callable[..., Any]) -> RewardScope | None:
    """The scope a reward declared (`reward_scope`, `needs_expected`), or None: it scores anything."""
    scope = getattr(fn, SCOPE_ATTRIBUTE, None)
    return scope if isinstance(scope, RewardScope) else None
