"""The default selections: which rows each stage reads unless told otherwise, declared once.

Each is SQL over the lake's views, written from the vocabularies (`store.vocabulary`). The
flow's `[select]` table, the command line's defaults and the libraries' own defaults are
these strings; none of them reads a val scenario for training.
"""

from __future__ import annotations

from datetime import UTC, datetime

from store.vocabulary import PRODUCTION_SOURCES, equals, one_of

#: SQL condition over `trajectories` that keeps away from the val scenarios: their replays
#: (evaluation replays; each also says `scenario_split = 'val'`) and the production
#: conversations they were cut from. Every default training selection uses it, so no
#: default ever trains on what evaluation measures. (`NOT IN` over a NULL would drop every
#: row: both sides are kept free of NULLs.)
OUTSIDE_VAL_SCENARIOS = (
    f"coalesce(scenario_id, '') NOT IN (SELECT scenario_id FROM scenarios WHERE {equals('split', 'val', table='scenarios')}) "
    "AND trajectory_id NOT IN (SELECT source_trajectory_id FROM scenarios "
    f"WHERE {equals('split', 'val', table='scenarios')} AND source_trajectory_id IS NOT NULL)"
)

#: Production traffic (collected, pulled or imported): what scenarios are cut from.
PRODUCTION_TRAJECTORIES = f"SELECT trajectory_id FROM trajectories WHERE {one_of('source', PRODUCTION_SOURCES, table='trajectories')}"

#: SQL condition over `scenarios` (or a replay's columns): the scenario has an expected outcome,
#: all a reward that compares with one (`needs_expected`) can score.
HAS_EXPECTED = "expected IS NOT NULL AND expected <> ''"

#: The scenarios each round replays and trains on. A pipeline run keeps it to the scenarios new
#: since its last finished run plus `pipeline.window_days` before (`scenarios_since`), and
#: samples them with the policy it is training: scenarios come back with each new policy.
TRAIN_SCENARIOS = f"SELECT scenario_id FROM scenarios WHERE {equals('split', 'train', table='scenarios')}"

#: The held-out scenarios evaluation and the publish gate replay.
VAL_SCENARIOS = f"SELECT scenario_id FROM scenarios WHERE {equals('split', 'val', table='scenarios')}"

#: Production conversations with content, outside the val scenarios: what SFT imitates (all of
#: them when a pipeline run starts from the base model; only its window's when it continues
#: the production adapter with SFT: `trajectories_since`).
SFT_TRAJECTORIES = f"{PRODUCTION_TRAJECTORIES} AND has_content AND {OUTSIDE_VAL_SCENARIOS}"

#: Replayed trajectories with token data, outside the val scenarios: what GRPO trains on.
GRPO_TRAJECTORIES = (
    f"SELECT trajectory_id FROM trajectories WHERE {equals('source', 'replay', table='trajectories')} AND len(turns) > 0 "
    f"AND {OUTSIDE_VAL_SCENARIOS}"
)


def grpo_trajectories_of(group_ids: list[str] | None) -> str:
    """`GRPO_TRAJECTORIES` kept to the groups `group_ids` (a round's; None: every replayed group),
    so a round trains on what it sampled and never on a val scenario.

    >>> grpo_trajectories_of(["g'1"]).endswith("AND group_id IN ('g''1')")
    True
    """
    if not group_ids:
        return GRPO_TRAJECTORIES
    quoted = ", ".join("'" + g.replace("'", "''") + "'" for g in group_ids)
    return f"{GRPO_TRAJECTORIES} AND group_id IN ({quoted})"


def _timestamp(at: datetime) -> str:
    if at.tzinfo is None:
        raise ValueError(f"`{at}` has no time zone; pass an aware UTC time")
    return f"TIMESTAMPTZ '{at.astimezone(UTC).isoformat()}'"


def scenarios_since(selection: str, since: datetime | None) -> str:
    """`selection` (returning `scenario_id`) kept to scenarios made at or after `since` (None: as is).

    A scheduled pipeline replays what is new since its last run (plus its window), so each
    night learns from the traffic that night brought.

    >>> from datetime import datetime, UTC
    >>> scenarios_since("SELECT scenario_id FROM scenarios", datetime(2026, 11, 26, tzinfo=UTC))
    "SELECT scenario_id FROM (SELECT scenario_id FROM scenarios) WHERE scenario_id IN (SELECT scenario_id FROM scenarios WHERE created_at >= TIMESTAMPTZ '2026-11-26T00:00:00+00:00')"
    """
    if since is None:
        return selection
    return (
        f"SELECT scenario_id FROM ({selection}) WHERE scenario_id IN "
        f"(SELECT scenario_id FROM scenarios WHERE created_at >= {_timestamp(since)})"
    )


def scenarios_with_expected(selection: str) -> str:
    """`selection` (returning `scenario_id`) kept to the scenarios that have an expected outcome:
    all a reward that compares with one (`needs_expected`) can score. Replaying a scenario without
    one for such a reward leaves its group unscored, and a round of only those gives GRPO nothing
    to read.

    >>> scenarios_with_expected("SELECT scenario_id FROM scenarios")
    "SELECT scenario_id FROM (SELECT scenario_id FROM scenarios) WHERE scenario_id IN (SELECT scenario_id FROM scenarios WHERE expected IS NOT NULL AND expected <> '')"
    """
    return f"SELECT scenario_id FROM ({selection}) WHERE scenario_id IN (SELECT scenario_id FROM scenarios WHERE {HAS_EXPECTED})"


def trajectories_since(selection: str, since: datetime | None) -> str:
    """`selection` (returning `trajectory_id`) kept to trajectories that started at or after `since`
    (None: as is): the production conversations of the pipeline's window."""
    if since is None:
        return selection
    return (
        f"SELECT trajectory_id FROM ({selection}) WHERE trajectory_id IN "
        f"(SELECT trajectory_id FROM trajectories WHERE started_at >= {_timestamp(since)})"
    )


def trajectories_not_replayed(selection: str, scenarios: str) -> str:
    """`selection` (returning `trajectory_id`) without the conversations that the scenarios
    `scenarios` (returning `scenario_id`) were cut from.

    What SFT imitates, it answers the same way every sample: a GRPO group on a scenario cut from
    a conversation SFT learned from has equal rewards, so no signal (a SmolLM2 night: 23 of 24
    groups equal at mean reward 0.996 on such scenarios, against 0.82 on the val scenarios).

    >>> trajectories_not_replayed("SELECT trajectory_id FROM trajectories", "SELECT scenario_id FROM scenarios")
    'SELECT trajectory_id FROM (SELECT trajectory_id FROM trajectories) WHERE trajectory_id NOT IN (SELECT source_trajectory_id FROM scenarios WHERE scenario_id IN (SELECT scenario_id FROM (SELECT scenario_id FROM scenarios)) AND source_trajectory_id IS NOT NULL)'
    """
    return (
        f"SELECT trajectory_id FROM ({selection}) WHERE trajectory_id NOT IN "
        f"(SELECT source_trajectory_id FROM scenarios WHERE scenario_id IN (SELECT scenario_id FROM ({scenarios})) "
        "AND source_trajectory_id IS NOT NULL)"
    )
