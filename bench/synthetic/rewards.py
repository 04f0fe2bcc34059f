"""Synthetic rewards from several scorers, recomputed from trajectory indexes (no read-back)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from bench.synthetic.base import (
    _S_ERROR,
    _S_FINISH,
    _S_JFAIL,
    _S_JUDGE,
    _S_SCORED,
    _S_TIE,
    SyntheticConfig,
    _config,
    _ids,
    _plan,
    _Rand,
    _round_keys,
)
from store.schema import REWARDS, TIMESTAMP

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
