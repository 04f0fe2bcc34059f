"""The derived views and the table macro every connection builds over the tables."""

from __future__ import annotations

from store.schema import PARTITION_COLUMN
from store.vocabulary import PRODUCTION_SOURCES, one_of

DERIVED_VIEWS = {
    "messages": f"""
        SELECT trajectory_id, source, model, scenario_id, group_id, {PARTITION_COLUMN},
               position - 1 AS position,
               msg.role AS role, msg.content AS content, msg.name AS name,
               msg.tool_call_id AS tool_call_id, msg.tool_calls AS tool_calls,
               msg.is_error AS is_error
        FROM (
            SELECT trajectory_id, source, model, scenario_id, group_id, {PARTITION_COLUMN},
                   unnest(messages) AS msg, generate_subscripts(messages, 1) AS position
            FROM trajectories
        )
    """,
    # Per (trajectory_id, name) the newest successful reward. Most pairs have one row (one
    # scorer): only pairs that repeat (found on a hash) go through the window.
    "latest_rewards": """
        WITH r AS NOT MATERIALIZED (
            SELECT * FROM rewards WHERE status IS DISTINCT FROM 'failed' AND value IS NOT NULL
        ),
        d AS MATERIALIZED (SELECT hash(trajectory_id, name) AS __h FROM r GROUP BY 1 HAVING count(*) > 1)
        SELECT * FROM r ANTI JOIN d ON hash(trajectory_id, name) = d.__h
        UNION ALL
        (SELECT * FROM r SEMI JOIN d ON hash(trajectory_id, name) = d.__h
         QUALIFY row_number() OVER (PARTITION BY trajectory_id, name ORDER BY scored_at DESC, _written_at DESC) = 1)
    """,
    "groups": """
        SELECT t.group_id, any_value(t.scenario_id) AS scenario_id, r.name,
               count(*) AS size, avg(r.value) AS mean, coalesce(stddev_pop(r.value), 0) AS std,
               min(r.value) AS min, max(r.value) AS max, min(r.value) = max(r.value) AS all_equal
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE t.group_id IS NOT NULL
        GROUP BY t.group_id, r.name
    """,
    "policy_performance": """
        SELECT coalesce(t.policy, t.model) AS policy, a.name AS adapter, a.version AS adapter_version,
               r.name, date_trunc('day', t.started_at) AS day, count(*) AS trajectories,
               avg(r.value) AS mean, min(t.started_at) AS first_seen, max(t.started_at) AS last_seen
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
             LEFT JOIN adapters a ON coalesce(t.policy, t.model) = a.name || '-v' || CAST(a.version AS VARCHAR)
        WHERE {production} AND coalesce(t.policy, t.model) IS NOT NULL
        GROUP BY ALL
    """.replace("{production}", one_of("t.source", PRODUCTION_SOURCES, table="trajectories")),
}

GROUP_STATS_MACRO = """
    CREATE OR REPLACE MACRO group_stats(reward_name) AS TABLE
    SELECT * FROM groups WHERE name = reward_name
"""
