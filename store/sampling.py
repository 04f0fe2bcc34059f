"""How a replayed trajectory was sampled, declared once: the `trajectories.sampling` record and the
temperature rule every sampler, replay, GRPO's configuration and its selection apply.

The replay stage (`training.replay.stage`) writes the record as a typed struct column (its Arrow
type is `store.schema.SAMPLING`); GRPO's selection reads `sampling.temperature` (the logits are
divided by the temperature the stored logprobs were taken at), the report reads `replay_run`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

#: The temperature of greedy decoding: the argmax, no distribution.
GREEDY = 0.0
#: What `is_temperature` and `is_group_temperature` accept, in words (for settings' messages).
TEMPERATURE_RULE = ">= 0 (0 = greedy)"
GROUP_TEMPERATURE_RULE = "> 0 (a greedy group has no spread and no distribution to train on)"


def is_temperature(value: object) -> bool:
    """Whether `value` is a temperature any sampler takes: a finite number >= 0 (0: greedy).

    >>> [is_temperature(v) for v in (0, 0.7, -0.1, float("inf"), True, "1")]
    [True, True, False, False, False, False]
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value >= GREEDY
    except OverflowError:  # an integer past any float (a JSON body may hold one)
        return False


def is_group_temperature(value: object) -> bool:
    """Whether `value` is a temperature a GRPO group may be sampled and trained at: > 0, since a
    greedy group has no spread to compare and no sampling distribution to divide the logits by.

    >>> [is_group_temperature(v) for v in (0.8, 0, GREEDY)]
    [True, False, False]
    """
    return is_temperature(value) and float(value) > GREEDY  # type: ignore[arg-type]


@dataclass(frozen=True)
class SamplingRecord:
    """How a replayed trajectory was sampled (`trajectories.sampling`): what GRPO needs to train on
    its logprobs as sampled, and what a replay run's groups are told apart by."""

    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop_token_ids: tuple[int, ...]

    @property
    def distribution(self) -> tuple[float, float, int]:
        """What the samples are drawn from (temperature, top-p, top-k); the seed and the token
        budget are not part of it (a re-run with another seed resumes the same groups)."""
        return (self.temperature, self.top_p, self.top_k)

    def to_column(self) -> dict[str, Any]:
        """The struct value of `trajectories.sampling` (`stop_token_ids` a list).

        >>> SamplingRecord(64, 0.8, 1.0, 0, None, (2,)).to_column()["stop_token_ids"]
        [2]
        """
        return {**asdict(self), "stop_token_ids": list(self.stop_token_ids)}
