"""The default selections: which rows each stage reads unless told otherwise, declared once.

Each is SQL over the lake's views, written from the vocabularies (`store.vocabulary`). The
flow's `[select]` table, the command line's defaults and the libraries' own defaults are
these strings; none of them reads a val scenario for training.
"""

from __future__ import annotations

from store.vocabulary import PRODUCTION_SOURCES, equals, one_of

#: SQL condition over `trajectories` that keeps away from the val scenarios: their replays
#: (evaluation replays; each also says `metadata.split = 'val'`) and the production
#: conversations they were cut from. Every default training selection uses it, so no
#: default ever trains on what evaluation measures. (`NOT IN` over a NULL would drop every
#: row: both sides are kept free of NULLs.)
OUTSIDE_VAL_SCENARIOS = (
    f"coalesce(scenario_id, '') NOT IN (SELECT scenario_id FROM scenarios WHERE {equals('split', 'val')}) "
    "AND trajectory_id NOT IN (SELECT source_trajectory_id FROM scenarios "
    f"WHERE {equals('split', 'val')} AND source_trajectory_id IS NOT NULL)"
)

#: Production traffic (collected, pulled or imported): what scenarios are cut from.
PRODUCTION_TRAJECTORIES = (
    f"SELECT trajectory_id FROM trajectories WHERE {one_of('source', PRODUCTION_SOURCES)}"
)

#: The scenarios each round replays and trains on.
TRAIN_SCENARIOS = f"SELECT scenario_id FROM scenarios WHERE {equals('split', 'train')}"

#: The held-out scenarios evaluation and the publish gate replay.
VAL_SCENARIOS = f"SELECT scenario_id FROM scenarios WHERE {equals('split', 'val')}"

#: Production conversations with content, outside the val scenarios: what SFT imitates.
SFT_TRAJECTORIES = f"{PRODUCTION_TRAJECTORIES} AND has_content AND {OUTSIDE_VAL_SCENARIOS}"

#: Replayed trajectories with token data, outside the val scenarios: what GRPO trains on.
GRPO_TRAJECTORIES = (
    f"SELECT trajectory_id FROM trajectories WHERE {equals('source', 'replay')} AND len(turns) > 0 "
    f"AND {OUTSIDE_VAL_SCENARIOS}"
)
