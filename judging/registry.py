"""Programmatic rewards by name: the built-ins, any `package.module:function` on the import path,
and the names installed packages register under the `trajlake.rewards` entry-point group
(`[project.entry-points."trajlake.rewards"] unit = "units.rewards:unit_reward"`).

This module is pure (no lake, no I/O beyond importing the named module), so the
training stage's evaluation gate can use it directly:

>>> reward = get_reward("exact_match")
>>> reward.scorer
'judging.rewards.match:exact_match_reward@1'
>>> [o.value for o in evaluate_reward(reward, {"final_output": "4"}, {"expected": '"4"'})]
[1.0]

`evaluate_reward` never raises for a bad trajectory: a reward function that raises or
returns something that is not a finite number gives a failed `RewardOutcome` with a
reason code (`no_expected`, `reward_raised`, `invalid_value`), which the stage records
as a `status='failed'` row rather than a silent zero.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from judging.errors import RewardInputError, RewardSpecError
from judging.rewards import (
    exact_match_reward,
    get_length_penalty_reward,
    get_turn_penalty_reward,
    normalized_match_reward,
    tool_success_reward,
    valid_json_reward,
)
from judging.rewards.base import RewardFn, RewardScope, scope_of, version_of
from judging.trajectory import ScenarioRow, Trajectory

BUILTIN_REWARDS: dict[str, RewardFn] = {
    "exact_match": exact_match_reward,
    "normalized_match": normalized_match_reward,
    "valid_json": valid_json_reward,
    "tool_success": tool_success_reward,
    "turn_penalty": get_turn_penalty_reward(),
    "length_penalty": get_length_penalty_reward(),
}

# Names with a meaning of their own elsewhere in the stage; a function reward cannot take them.
RESERVED_NAMES = ("ruler", "sql")
# The entry-point group under which an installed package registers its rewards by name.
ENTRY_POINT_GROUP = "trajlake.rewards"


def registered_rewards() -> dict[str, str]:
    """Rewards installed packages register: name -> `package.module:function` (read on each call,
    so a package installed while the process runs is seen)."""
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


@dataclass(frozen=True)
class RewardOutcome:
    """One reward value for one trajectory, or the reason there is none."""

    name: str
    value: float | None
    status: str  # 'ok' | 'failed'
    error: str | None = None
    explanation: str | None = None


@dataclass(frozen=True)
class ProgrammaticReward:
    """A reward function with the name its rows get and the `scorer` that versions them."""

    name: str
    fn: RewardFn
    path: str
    version: str

    @property
    def scorer(self) -> str:
        return f"{self.path}@{self.version}"

    @property
    def scope(self) -> RewardScope | None:
        """What it can score when a run selects nothing itself (None: any trajectory)."""
        return scope_of(self.fn)

    def __call__(self, trajectory: Trajectory, scenario: ScenarioRow | None) -> Any:
        return self.fn(trajectory, scenario)


def function_path(fn: Callable[..., Any]) -> str:
    """`module:qualname`, with factory closures named after their factory."""
    qualname = getattr(fn, "__qualname__", getattr(fn, "__name__", type(fn).__name__))
    return f"{fn.__module__}:{qualname.split('.<locals>')[0]}"


def _default_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    return name[: -len("_reward")] if name.endswith("_reward") and name != "_reward" else name


def from_function(fn: RewardFn, name: str | None = None, version: str | None = None) -> ProgrammaticReward:
    """Wrap any callable with the reward signature (used for code-defined rewards and tests)."""
    if not callable(fn):
        raise RewardSpecError(repr(fn), "is not callable")
    reward_name = name or _default_name(fn)
    return ProgrammaticReward(reward_name, fn, function_path(fn), version or version_of(fn))


def get_reward(spec: str, name: str | None = None) -> ProgrammaticReward:
    """Resolve a built-in name (`exact_match`), an import path (`package.module:function`), or a
    name an installed package registers (`registered_rewards`: its rows take that name)."""
    spec = spec.strip()
    if spec in BUILTIN_REWARDS:
        fn = BUILTIN_REWARDS[spec]
        return ProgrammaticReward(name or spec, fn, function_path(fn), version_of(fn))
    if ":" not in spec:
        registered = registered_rewards()
        if spec in registered and spec not in RESERVED_NAMES:
            return get_reward(registered[spec], name or spec)
        others = f" or a registered one ({', '.join(sorted(registered))})" if registered else ""
        raise RewardSpecError(
            spec,
            f"is neither a built-in reward{others} nor an import path like `package.module:function`",
            sorted(BUILTIN_REWARDS),
        )
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RewardSpecError(
            spec, f"cannot import module `{module_name}` ({exc}); is it on PYTHONPATH?"
        ) from None
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            public = sorted(
                n for n in dir(module) if n.endswith("_reward") or callable(getattr(module, n, None))
            )
            raise RewardSpecError(
                spec,
                f"module `{module_name}` has no `{attribute}`; callables there: {', '.join(public[:20]) or 'none'}",
            )
        target = getattr(target, part)
    if not callable(target):
        raise RewardSpecError(spec, f"`{attribute}` is a {type(target).__name__}, not a function")
    reward = from_function(target, name)
    if reward.name in RESERVED_NAMES:
        raise RewardSpecError(spec, f"the reward name `{reward.name}` is reserved; pass another name")
    return reward


# The reward `combine` writes from `score.weights`; a name only, never a function.
COMBINED = "combined"


def reward_name(spec: str) -> str:
    """The `name` the rows of reward `spec` get: `ruler`, a built-in's name, or the function's name
    less its `_reward` suffix (the module is imported to find it).

    >>> reward_name("exact_match"), reward_name("judging.rewards.match:normalized_match_reward")
    ('exact_match', 'normalized_match')
    """
    spec = spec.strip()
    return spec if spec == "ruler" else get_reward(spec).name


def resolve_reward_key(value: str, scored: Sequence[str] = (), *, combined: bool = False) -> tuple[str, str]:
    """(spec, name) of the value of a `reward` setting, whichever way it is written: a spec
    (`ruler`, a built-in, `package.module:function`, a registered name) or the name rows of one of the `scored`
    specs get (`unit` for `units:unit_reward`). `combined`: the `combined` reward is written
    (weights are configured); its spec is its name. Raises `RewardSpecError` naming the value
    and what it could have been.

    >>> resolve_reward_key("normalized_match", ["judging.rewards.match:normalized_match_reward"])
    ('judging.rewards.match:normalized_match_reward', 'normalized_match')
    >>> resolve_reward_key("judging.rewards.match:exact_match_reward")
    ('judging.rewards.match:exact_match_reward', 'exact_match')
    """
    value = value.strip()
    if combined and value == COMBINED:
        return value, value
    names = {spec: reward_name(spec) for spec in scored}
    if value in names:
        return value, names[value]
    by_name = [spec for spec, name in names.items() if name == value]
    if by_name:
        return by_name[0], value
    if value == "ruler" or value in BUILTIN_REWARDS or ":" in value or value in registered_rewards():
        return value, reward_name(value)
    known = sorted({*names.values(), *([COMBINED] if combined else [])})
    raise RewardSpecError(
        value,
        "is not a reward: give a built-in name, `package.module:function`, or the name of a scored "
        f"reward ({', '.join(known) or 'none scored'})",
        sorted(BUILTIN_REWARDS),
    )


def builtin_names() -> list[str]:
    """Names accepted by `get_reward` without an import path."""
    return sorted(BUILTIN_REWARDS)


def _check_value(name: str, value: Any) -> RewardOutcome:
    if isinstance(value, bool):
        value = float(value)
    if not isinstance(value, (int, float)):
        return RewardOutcome(
            name, None, "failed", "invalid_value", f"returned {type(value).__name__} {value!r:.80}"
        )
    if not math.isfinite(value):
        return RewardOutcome(name, None, "failed", "invalid_value", f"returned {value!r}")
    return RewardOutcome(name, float(value), "ok")


def evaluate_reward(
    reward: ProgrammaticReward, trajectory: Trajectory, scenario: ScenarioRow | None
) -> list[RewardOutcome]:
    """Run one reward on one trajectory. Never raises: failures come back as failed outcomes."""
    try:
        value = reward.fn(trajectory, scenario)
    except RewardInputError as exc:
        return [RewardOutcome(reward.name, None, "failed", exc.reason, str(exc))]
    except Exception as exc:  # a user's reward function may raise anything; record it, keep going
        return [RewardOutcome(reward.name, None, "failed", "reward_raised", f"{type(exc).__name__}: {exc}")]
    if isinstance(value, dict):
        if not value:
            return [RewardOutcome(reward.name, None, "failed", "invalid_value", "returned an empty dict")]
        return [_check_value(f"{reward.name}.{key}", v) for key, v in value.items()]
    return [_check_value(reward.name, value)]
