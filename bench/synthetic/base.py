"""Configuration, counter-based randomness and the column helpers every synthetic table shares."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.synthetic.pools import _AGENTS
from store.errors import StoreError

# --- configuration ------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticConfig:
    """Shape of the synthetic data. The same config must be given to every generator of one lake."""

    # Time
    start: datetime = field(
        default=datetime(2026, 11, 1, tzinfo=UTC), metadata={"help": "Earliest `started_at`."}
    )
    days: int = field(default=7, metadata={"help": "Trajectories start uniformly over this many days."})
    # Conversations
    max_tool_rounds: int = field(
        default=5,
        metadata={"help": "Tool-call rounds per trajectory are uniform in 0..this (8 messages on average)."},
    )
    tool_error_rate: float = field(default=0.1, metadata={"help": "Fraction of tool results with is_error."})
    # Groups and replay
    group_size: int = field(default=4, metadata={"help": "Trajectories per group (consecutive indexes)."})
    replayed_fraction: float = field(
        default=0.1,
        metadata={"help": "Fraction of groups that are replayed (have turns, a scenario and a policy)."},
    )
    vocab_size: int = field(default=32_000, metadata={"help": "Token ids are in 3..vocab_size-1."})
    # Rewards
    reward_failure_rate: float = field(
        default=0.01, metadata={"help": "Fraction of judge rewards recorded as failed (value null)."}
    )
    tie_fraction: float = field(
        default=0.1, metadata={"help": "Fraction of replayed groups whose judge scores are all equal."}
    )
    id_prefix: str = field(default="traj", metadata={"help": "Trajectory ids are `<prefix>-<seed>-<index>`."})

    def __post_init__(self) -> None:
        for name in ("tool_error_rate", "replayed_fraction", "reward_failure_rate", "tie_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise SyntheticConfigError(name, value, "a fraction in [0, 1]")
        for name, low in (("days", 1), ("group_size", 1), ("vocab_size", 16), ("max_tool_rounds", 0)):
            if getattr(self, name) < low:
                raise SyntheticConfigError(name, getattr(self, name), f"an integer >= {low}")
        if self.start.tzinfo is None:
            raise SyntheticConfigError("start", self.start, "a timezone-aware datetime")


class SyntheticConfigError(StoreError, ValueError):
    """A synthetic-data option is out of range."""

    def __init__(self, option: str, value: object, expected: str) -> None:
        self.option = option
        self.value = value
        super().__init__(f"synthetic option `{option}` = {value!r} is invalid: expected {expected}")


def _config(config: SyntheticConfig | None, options: dict[str, Any]) -> SyntheticConfig:
    if config is not None and options:
        raise SyntheticConfigError("config", config, "either a SyntheticConfig or keyword options, not both")
    if config is not None:
        return config
    known = {f.name for f in fields(SyntheticConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise SyntheticConfigError(unknown[0], options[unknown[0]], f"one of {', '.join(sorted(known))}")
    return SyntheticConfig(**options)


# --- counter-based randomness ------------------------------------------------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-mixed uint64 -> uint64."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        return x ^ (x >> np.uint64(31))


class _Rand:
    """Independent streams of hashed randomness for one seed."""

    def __init__(self, seed: int) -> None:
        self.seed = np.uint64(seed & 0xFFFFFFFFFFFFFFFF)

    def bits(self, stream: int, idx: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            salt = _mix(np.array([self.seed ^ (np.uint64(stream) * _GOLDEN)], dtype=np.uint64))[0]
            return _mix(idx.astype(np.uint64) * _GOLDEN + salt)

    def uniform(self, stream: int, idx: np.ndarray) -> np.ndarray:
        return (self.bits(stream, idx) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def integers(self, stream: int, idx: np.ndarray, high: int | np.ndarray, low: int = 0) -> np.ndarray:
        """Uniform in [low, high) (modulo bias is irrelevant at these sizes)."""
        span = np.asarray(high, dtype=np.uint64) - np.uint64(low)
        return (self.bits(stream, idx) % span).astype(np.int64) + low


# Stream ids: one per independent decision.
(
    _S_REPLAY,
    _S_SOURCE,
    _S_MODEL,
    _S_POLICY,
    _S_AGENT,
    _S_START,
    _S_DURATION,
    _S_ROUNDS,
    _S_TOOL,
    _S_ERROR,
    _S_VARIANT,
    _S_PREAMBLE,
    _S_FINAL,
    _S_ASK,
    _S_USER,
    _S_META,
    _S_STATUS,
    _S_TOKENS_IN,
    _S_P0,
    _S_C,
    _S_R,
    _S_TOK_GROUP,
    _S_TOK_TRAJ,
    _S_LOGPROB,
    _S_FINISH,
    _S_JUDGE,
    _S_TIE,
    _S_JFAIL,
    _S_SCORED,
    _S_SPLIT,
    _S_TRACE,
) = range(31)

_MAX_ROUNDS_KEY = 64  # (index, round) pairs are hashed as index * 64 + round
_POS_BITS = np.uint64(24)  # (index, token position) pairs are hashed as index << 24 | position


@dataclass
class _Plan:
    """Per-trajectory decisions for indexes [lo, hi): everything the generators share."""

    idx: np.ndarray
    group: np.ndarray
    replayed: np.ndarray
    agent: np.ndarray
    rounds: np.ndarray
    started_us: np.ndarray


def _plan(rand: _Rand, cfg: SyntheticConfig, lo: int, hi: int) -> _Plan:
    idx = np.arange(lo, hi, dtype=np.int64)
    group = idx // cfg.group_size
    replayed = rand.uniform(_S_REPLAY, group) < cfg.replayed_fraction
    # A group shares its agent (the scenario's), production traces pick their own.
    agent = np.where(
        replayed,
        rand.integers(_S_AGENT, group + (1 << 40), len(_AGENTS)),
        rand.integers(_S_AGENT, idx, len(_AGENTS)),
    )
    rounds = rand.integers(_S_ROUNDS, idx, cfg.max_tool_rounds + 1)
    start_us = int(cfg.start.timestamp() * 1_000_000)
    started_us = start_us + (rand.uniform(_S_START, idx) * cfg.days * 86_400e6).astype(np.int64)
    return _Plan(idx, group, replayed, agent, rounds, started_us)


def _round_keys(plan: _Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flattened (trajectory row, round number, hash key) for every tool round."""
    rows = np.repeat(np.arange(len(plan.idx)), plan.rounds)
    rnd = _ranges(plan.rounds)
    return rows, rnd, plan.idx[rows] * _MAX_ROUNDS_KEY + rnd


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """Concatenated aranges: [0..l0), [0..l1), ... in one vectorised step."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)


def _offsets(lengths: np.ndarray) -> pa.Array:
    return pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32), type=pa.int32())


def _ids(prefix: str, seed: int, numbers: np.ndarray, width: int = 9) -> pa.Array:
    digits = pc.utf8_lpad(pc.cast(pa.array(numbers), pa.string()), width, "0")
    return pc.binary_join_element_wise(f"{prefix}-{seed}", digits, "-")


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_NIBBLE_SHIFTS = np.arange(60, -4, -4, dtype=np.uint64)


def _hex(*words: np.ndarray) -> pa.Array:
    """Lower-case hex of uint64 words side by side (16 characters per word), vectorised."""
    parts = [_HEX[((w[:, None] >> _NIBBLE_SHIFTS) & np.uint64(0xF)).astype(np.intp)] for w in words]
    chars = np.ascontiguousarray(np.concatenate(parts, axis=1))
    width = 16 * len(words)
    data = pa.py_buffer(chars.tobytes())
    offsets = pa.py_buffer((np.arange(len(chars) + 1, dtype=np.int32) * width).tobytes())
    return pa.StringArray.from_buffers(len(chars), offsets, data)


def trajectory_ids(n: int, seed: int = 0, *, start: int = 0, id_prefix: str = "traj") -> pa.Array:
    """The ids `synthetic_trajectories(n, seed)` gives its rows (`traj-<seed>-<index>`)."""
    return _ids(id_prefix, seed, np.arange(start, start + n, dtype=np.int64))
