"""What the OpenAI-compatible app records per episode: each chat call's exact prompt ids, what was
sampled and the conversation so far, in order, and the seed of each call.

An episode is one run of a user rollout function; its calls carry the `x-trajlake-episode` header.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from training.replay.rollout.loop import turn_seed
from training.replay.samplers.base import Completion


@dataclass
class RecordedCall:
    """One chat call of one episode: the exact prompt ids, what was sampled, the conversation so far."""

    prompt_ids: list[int]
    completion: Completion
    messages: list[dict[str, Any]]  # request messages + the returned assistant message (lake structs)
    extends_previous: bool
    full_text: str  # prompt text + sampled text: what the next call's prompt should start with


@dataclass
class Recorder:
    """Chat calls per episode id, in order; `limit` caps calls per episode (the turn limit).

    It also seeds each call of an episode (`call_seed`): from the scenario and rollout index
    the episode was started with (`start`), so a seeded replay repeats, else from its id.
    """

    limit: int | None = None
    calls: dict[str, list[RecordedCall]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seed_keys: dict[str, tuple[str, int]] = field(default_factory=dict)
    _seeded_calls: dict[str, int] = field(default_factory=dict)

    def start(self, episode: str, scenario_id: str, rollout: int) -> None:
        """Name the episode's scenario and rollout index: what its calls' seeds derive from."""
        with self._lock:
            self._seed_keys[episode] = (scenario_id, rollout)

    def call_seed(self, episode: str, seed: int | None) -> int | None:
        """The seed of the episode's next call (`turn_seed` of its scenario, rollout and call index).
        Counted under the lock: calls an agent makes at once get different seeds."""
        with self._lock:
            index = self._seeded_calls.get(episode, 0)
            self._seeded_calls[episode] = index + 1
            scenario_id, rollout = self._seed_keys.get(episode, (episode, 0))
        return turn_seed(seed, scenario_id, rollout, index)

    def previous(self, episode: str) -> RecordedCall | None:
        with self._lock:
            calls = self.calls.get(episode)
            return calls[-1] if calls else None

    def count(self, episode: str) -> int:
        with self._lock:
            return len(self.calls.get(episode, []))

    def add(self, episode: str, call: RecordedCall) -> None:
        with self._lock:
            self.calls.setdefault(episode, []).append(call)

    def pop(self, episode: str) -> list[RecordedCall]:
        with self._lock:
            self._seed_keys.pop(episode, None)
            self._seeded_calls.pop(episode, None)
            return self.calls.pop(episode, [])
