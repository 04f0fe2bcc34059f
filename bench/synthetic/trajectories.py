"""Synthetic trajectories: conversations with tool calls, replayed groups with token ids and logprobs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.synthetic.base import (
    _MAX_ROUNDS_KEY,
    _POS_BITS,
    _S_ASK,
    _S_C,
    _S_DURATION,
    _S_ERROR,
    _S_FINAL,
    _S_FINISH,
    _S_LOGPROB,
    _S_META,
    _S_MODEL,
    _S_P0,
    _S_POLICY,
    _S_PREAMBLE,
    _S_R,
    _S_SOURCE,
    _S_STATUS,
    _S_TOK_GROUP,
    _S_TOK_TRAJ,
    _S_TOKENS_IN,
    _S_TOOL,
    _S_TRACE,
    _S_USER,
    _S_VARIANT,
    SyntheticConfig,
    _config,
    _hex,
    _ids,
    _offsets,
    _Plan,
    _plan,
    _Rand,
    _ranges,
    _round_keys,
)
from bench.synthetic.pools import (
    _AGENT_NAMES,
    _AGENT_TOOL_IDX,
    _ASK_BASE,
    _ASK_COUNT,
    _ASKS,
    _ASSISTANT,
    _FINALS,
    _METADATA,
    _MODELS,
    _POLICIES,
    _POOL,
    _POOL_BASE,
    _PREAMBLES,
    _ROLES,
    _SYSTEM,
    _TOOL,
    _TOOLS_JSON,
    _USER,
    _VARIANTS,
)
from store.schema import MESSAGE, SAMPLING, TIMESTAMP, TOOL_CALL, TRAJECTORIES, TURN

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
    left null for `store.writer.write` to stamp.

    >>> t = next(synthetic_trajectories(8, seed=1, replayed_fraction=1.0, group_size=4))
    >>> t.num_rows, t["group_id"][0].as_py() == t["group_id"][3].as_py()
    (8, True)
    """
    cfg = _config(config, options)
    rand = _Rand(seed)
    for lo in range(0, n, max(batch_size, 1)):
        yield _trajectory_batch(rand, cfg, seed, lo, min(n, lo + batch_size))


# How every synthetic replay was sampled (`store.sampling.SamplingRecord.to_column`).
_SAMPLING = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "max_tokens": 256,
    "seed": None,
    "stop_token_ids": [],
}


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
        # a replay's typed columns (`training.replay.rows.episode_row`); null on production traffic
        "replay_run": pa.array(np.full(n, "round-1", dtype=object), mask=~replayed, type=pa.string()),
        "scenario_split": pa.array(np.full(n, "train", dtype=object), mask=~replayed, type=pa.string()),
        "sampling": pa.array([_SAMPLING if r else None for r in replayed.tolist()], type=SAMPLING),
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
