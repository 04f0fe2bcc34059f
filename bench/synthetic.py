"""Synthetic trajectories, rewards and scenarios: realistic, columnar, deterministic, any scale.

Tests and benchmarks need lake data that looks like production: multi-turn agent
conversations with tool calls (some of which fail), replayed groups that share a scenario
and a prompt, token ids and logprobs for the replayed ones, and rewards from several
scorers. This module makes such data as Arrow tables in the lake's exact schemas, so it
can go straight into `store.write`:

>>> import store
>>> from bench.synthetic import synthetic_trajectories, synthetic_rewards
>>> for batch in synthetic_trajectories(1_000, seed=7):  # doctest: +SKIP
...     store.write(lake, "trajectories", batch)
>>> store.write(lake, "rewards", synthetic_rewards(1_000, seed=7))  # doctest: +SKIP

Why it is shaped this way:

- **Counter-based randomness.** Every random choice is a hash of (seed, stream, index),
  never the state of a generator. Trajectory `i` is therefore the same whatever the
  batch size, and `synthetic_trajectories(100)` is a prefix of `synthetic_trajectories(10**6)`.
  `synthetic_rewards(n, seed)` recomputes the same tool failures and groups from the
  indexes alone, so rewards agree with the trajectories without reading them back.
- **Columnar.** Nested columns (`messages`, `turns`) are assembled from flat NumPy
  arrays with list offsets; text comes from small pools with `take`, plus a unique
  suffix on user messages. A million trajectories (about eight million messages) take
  seconds, not minutes.

Layout of trajectory `i`: a system prompt, a user request, `k` rounds of (assistant tool
call, tool result) with `k` uniform in `0..max_tool_rounds`, and a final assistant answer
(`3 + 2k` messages, eight on average with the defaults). Consecutive trajectories form
groups of `group_size`; a group is replayed with probability `replayed_fraction`: its
members share `scenario_id`, `group_id`, `policy`, the user request and the prompt token
ids, and each carries `turns` (one per assistant message; each prompt is the previous
prompt + sampled ids + tool-result ids, as the samplers store them). Other trajectories
are production traces (`otel` or `langfuse`) with empty `turns`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import StoreError
from store.schema import MESSAGE, REWARDS, SCENARIOS, TIMESTAMP, TOOL_CALL, TRAJECTORIES, TURN

# --- content pools ------------------------------------------------------------------------

_TOOLS: dict[str, dict[str, Any]] = {
    "search_docs": {
        "description": "Search the product documentation.",
        "parameters": {"query": "string", "limit": "integer"},
        "args": [
            '{"query": "reset password", "limit": 5}',
            '{"query": "billing cycle", "limit": 3}',
            '{"query": "api rate limits", "limit": 5}',
            '{"query": "export data csv", "limit": 10}',
        ],
        "ok": [
            '[{"title": "Resetting your password", "url": "/docs/auth/reset"}]',
            '[{"title": "Billing cycles", "url": "/docs/billing"}, {"title": "Invoices", "url": "/docs/invoices"}]',
            '[{"title": "Rate limits", "url": "/docs/api/limits", "snippet": "600 requests per minute"}]',
        ],
        "error": ["Error: search backend timed out after 10s", "Error: index `docs-v2` is unavailable"],
    },
    "lookup_order": {
        "description": "Fetch an order by its id.",
        "parameters": {"order_id": "string"},
        "args": ['{"order_id": "A-10023"}', '{"order_id": "B-55120"}', '{"order_id": "C-90871"}'],
        "ok": [
            '{"order_id": "A-10023", "status": "shipped", "eta": "2026-11-24"}',
            '{"order_id": "B-55120", "status": "processing", "items": 3}',
            '{"order_id": "C-90871", "status": "delivered", "signed_by": "J. Doe"}',
        ],
        "error": ["Error: order not found", "Error: 403 Forbidden: order belongs to another account"],
    },
    "refund_order": {
        "description": "Refund an order, fully or partly.",
        "parameters": {"order_id": "string", "amount": "number"},
        "args": ['{"order_id": "A-10023", "amount": 19.99}', '{"order_id": "B-55120", "amount": 120.0}'],
        "ok": [
            '{"refund_id": "R-7781", "status": "accepted"}',
            '{"refund_id": "R-7782", "status": "pending_review"}',
        ],
        "error": ["Error: refund window of 30 days has passed", "Error: amount exceeds order total"],
    },
    "get_weather": {
        "description": "Current weather for a city.",
        "parameters": {"city": "string", "units": "string"},
        "args": [
            '{"city": "Paris", "units": "metric"}',
            '{"city": "Tokyo", "units": "metric"}',
            '{"city": "Austin", "units": "imperial"}',
        ],
        "ok": [
            '{"temp": 11.5, "conditions": "light rain"}',
            '{"temp": 18.0, "conditions": "clear"}',
            '{"temp": 64, "conditions": "cloudy"}',
        ],
        "error": ["Error: unknown city", "Error: weather provider returned 503"],
    },
    "run_sql": {
        "description": "Run a read-only SQL query on the analytics warehouse.",
        "parameters": {"query": "string"},
        "args": [
            '{"query": "SELECT count(*) FROM orders WHERE created_at > now() - INTERVAL 7 DAY"}',
            '{"query": "SELECT region, sum(revenue) FROM sales GROUP BY region"}',
            '{"query": "SELECT * FROM users ORDER BY signup_at DESC LIMIT 5"}',
        ],
        "ok": [
            '[{"count": 1843}]',
            '[{"region": "EU", "sum": 120455.2}, {"region": "US", "sum": 98012.7}]',
            '[{"id": 991, "email": "a@example.com"}, {"id": 990, "email": "b@example.com"}]',
        ],
        "error": ["Error: Binder Error: column `revenue` not found", "Error: query exceeded 30s timeout"],
    },
    "read_file": {
        "description": "Read a file from the workspace.",
        "parameters": {"path": "string"},
        "args": ['{"path": "README.md"}', '{"path": "src/app/config.yaml"}', '{"path": "reports/q3.csv"}'],
        "ok": [
            "# Project\n\nA small service that ...",
            "port: 8080\nlog_level: info\n",
            "month,revenue\n7,10\n8,12\n",
        ],
        "error": ["Error: No such file or directory", "Error: permission denied"],
    },
    "calculator": {
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"expression": "string"},
        "args": ['{"expression": "1843 * 0.15"}', '{"expression": "(120455.2 - 98012.7) / 98012.7"}'],
        "ok": ["276.45", "0.2290"],
        "error": ["Error: division by zero", "Error: invalid syntax at position 4"],
    },
    "create_ticket": {
        "description": "Open a support ticket for a human agent.",
        "parameters": {"title": "string", "priority": "string"},
        "args": [
            '{"title": "Customer cannot log in", "priority": "high"}',
            '{"title": "Refund dispute", "priority": "normal"}',
        ],
        "ok": ['{"ticket_id": "T-4410", "queue": "tier2"}', '{"ticket_id": "T-4411", "queue": "billing"}'],
        "error": ["Error: ticketing system unavailable"],
    },
}

_AGENTS: dict[str, dict[str, Any]] = {
    "support-agent": {
        "system": "You are a friendly customer-support agent for Acme. Use the tools to look up orders "
        "and documentation before answering. Never promise refunds you have not issued.",
        "tools": ["lookup_order", "refund_order", "search_docs", "create_ticket"],
        "asks": [
            "Where is my order? It was supposed to arrive yesterday.",
            "I was charged twice this month, can you refund one of them?",
            "How do I reset my password? The link in the email expired.",
            "Can I export all my data as CSV?",
            "My package says delivered but I never got it.",
        ],
    },
    "analyst-agent": {
        "system": "You are a data analyst. Answer questions with SQL against the warehouse; show "
        "numbers with their units and say how you computed them.",
        "tools": ["run_sql", "calculator", "read_file", "search_docs"],
        "asks": [
            "How many orders did we get in the last 7 days?",
            "Which region had the most revenue, and by how much?",
            "Summarise the Q3 revenue report.",
            "Who are our five newest users?",
        ],
    },
    "assistant-agent": {
        "system": "You are a helpful general assistant with access to tools. Think step by step and "
        "call a tool whenever it can make the answer more accurate.",
        "tools": ["get_weather", "calculator", "search_docs", "read_file"],
        "asks": [
            "Should I take an umbrella in Paris today?",
            "What is 15% of 1843?",
            "What's in the README of this project?",
            "Compare the weather in Tokyo and Austin right now.",
        ],
    },
}

_PREAMBLES = [
    "Let me look that up.",
    "I'll check that for you.",
    "One moment, querying the system.",
    "Let me try a different approach.",
]
_FINALS = [
    "Your order A-10023 has shipped and should arrive by November 24.",
    "I've issued a refund of 19.99; it will show on your statement in 3-5 business days.",
    "We received 1843 orders in the last 7 days.",
    "EU had the highest revenue (120,455.20), about 22.9% more than the US.",
    "Yes, take an umbrella: it's 11.5°C with light rain in Paris.",
    "I couldn't complete that: the system returned an error. I've opened ticket T-4410 for a human agent.",
    "Here is a summary: revenue grew from 10 to 12 between July and August.",
    "You can reset your password from Settings > Security; the reset link is valid for 24 hours.",
]
_MODELS = ["gpt-4.1-mini", "gpt-4.1", "claude-sonnet-4.5", "qwen3-8b"]
_POLICIES = [
    ("qwen3-0.6b", "qwen3-0.6b"),
    ("qwen3-0.6b", "qwen3-0.6b+lora:support-v1"),
    ("qwen3-0.6b", "qwen3-0.6b+lora:support-v2"),
]
_METADATA = [
    '{"env": "prod", "region": "eu-west-1"}',
    '{"env": "prod", "region": "us-east-1"}',
    '{"env": "staging", "region": "eu-west-1"}',
    '{"env": "prod", "region": "ap-northeast-1", "beta": true}',
]

_TOOL_NAMES = list(_TOOLS)
_AGENT_NAMES = list(_AGENTS)
_AGENT_TOOL_IDX = np.array(
    [[_TOOL_NAMES.index(t) for t in a["tools"]] for a in _AGENTS.values()], dtype=np.int64
)
_TOOLS_JSON = [
    json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": t,
                    "description": _TOOLS[t]["description"],
                    "parameters": {
                        "type": "object",
                        "properties": {p: {"type": ty} for p, ty in _TOOLS[t]["parameters"].items()},
                        "required": list(_TOOLS[t]["parameters"]),
                    },
                },
            }
            for t in a["tools"]
        ]
    )
    for a in _AGENTS.values()
]
_VARIANTS = 4  # max(len(args|ok|error)) is cycled to this many variants per tool


def _cycle(items: list[str]) -> list[str]:
    return [items[v % len(items)] for v in range(_VARIANTS)]


# One flat pool of every fixed text; messages index into it and `take` builds the column.
_POOL_PARTS: dict[str, list[str]] = {
    "system": [a["system"] for a in _AGENTS.values()],
    "preamble": _PREAMBLES,
    "final": _FINALS,
    "ok": [s for t in _TOOLS.values() for s in _cycle(t["ok"])],
    "error": [s for t in _TOOLS.values() for s in _cycle(t["error"])],
    "args": [s for t in _TOOLS.values() for s in _cycle(t["args"])],
    "tool_name": _TOOL_NAMES,
}
_POOL_BASE: dict[str, int] = {}
_pool_items: list[str] = []
for _part, _items in _POOL_PARTS.items():
    _POOL_BASE[_part] = len(_pool_items)
    _pool_items.extend(_items)
_POOL = pa.array(_pool_items, type=pa.string())
_ASKS = [ask for a in _AGENTS.values() for ask in a["asks"]]
_ASK_BASE = np.cumsum([0] + [len(a["asks"]) for a in _AGENTS.values()])[:-1]
_ASK_COUNT = np.array([len(a["asks"]) for a in _AGENTS.values()])

_ROLES = pa.array(["system", "user", "assistant", "tool"])
_SYSTEM, _USER, _ASSISTANT, _TOOL = 0, 1, 2, 3


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


# --- trajectories -------------------------------------------------------------------------


def synthetic_trajectories(
    n: int,
    seed: int = 0,
    *,
    batch_size: int = 20_000,
    config: SyntheticConfig | None = None,
    **options: Any,
) -> Iterator[pa.Table]:
    """`n` synthetic trajectories in the `trajectories` schema, `batch_size` rows per table.

    Options are the fields of `SyntheticConfig` (or pass `config=`). `_written_at` is
    left null for `store.write` to stamp.

    >>> t = next(synthetic_trajectories(8, seed=1, replayed_fraction=1.0, group_size=4))
    >>> t.num_rows, t["group_id"][0].as_py() == t["group_id"][3].as_py()
    (8, True)
    """
    cfg = _config(config, options)
    rand = _Rand(seed)
    for lo in range(0, n, max(batch_size, 1)):
        yield _trajectory_batch(rand, cfg, seed, lo, min(n, lo + batch_size))


def _trajectory_batch(rand: _Rand, cfg: SyntheticConfig, seed: int, lo: int, hi: int) -> pa.Table:
    plan = _plan(rand, cfg, lo, hi)
    idx, group, replayed, agent = plan.idx, plan.group, plan.replayed, plan.agent
    n = len(idx)

    # Production traces come from one of two collectors; replays carry their policy.
    policy_idx = rand.integers(_S_POLICY, group, len(_POLICIES))
    source = pc.take(
        pa.array(["replay", "otel", "langfuse"]), np.where(replayed, 0, 1 + rand.integers(_S_SOURCE, idx, 2))
    )
    model = np.where(
        replayed,
        pc.take(pa.array([p[0] for p in _POLICIES]), policy_idx).to_numpy(zero_copy_only=False),
        pc.take(pa.array(_MODELS), rand.integers(_S_MODEL, idx, len(_MODELS))).to_numpy(zero_copy_only=False),
    )
    policy = pa.array(
        pc.take(pa.array([p[1] for p in _POLICIES]), policy_idx).to_numpy(zero_copy_only=False),
        mask=~replayed,
        type=pa.string(),
    )
    group_ids = pa.array(
        _ids("grp", seed, group).to_numpy(zero_copy_only=False), mask=~replayed, type=pa.string()
    )
    scenario_ids = pa.array(
        _ids("scn", seed, group).to_numpy(zero_copy_only=False), mask=~replayed, type=pa.string()
    )

    messages, tool_errors = _messages(rand, cfg, seed, plan)
    turns, prompt_tokens, completion_tokens = _turns(rand, cfg, plan)
    in_tokens = np.where(replayed, prompt_tokens, rand.integers(_S_TOKENS_IN, idx, 4_000, 300))
    out_tokens = np.where(replayed, completion_tokens, 40 + 60 * (plan.rounds + 1))

    duration_us = rand.integers(_S_DURATION, idx, 120_000_000, 800_000)
    status_roll = rand.uniform(_S_STATUS, idx)
    status = np.where(
        status_roll < 0.02, "truncated", np.where(tool_errors & (status_roll < 0.3), "error", "ok")
    )
    columns: dict[str, pa.Array] = {
        "trajectory_id": _ids(cfg.id_prefix, seed, idx),
        "source": source,
        "trace_id": _hex(rand.bits(_S_TRACE, idx), rand.bits(_S_TRACE + 1, idx)),
        "session_id": _ids("sess", seed, idx // 3),
        "user_id": _ids("user", seed, rand.integers(_S_USER, idx // 3, 50_000), width=5),
        "agent_name": pc.take(pa.array(_AGENT_NAMES), agent),
        "model": pa.array(model, type=pa.string()),
        "started_at": pa.array(plan.started_us, type=TIMESTAMP),
        "ended_at": pa.array(plan.started_us + duration_us, type=TIMESTAMP),
        "messages": messages,
        "tools": pc.take(pa.array(_TOOLS_JSON), agent),
        "final_output": _final_output(messages),
        "input_tokens": pa.array(in_tokens, type=pa.int64()),
        "output_tokens": pa.array(out_tokens, type=pa.int64()),
        "scenario_id": scenario_ids,
        "group_id": group_ids,
        "policy": policy,
        "turns": turns,
        "metadata": pc.take(pa.array(_METADATA), rand.integers(_S_META, idx, len(_METADATA))),
        "has_content": pa.array(np.ones(n, dtype=bool)),
        "status": pa.array(status, type=pa.string()),
        "_written_at": pa.nulls(n, TRAJECTORIES.schema.field("_written_at").type),
        "dt": pa.array((plan.started_us // 86_400_000_000).astype(np.int32), type=pa.date32()),
    }
    return pa.Table.from_arrays([columns[f.name] for f in TRAJECTORIES.schema], schema=TRAJECTORIES.schema)


def _final_output(messages: pa.Array) -> pa.Array:
    # The last message of every trajectory is the final assistant answer.
    offsets = messages.offsets.to_numpy()
    contents = messages.values.field("content")
    return pc.take(contents, pa.array(offsets[1:] - 1)) if len(messages) else pa.array([], pa.string())


def _messages(rand: _Rand, cfg: SyntheticConfig, seed: int, plan: _Plan) -> tuple[pa.Array, np.ndarray]:
    """The `messages` column and, per trajectory, whether any tool call failed."""
    n = len(plan.idx)
    counts = 3 + 2 * plan.rounds
    total = int(counts.sum())
    row = np.repeat(np.arange(n), counts)
    pos = _ranges(counts)
    k = plan.rounds[row]

    # Per tool round: which tool, which argument/result variant, failed or not.
    r_rows, _, r_key = _round_keys(plan)
    tool = _AGENT_TOOL_IDX[plan.agent[r_rows], rand.integers(_S_TOOL, r_key, _AGENT_TOOL_IDX.shape[1])]
    variant = rand.integers(_S_VARIANT, r_key, _VARIANTS)
    failed = rand.uniform(_S_ERROR, r_key) < cfg.tool_error_rate
    tool_errors = np.zeros(n, dtype=bool)
    np.logical_or.at(tool_errors, r_rows, failed)
    round_start = np.cumsum(plan.rounds) - plan.rounds  # index of a trajectory's first round

    role = np.full(total, _ASSISTANT, dtype=np.int64)
    role[pos == 0] = _SYSTEM
    role[pos == 1] = _USER
    in_rounds = (pos >= 2) & (pos < 2 + 2 * k)
    is_tool = in_rounds & ((pos - 2) % 2 == 1)
    is_call = in_rounds & ((pos - 2) % 2 == 0)
    role[is_tool] = _TOOL
    msg_round = np.where(in_rounds, round_start[row] + (pos - 2) // 2, 0)

    # Content: indexes into the fixed pool; user requests are unique strings appended after it.
    content_idx = np.full(total, -1, dtype=np.int64)
    content_idx[pos == 0] = _POOL_BASE["system"] + plan.agent
    user_rows = np.arange(n)
    content_idx[pos == 1] = len(_POOL) + user_rows
    preamble = rand.integers(_S_PREAMBLE, r_key, len(_PREAMBLES) * 3)  # 2/3 of calls have no text
    pre = preamble[msg_round[is_call]]
    content_idx[is_call] = np.where(pre < len(_PREAMBLES), _POOL_BASE["preamble"] + pre, -1)
    tr = msg_round[is_tool]
    result_slot = tool[tr] * _VARIANTS + variant[tr]
    content_idx[is_tool] = np.where(failed[tr], _POOL_BASE["error"], _POOL_BASE["ok"]) + result_slot
    is_final = pos == 2 + 2 * k
    content_idx[is_final] = _POOL_BASE["final"] + rand.integers(_S_FINAL, plan.idx, len(_FINALS))

    # A group shares its request; production traces get their own, made unique by a reference.
    ask_key = np.where(plan.replayed, plan.group + (1 << 40), plan.idx)
    ask = _ASK_BASE[plan.agent] + rand.integers(_S_ASK, ask_key, _ASK_COUNT[plan.agent])
    ref = np.where(plan.replayed, plan.group, plan.idx)
    user_text = pc.binary_join_element_wise(
        pc.take(pa.array(_ASKS), ask), pc.cast(pa.array(ref), pa.string()), " (ref #"
    )
    user_text = pc.binary_join_element_wise(user_text, ")", "")
    pool = pa.concat_arrays([_POOL, user_text.cast(pa.string())]) if n else _POOL
    content_mask = content_idx < 0
    content = pc.take(pool, pa.array(np.where(content_mask, 0, content_idx), mask=content_mask))

    # Tool calls (one per calling message) and the matching tool results.
    call_id = _ids("call", seed, r_key, width=12)
    tool_name = pc.take(_POOL, pa.array(_POOL_BASE["tool_name"] + tool))
    arguments = pc.take(_POOL, pa.array(_POOL_BASE["args"] + tool * _VARIANTS + variant))
    calls = pa.StructArray.from_arrays([call_id, tool_name, arguments], fields=list(TOOL_CALL))
    call_counts = is_call.astype(np.int32)
    tool_calls = pa.ListArray.from_arrays(
        _offsets(call_counts), calls, type=pa.list_(TOOL_CALL), mask=pa.array(~is_call)
    )
    ref_round = np.where(is_tool, msg_round, 0)
    name = (
        pc.take(tool_name, pa.array(ref_round, mask=~is_tool))
        if len(tool_name)
        else pa.nulls(total, pa.string())
    )
    tool_call_id = (
        pc.take(call_id, pa.array(ref_round, mask=~is_tool)) if len(call_id) else pa.nulls(total, pa.string())
    )
    is_error = pa.array(np.where(is_tool, failed[ref_round] if len(failed) else False, False), mask=~is_tool)

    struct = pa.StructArray.from_arrays(
        [pc.take(_ROLES, pa.array(role)), content, name, tool_call_id, tool_calls, is_error],
        fields=list(MESSAGE),
    )
    return pa.ListArray.from_arrays(_offsets(counts), struct, type=pa.list_(MESSAGE)), tool_errors


def _turns(rand: _Rand, cfg: SyntheticConfig, plan: _Plan) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The `turns` column, and per trajectory the total prompt and completion token counts.

    A replayed trajectory's tokens form one stream: the group's shared prompt, then for
    each assistant turn its sampled ids followed (except after the last) by the tool
    result's ids. Turn j's prompt is the stream up to turn j's first sampled id.
    """
    n = len(plan.idx)
    n_turns = np.where(plan.replayed, plan.rounds + 1, 0)
    t_row = np.repeat(np.arange(n), n_turns)
    t_num = _ranges(n_turns)
    t_key = plan.idx[t_row] * _MAX_ROUNDS_KEY + t_num
    p0_of_row = rand.integers(_S_P0, plan.group, 48, 16)  # the shared prompt's length, per group
    p0 = p0_of_row[t_row]
    c_len = rand.integers(_S_C, t_key, 32, 4)
    is_last = t_num == plan.rounds[t_row]
    r_len = np.where(is_last, 0, rand.integers(_S_R, t_key, 16, 4))
    turn_start = np.cumsum(n_turns) - n_turns  # first turn of each trajectory
    # Stream position where turn j's completion starts = p0 + sum over l<j of (c_l + r_l).
    step = c_len + r_len
    cum = np.cumsum(step) - step
    before = cum - cum[turn_start[t_row]] if len(t_row) else cum
    prompt_len = p0 + before

    stream_pos_prompt = _ranges(prompt_len)
    prompt_rows = np.repeat(t_row, prompt_len)
    comp_pos = np.repeat(prompt_len, c_len) + _ranges(c_len)
    comp_rows = np.repeat(t_row, c_len)
    comp_key = plan.idx[comp_rows]

    def token_at(rows: np.ndarray, position: np.ndarray) -> np.ndarray:
        # Prompt positions inside the shared prefix hash by group, the rest by trajectory.
        shared_len = p0_of_row[rows]
        in_shared = position < shared_len
        group_key = (plan.group[rows].astype(np.uint64) << _POS_BITS) | position.astype(np.uint64)
        traj_key = (plan.idx[rows].astype(np.uint64) << _POS_BITS) | position.astype(np.uint64)
        span = cfg.vocab_size - 3
        shared_tok = rand.integers(_S_TOK_GROUP, group_key, span, 0)
        own_tok = rand.integers(_S_TOK_TRAJ, traj_key, span, 0)
        return (3 + np.where(in_shared, shared_tok, own_tok)).astype(np.int32)

    prompt_ids = token_at(prompt_rows, stream_pos_prompt)
    comp_ids = token_at(comp_rows, comp_pos)
    logprob_key = (comp_key.astype(np.uint64) << _POS_BITS) | comp_pos.astype(np.uint64)
    u = rand.uniform(_S_LOGPROB, logprob_key)
    logprobs = (-(u**3) * 6.0).astype(np.float32)
    finish = np.where(
        is_last, np.where(rand.uniform(_S_FINISH, t_key) < 0.05, "length", "stop"), "tool_calls"
    )

    turn = pa.StructArray.from_arrays(
        [
            pa.ListArray.from_arrays(_offsets(prompt_len), pa.array(prompt_ids, type=pa.int32())),
            pa.ListArray.from_arrays(_offsets(c_len), pa.array(comp_ids, type=pa.int32())),
            pa.ListArray.from_arrays(_offsets(c_len), pa.array(logprobs, type=pa.float32())),
            pa.array(finish, type=pa.string()),
        ],
        fields=list(TURN),
    )
    turns = pa.ListArray.from_arrays(_offsets(n_turns), turn, type=pa.list_(TURN))
    prompt_total = np.zeros(n, dtype=np.int64)
    comp_total = np.zeros(n, dtype=np.int64)
    np.add.at(prompt_total, t_row, prompt_len)
    np.add.at(comp_total, t_row, c_len)
    return turns, prompt_total, comp_total


# --- rewards ------------------------------------------------------------------------------

#: (reward name, scorer) pairs `synthetic_rewards` produces.
JUDGE_SCORER = "ruler:gpt-4.1-mini:rubric-5e1f0c2a"
TOOL_SCORER = "judging.rewards.tool_success_reward:1"
FORMAT_SCORER = "judging.rewards.format_reward:1"


def synthetic_rewards(
    n: int,
    seed: int = 0,
    *,
    batch_size: int = 50_000,
    config: SyntheticConfig | None = None,
    **options: Any,
) -> Iterator[pa.Table]:
    """Rewards for the trajectories of `synthetic_trajectories(n, seed)` (same config).

    Every trajectory gets `tool_success` (share of tool calls that did not fail) and
    `format` (1.0 unless truncated-like, deterministic); replayed trajectories also get
    a RULER-style `ruler` score in [0, 1], relative within the group, where some groups
    tie and a few judge calls failed (`status='failed'`, value null, `error='judge_timeout'`).
    """
    cfg = _config(config, options)
    rand = _Rand(seed)
    for lo in range(0, n, max(batch_size, 1)):
        yield _reward_batch(rand, cfg, seed, lo, min(n, lo + batch_size))


def _reward_batch(rand: _Rand, cfg: SyntheticConfig, seed: int, lo: int, hi: int) -> pa.Table:
    plan = _plan(rand, cfg, lo, hi)
    n = len(plan.idx)
    r_rows, _, r_key = _round_keys(plan)
    failed = rand.uniform(_S_ERROR, r_key) < cfg.tool_error_rate
    fails = np.zeros(n, dtype=np.int64)
    np.add.at(fails, r_rows, failed.astype(np.int64))
    tool_success = np.where(plan.rounds > 0, 1.0 - fails / np.maximum(plan.rounds, 1), 1.0)
    fmt = np.where(rand.uniform(_S_FINISH, plan.idx) < 0.05, 0.0, 1.0)

    judged = np.flatnonzero(plan.replayed)
    tie = rand.uniform(_S_TIE, plan.group[judged]) < cfg.tie_fraction
    judge_value = np.where(tie, 0.5, np.round(rand.uniform(_S_JUDGE, plan.idx[judged]), 3))
    judge_failed = rand.uniform(_S_JFAIL, plan.idx[judged]) < cfg.reward_failure_rate

    rows = np.concatenate([np.arange(n), np.arange(n), judged])
    name = np.concatenate([np.full(n, "tool_success"), np.full(n, "format"), np.full(len(judged), "ruler")])
    scorer = np.concatenate(
        [np.full(n, TOOL_SCORER), np.full(n, FORMAT_SCORER), np.full(len(judged), JUDGE_SCORER)]
    )
    value = np.concatenate([tool_success, fmt, judge_value])
    failed_mask = np.concatenate([np.zeros(2 * n, dtype=bool), judge_failed])
    scored_us = plan.started_us[rows] + rand.integers(
        _S_SCORED, plan.idx[rows], 6 * 3_600_000_000, 60_000_000
    )
    group_ids = _ids("grp", seed, plan.group[rows]).to_numpy(zero_copy_only=False)
    replayed = plan.replayed[rows]
    explanation = np.where(  # type: ignore[call-overload]  # None makes an object array, as intended
        name == "ruler",
        "Compared with the other attempts in its group, this one reached the goal with fewer failed tool calls.",
        None,
    )
    columns: dict[str, pa.Array] = {
        "trajectory_id": _ids(cfg.id_prefix, seed, plan.idx[rows]),
        "name": pa.array(name, type=pa.string()),
        "scorer": pa.array(scorer, type=pa.string()),
        "value": pa.array(value, mask=failed_mask, type=pa.float64()),
        "explanation": pa.array(explanation, type=pa.string()),
        "group_id": pa.array(group_ids, mask=~replayed, type=pa.string()),
        "scored_at": pa.array(scored_us, type=TIMESTAMP),
        "run_id": pa.array(np.full(len(rows), f"synthetic-{seed}"), type=pa.string()),
        "status": pa.array(np.where(failed_mask, "failed", "ok"), type=pa.string()),
        "error": pa.array(np.where(failed_mask, "judge_timeout", None), type=pa.string()),  # type: ignore[call-overload]
        "metadata": pa.array(np.full(len(rows), '{"synthetic": true}'), type=pa.string()),
        "_written_at": pa.nulls(len(rows), REWARDS.schema.field("_written_at").type),
        "dt": pa.array((scored_us // 86_400_000_000).astype(np.int32), type=pa.date32()),
    }
    return pa.Table.from_arrays([columns[f.name] for f in REWARDS.schema], schema=REWARDS.schema)


# --- scenarios ----------------------------------------------------------------------------


def synthetic_scenarios(
    n: int,
    seed: int = 0,
    *,
    config: SyntheticConfig | None = None,
    **options: Any,
) -> pa.Table:
    """The scenarios replayed among the first `n` synthetic trajectories (one per replayed group).

    Each scenario's `messages` are the group's shared prefix (system prompt and user
    request) and its `tools` the agent's tool definitions; `split` is about 10% `val`.
    """
    cfg = _config(config, options)
    rand = _Rand(seed)
    first = next(iter(synthetic_trajectories(n, seed, batch_size=max(n, 1), config=cfg)), None)
    if first is None:
        return SCENARIOS.schema.empty_table()
    replayed = pc.equal(first["source"], "replay")
    starts = pc.and_(replayed, pc.equal(pc.cast(pa.array(np.arange(n) % cfg.group_size), pa.int64()), 0))
    heads = first.filter(starts)
    prefix = pc.list_slice(heads["messages"], 0, 2)
    groups = np.array([int(s.rsplit("-", 1)[1]) for s in heads["group_id"].to_pylist()], dtype=np.int64)
    split = np.where(rand.uniform(_S_SPLIT, groups) < 0.1, "val", "train")
    columns: dict[str, pa.Array] = {
        "scenario_id": heads["scenario_id"].combine_chunks(),
        "messages": prefix.combine_chunks().cast(pa.list_(MESSAGE)),
        "tools": heads["tools"].combine_chunks(),
        "expected": pa.nulls(heads.num_rows, pa.string()),
        "split": pa.array(split, type=pa.string()),
        "source_trajectory_id": pa.nulls(heads.num_rows, pa.string()),
        "created_at": heads["started_at"].combine_chunks(),
        "metadata": pa.array(np.full(heads.num_rows, '{"synthetic": true}'), type=pa.string()),
        "_written_at": pa.nulls(heads.num_rows, SCENARIOS.schema.field("_written_at").type),
    }
    return pa.Table.from_arrays([columns[f.name] for f in SCENARIOS.schema], schema=SCENARIOS.schema)
