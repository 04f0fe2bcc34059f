"""Which stored rows a GRPO run trains on, and a batch shape that fits them.

Between the selection (`training.datasets.select_grpo`) and the trainer, a round narrows
its groups three ways, each counted in the run's report:

- staleness (`max_staleness`): a group sampled by an adapter many versions older than the
  one being trained is far off-policy; the bound keeps groups sampled by the adapter
  being continued or its N nearest ancestors (the run records' `parent` chain), and
  refuses the run before any model loads when nothing is left;
- cut: a completion longer than `max_completion_length` is cut and counts as truncated;
- all-equal groups (`skip_equal_reward_groups`): zero advantage, so no policy gradient,
  but full batch slots and, with token-normalised losses (`dapo`), a share of the
  normaliser. DAPO drops them ("dynamic sampling"); measured on the demo (5 rounds,
  same learning rate) keeping them gave val success 0.87/0.75/0.66/0.80/0.74 per round,
  skipping them 0.80/0.66/0.93/0.83/0.94.

TRL's sampler yields only full generation batches: a round left with fewer rows than one
batch would train zero steps, and rows beyond the last full batch would sit out the epoch.
`fit_batch_to_rows` sizes the batches to split the rows evenly instead. The
rows reach the trainer as a `datasets.Dataset` (`grpo_dataset`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from store.catalog.connection import connect
from store.errors import SelectionError
from store.lake import Lake
from store.policy_names import join_policy
from training.datasets import GRPOExample
from training.lineage import selection_snapshot
from training.models.policies import adapter_label, model_name, policy_name, record_name
from training.run import read_run_record

ROW_COLUMNS = (
    "trajectory_id",
    "group_id",
    "prompt_ids",
    "completion_ids",
    "tool_mask",
    "logprobs",
    "truncated",
    "reward",
    "advantage",
)


def grpo_dataset(examples: Sequence[GRPOExample]) -> Any:
    """Stored examples as a `datasets.Dataset` (one row per trajectory)."""
    from datasets import Dataset

    return Dataset.from_dict({col: [getattr(e, col) for e in examples] for col in ROW_COLUMNS})


def cut_to_max_length(example: GRPOExample, max_completion_length: int | None) -> GRPOExample:
    """Cut a completion longer than `max_completion_length`; the cut one counts as truncated."""
    if max_completion_length is None or len(example.completion_ids) <= max_completion_length:
        return example
    n = max_completion_length
    return dataclasses.replace(
        example,
        completion_ids=example.completion_ids[:n],
        tool_mask=example.tool_mask[:n],
        logprobs=example.logprobs[:n],
        truncated=True,
    )


def drop_equal_reward_groups(
    examples: Sequence[GRPOExample], equal_groups: Sequence[str]
) -> tuple[list[GRPOExample], int]:
    """The examples outside all-equal groups, and how many were dropped (none when every group is equal)."""
    equal = set(equal_groups)
    kept = [e for e in examples if e.group_id not in equal]
    if not kept:  # nothing informative at all: train on what there is rather than on nothing
        return list(examples), 0
    return kept, len(examples) - len(kept)


def policy_lineage(base_model: str, adapter: str | None, depth: int) -> list[str]:
    """The `policy` names of `adapter` and of its `depth` nearest ancestors, newest first.

    Names are what a sampler records (`training.models.policies.policy_name`). Every run record
    holds its parent's record whole, so the ancestors are named from the records alone (an
    ancestor folder that moved or was deleted still counts); the chain ends at the base model.
    """
    policies: list[str] = []
    if adapter:
        policies.append(policy_name(base_model, adapter))
        node = read_run_record(adapter)
        while node and len(policies) <= depth:
            parent = node.get("parent")
            name = _ancestor_name(parent) if isinstance(parent, dict) else None
            if name is None:
                break
            policies.append(join_policy(model_name(base_model), name))
            node = parent
    if len(policies) <= depth:
        policies.append(model_name(base_model))
    return policies


def _ancestor_name(record: dict[str, Any]) -> str | None:
    # an adapter trajlake did not train has no run id: named by its folder, when it is still there
    folder = record.get("adapter_dir")
    return record_name(record) or (adapter_label(str(folder)) if folder else None)


def within_staleness(sql: str, policies: Sequence[str]) -> str:
    """`sql` narrowed to the trajectories one of `policies` sampled."""
    allowed = ", ".join("'" + p.replace("'", "''") + "'" for p in policies)
    text = sql.strip().rstrip(";")
    return (
        f"SELECT * FROM ({text}) WHERE trajectory_id IN "
        f"(SELECT trajectory_id FROM trajectories WHERE policy IN ({allowed}))"
    )


def bound_staleness(
    lake: Lake,
    sql: str,
    base_model: str,
    adapter: str | None,
    max_staleness: int,
    as_of: Mapping[str, int] | None = None,
) -> tuple[str, int]:
    """(`sql` narrowed to fresh enough groups, how many selected trajectories were too stale).

    Counts at the table versions `as_of` when given: the snapshot the selection then reads.
    Raises `SelectionError(reason="all_stale")` naming the policies that sampled the rows
    when none is fresh enough.
    """
    policies = policy_lineage(base_model, adapter, max_staleness)
    narrowed = within_staleness(sql, policies)
    with connect(lake, read_only=True, snapshot=selection_snapshot(lake, as_of)) as con:
        total = con.execute(f"SELECT count(*) FROM ({sql.strip().rstrip(';')})").fetchall()[0][0]
        fresh = con.execute(f"SELECT count(*) FROM ({narrowed})").fetchall()[0][0]
        if total and not fresh:
            found = con.execute(
                "SELECT policy, count(*) FROM trajectories WHERE trajectory_id IN "
                f"(SELECT trajectory_id FROM ({sql.strip().rstrip(';')})) GROUP BY ALL ORDER BY 2 DESC LIMIT 3"
            ).fetchall()
            raise SelectionError(
                f"all {total} selected trajectories were sampled more than {max_staleness} adapter versions "
                f"before `{policies[0]}`{f' (`{adapter}`)' if adapter else ''} (sampled by: "
                + ", ".join(f"`{p}` ({n})" for p, n in found)
                + "); replay with the current adapter, or raise `max_staleness`",
                sql=sql,
                reason="all_stale",
            )
    return narrowed, int(total - fresh)


def fit_batch_to_rows(config: Any, rows: int) -> tuple[Any, dict[str, int]]:
    """A config whose generation batches split `rows` evenly (TRL's sampler yields only full
    batches, and drops the rest).

    The configured batch is the most rows a step takes. Rows that do not fill it a whole
    number of times would leave up to a batch out of every epoch: with the real model's
    groups of 16 and a batch of 64, a round's 7 informative groups trained on 4 and left 3
    out. So the round takes as many batches as the configured size needs, each an even share
    of the rows (whole pairs), and leaves out fewer than two rows a micro-batch. Fewer rows
    than one batch (all-equal groups skipped) shrink it to the rows: one step per pass.
    """
    steps = config.steps_per_generation or config.gradient_accumulation_steps
    world = config.world_size  # data-parallel processes: each micro-step takes a batch from each
    generation = config.generation_batch_size or config.per_device_train_batch_size * steps * world
    if rows % generation == 0 or rows < 2 * world:
        return config, {}
    if rows < generation:  # one batch of what is left, one micro-step
        size = rows // world
        size -= (size * world) % 2  # whole pairs: TRL's `num_generations` (2) divides the batch
        return dataclasses.replace(
            config,
            per_device_train_batch_size=size,
            gradient_accumulation_steps=1,
            steps_per_generation=None,
            generation_batch_size=None,
        ), {"batch_size_reduced_to": size}
    micro_batches = -(-rows // generation) * steps
    size = rows // (micro_batches * world)
    size -= (size * steps * world) % 2
    if size < 1:  # a batch of one row a device cannot be shared out: TRL's whole batches, as configured
        return config, {}
    evened = dataclasses.replace(config, per_device_train_batch_size=size, generation_batch_size=None)
    return evened, {"batch_size_reduced_to": size}
