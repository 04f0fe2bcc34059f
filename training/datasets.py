"""Training data from the lake, selected by SQL: SFT conversations and GRPO groups.

A selection is any read-only DuckDB query over the lake's views that returns a
`trajectory_id` column (other columns are allowed; a `reward` column, when present,
overrides the stored rewards for GRPO). The query is wrapped, never edited, so what a
user previews with `trajlake sql` is exactly what trains.

- SFT rows are conversations (`messages` + `tools`) of any trajectory, text-only
  production traces included; the loss later covers assistant tokens only.
- GRPO examples need token data (`turns`): the sampled ids and their logprobs are the
  behaviour policy, and text is never re-tokenised to guess what the model produced.
  A multi-turn trajectory is one sequence, the last turn's prompt plus its completion;
  every turn's prompt must extend the previous prompt + completion (token-exact
  multi-turn), the first turn's prompt is the GRPO prompt and everything after it is
  the completion, in which only the tokens the model sampled are trained on
  (`tool_mask` = 1) and tool results / template glue are masked out (0).

Each selection also returns its `Lineage` (`training.lineage`), which the publisher
writes into the adapter's manifest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import duckdb

from store.catalog.connection import check_selection, connect
from store.errors import SelectionError
from store.lake import Lake
from store.migrate import check_migrated
from store.sampling import GROUP_TEMPERATURE_RULE, is_group_temperature
from training.advantages import AdvantageReport, ScaleRewards, compute_advantages
from training.chat.render import parse_tools, template_messages
from training.errors import MissingTokenData, TokenDataMismatch
from training.lineage import Lineage, selection_snapshot

TRUNCATED_FINISH_REASONS = frozenset({"length", "max_tokens"})


# --- running the selection --------------------------------------------------------------------


def _selected(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], bool]:
    """Run the user's query (read-only) and return its columns and whether it carries a `reward`."""
    _, columns = check_selection(con, sql, "trajectory_id")
    return columns, "reward" in columns


def _empty(sql: str, what: str) -> SelectionError:
    return SelectionError(
        f"the selection matched no {what}; nothing to train on.\n  query: `{sql.strip()}`\n"
        "  check it with `trajlake sql` (are the trajectories ingested and scored?)",
        sql=sql,
        reason="empty_selection",
    )


# --- SFT ----------------------------------------------------------------------------------------


@dataclass
class SFTSelection:
    """Conversations to fine-tune on, in chat-template form, plus their lineage."""

    rows: list[dict[str, Any]]
    lineage: Lineage


def select_sft(lake: Lake | str, sql: str, *, as_of: Mapping[str, int] | None = None) -> SFTSelection:
    """Conversations of the trajectories that `sql` selects.

    Each row is `{"trajectory_id", "messages": [chat messages], "tools": list | None}`.
    Trajectories without an assistant message are skipped (nothing to learn from them).
    """
    lake = Lake.of(lake)
    snapshot = selection_snapshot(lake, as_of)
    con = connect(lake, snapshot=snapshot)
    _selected(con, sql)
    text = sql.strip().rstrip(";")
    try:
        result = con.sql(
            f"""
            SELECT t.trajectory_id, t.messages, t.tools FROM trajectories t
            WHERE t.trajectory_id IN (SELECT trajectory_id FROM ({text}))
            ORDER BY t.trajectory_id
            """
        ).to_arrow_table()
    except duckdb.Error as exc:
        raise SelectionError(f"the selection SQL failed: {exc}", sql=sql, reason="bad_sql") from exc
    rows = []
    for rec in result.to_pylist():
        messages = template_messages(rec["messages"] or [])
        if not any(m["role"] == "assistant" for m in messages):
            continue
        rows.append(
            {"trajectory_id": rec["trajectory_id"], "messages": messages, "tools": parse_tools(rec["tools"])}
        )
    if not rows:
        raise _empty(sql, "trajectories with an assistant message")
    lineage = Lineage.of(sql, [r["trajectory_id"] for r in rows], lake, snapshot)
    return SFTSelection(rows=rows, lineage=lineage)


# --- GRPO ---------------------------------------------------------------------------------------


@dataclass
class GRPOExample:
    """One stored trajectory as the GRPO trainer consumes it (all lists are token-aligned)."""

    trajectory_id: str
    group_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    tool_mask: list[int]  # 1 = sampled by the model (trained on), 0 = tool result / template glue
    logprobs: list[float]  # sampling logprob of each completion token (0.0 where tool_mask = 0)
    truncated: bool
    reward: float
    advantage: float = 0.0

    def to_row(self) -> dict[str, Any]:
        # shallow: `asdict` deep-copies every token list, which costs more than the rest of the row
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class GRPOSelection:
    """Stored groups ready for GRPO, the advantage report and their lineage."""

    examples: list[GRPOExample]
    report: AdvantageReport
    lineage: Lineage
    dropped_small_groups: list[str] = field(default_factory=list)
    # The temperature the groups were sampled at, as each replay recorded it (None: not recorded).
    temperature: float | None = None

    @property
    def num_tokens(self) -> int:
        return sum(len(e.prompt_ids) + len(e.completion_ids) for e in self.examples)


def flatten_turns(
    trajectory_id: str, turns: Sequence[dict[str, Any]]
) -> tuple[list[int], list[int], list[int], list[float], bool]:
    """Stored turns -> (prompt_ids, completion_ids, tool_mask, logprobs, truncated).

    The sequence is the last turn's prompt + completion. Turn k's prompt must start with
    turn k-1's prompt + completion; the tokens between (tool results, template glue) are
    masked out.

    >>> flatten_turns("t", [
    ...     {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-0.5], "finish_reason": "tool_calls"},
    ...     {"prompt_token_ids": [1, 2, 3, 9], "completion_token_ids": [4, 5], "logprobs": [-0.1, -0.2], "finish_reason": "stop"}])
    ([1, 2], [3, 9, 4, 5], [1, 0, 1, 1], [-0.5, 0.0, -0.1, -0.2], False)
    """
    if not turns:
        raise MissingTokenData(
            f"trajectory `{trajectory_id}` has no token data", trajectory_ids=[trajectory_id]
        )
    prompt = list(turns[0]["prompt_token_ids"] or [])
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    truncated = False
    for k, turn in enumerate(turns):
        turn_prompt = list(turn["prompt_token_ids"] or [])
        sampled = list(turn["completion_token_ids"] or [])
        lps = list(turn["logprobs"] or [])
        if len(lps) != len(sampled):
            raise TokenDataMismatch(
                f"trajectory `{trajectory_id}` turn {k}: {len(sampled)} completion tokens but {len(lps)} logprobs; "
                "re-sample it (`trajlake replay`) or exclude it from the selection",
                trajectory_id=trajectory_id,
                turn=k,
                reason="logprobs_length",
            )
        seen = prompt + completion
        if turn_prompt[: len(seen)] != seen:
            at = next(
                (i for i, (a, b) in enumerate(zip(turn_prompt, seen, strict=False)) if a != b),
                len(turn_prompt),
            )
            raise TokenDataMismatch(
                f"trajectory `{trajectory_id}` turn {k}: its prompt does not extend the previous turns' tokens "
                f"(first difference at token {at} of {len(seen)}); multi-turn GRPO needs token-exact turns, "
                "so re-sample it with `trajlake replay`",
                trajectory_id=trajectory_id,
                turn=k,
                reason="prompt_not_prefix",
            )
        glue = turn_prompt[len(seen) :]
        completion += glue + sampled
        mask += [0] * len(glue) + [1] * len(sampled)
        logprobs += [0.0] * len(glue) + [float(x) for x in lps]
        truncated = truncated or (turn.get("finish_reason") in TRUNCATED_FINISH_REASONS)
    if not any(mask):
        raise TokenDataMismatch(
            f"trajectory `{trajectory_id}` has no sampled completion tokens",
            trajectory_id=trajectory_id,
            turn=len(turns) - 1,
            reason="empty_completion",
        )
    return prompt, completion, mask, logprobs, truncated


def select_grpo(
    lake: Lake | str,
    sql: str,
    *,
    reward_name: str | None = None,
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
    min_group_size: int = 2,
    as_of: Mapping[str, int] | None = None,
) -> GRPOSelection:
    """Scored groups of token-exact trajectories selected by `sql`, with advantages.

    `as_of` reads the lake at those table versions (a recorded lineage) instead of now.
    Rewards come from a `reward` column of the query when it has one, else from
    `latest_rewards` with name `reward_name` (which may be omitted when the selected
    trajectories carry exactly one reward name). Groups with fewer than
    `min_group_size` scored trajectories are dropped and listed; equal-reward groups
    are kept (zero advantage) and reported. Examples come in scenario order, then group id:
    a replay's group ids hash its policy, which names the adapter's run (a random run id), so
    ordering by them alone would make training depend on which run sampled them.
    """
    lake = Lake.of(lake)
    snapshot = selection_snapshot(lake, as_of)
    con = connect(lake, snapshot=snapshot)
    check_migrated(con, "trajectories")  # the temperature comes from `sampling`
    _, has_reward = _selected(con, sql)
    text = sql.strip().rstrip(";")
    scorers: list[str] = []
    if has_reward:
        reward_sql = f"SELECT trajectory_id, CAST(reward AS DOUBLE) AS reward FROM ({text})"
    else:
        names = [
            r[0]
            for r in con.execute(
                f"SELECT DISTINCT name FROM latest_rewards WHERE trajectory_id IN (SELECT trajectory_id FROM ({text})) ORDER BY 1"
            ).fetchall()
        ]
        if reward_name is None:
            if len(names) != 1:
                raise SelectionError(
                    "the selected trajectories carry "
                    + (
                        f"several reward names ({', '.join(f'`{n}`' for n in names)}); choose one: "
                        "`reward_name` (`trajlake train grpo --reward`, `[score] reward`)"
                        if names
                        else "no rewards; score them first (`trajlake score`)"
                    ),
                    sql=sql,
                    reason="ambiguous_reward" if names else "no_rewards",
                )
            reward_name = names[0]
        elif reward_name not in names:
            raise SelectionError(
                f"no reward named `{reward_name}` on the selected trajectories; available: "
                f"{', '.join(f'`{n}`' for n in names) or 'none (score them first with `trajlake score`)'}",
                sql=sql,
                reason="missing_reward",
            )
        reward_sql = "SELECT trajectory_id, value AS reward, scorer FROM latest_rewards WHERE name = $name"
    query = f"""
        WITH sel AS (SELECT DISTINCT trajectory_id FROM ({text})),
             r AS ({reward_sql})
        SELECT t.trajectory_id, coalesce(t.group_id, t.trajectory_id) AS group_id, t.turns, r.reward,
               {"NULL" if has_reward else "r.scorer"} AS scorer,
               t.sampling.temperature AS temperature
        FROM trajectories t JOIN sel USING (trajectory_id) JOIN r USING (trajectory_id)
        WHERE r.reward IS NOT NULL
        ORDER BY t.scenario_id NULLS LAST, group_id, t.trajectory_id
    """
    params = None if has_reward else {"name": reward_name}
    try:
        records = con.sql(query, params=params).to_arrow_table().to_pylist()
    except duckdb.Error as exc:
        raise SelectionError(f"the selection SQL failed: {exc}", sql=sql, reason="bad_sql") from exc
    if not records:
        raise _empty(sql, "scored trajectories")

    text_only = [r["trajectory_id"] for r in records if not r["turns"]]
    if text_only:
        raise MissingTokenData(
            f"{len(text_only)} of {len(records)} selected trajectories have no token data (text-only traces, "
            f"e.g. `{text_only[0]}`); GRPO trains on the sampled token ids and logprobs. Use them for SFT "
            "(`trajlake train sft`), or make scenarios from them and re-sample with `trajlake replay`; "
            "to select only token-exact rows add `AND len(turns) > 0`",
            trajectory_ids=text_only,
        )

    by_group: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_group.setdefault(rec["group_id"], []).append(rec)
    small = [g for g, members in by_group.items() if len(members) < min_group_size]
    kept = [rec for g, members in by_group.items() if len(members) >= min_group_size for rec in members]
    if not kept:
        raise SelectionError(
            f"no group of the selection has at least {min_group_size} scored trajectories "
            f"({len(small)} groups too small, e.g. `{small[0]}`); GRPO compares samples of the same scenario, "
            "so replay scenarios with `--group-size` >= 2 and score them",
            sql=sql,
            reason="no_groups",
        )

    temperature = sampled_temperature(sql, kept)
    examples = []
    for rec in kept:
        prompt, completion, mask, logprobs, truncated = flatten_turns(rec["trajectory_id"], rec["turns"])
        examples.append(
            GRPOExample(
                trajectory_id=rec["trajectory_id"],
                group_id=rec["group_id"],
                prompt_ids=prompt,
                completion_ids=completion,
                tool_mask=mask,
                logprobs=logprobs,
                truncated=truncated,
                reward=float(rec["reward"]),
            )
        )
    advantages, report = compute_advantages(
        [e.group_id for e in examples], [e.reward for e in examples], scale_rewards=scale_rewards, eps=eps
    )
    for example, adv in zip(examples, advantages, strict=True):
        example.advantage = adv
    if not has_reward:
        scorers = sorted({r["scorer"] for r in kept if r["scorer"]})
    lineage = Lineage.of(
        sql,
        [e.trajectory_id for e in examples],
        lake,
        snapshot,
        reward_name=reward_name if not has_reward else "reward",
        reward_scorers=scorers,
    )
    return GRPOSelection(
        examples=examples, report=report, lineage=lineage, dropped_small_groups=small, temperature=temperature
    )


def sampled_temperature(sql: str, records: Sequence[Mapping[str, Any]]) -> float | None:
    """The one temperature the selected rows were sampled at (None when no row recorded one).

    TRL divides the policy's logits by the sampling temperature, and the stored logprobs
    were taken at it, so a batch mixing temperatures has no single right value: refused.
    """
    counts: dict[float, int] = {}
    for rec in records:
        if rec["temperature"] is not None:
            counts[rec["temperature"]] = counts.get(rec["temperature"], 0) + 1
    if any(not is_group_temperature(t) for t in counts):
        raise SelectionError(
            "some selected trajectories were sampled greedily (temperature 0): select groups sampled "
            f"at a temperature {GROUP_TEMPERATURE_RULE}",
            sql=sql,
            reason="greedy_groups",
        )
    if len(counts) > 1:
        found = ", ".join(f"{t:g} ({n} trajectories)" for t, n in sorted(counts.items()))
        raise SelectionError(
            f"the selected trajectories were sampled at different temperatures: {found}; "
            "select groups sampled at one temperature",
            sql=sql,
            reason="mixed_temperatures",
        )
    return next(iter(counts), None)
