"""Synthetic scenarios: prompts with expected answers, split into train and val."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench.synthetic.base import _S_SPLIT, SyntheticConfig, _config, _Rand
from bench.synthetic.trajectories import synthetic_trajectories
from store.schema import MESSAGE, SCENARIOS

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
        "expected_source": pa.nulls(heads.num_rows, pa.string()),
        "rated": pa.nulls(heads.num_rows, pa.string()),
        "_written_at": pa.nulls(heads.num_rows, SCENARIOS.schema.field("_written_at").type),
    }
    return pa.Table.from_arrays([columns[f.name] for f in SCENARIOS.schema], schema=SCENARIOS.schema)
