"""Scenarios in the lake: cut them from selected trajectories, load them from JSONL, read them back.

The pure cutting and parsing live in `training.replay.scenarios`; this module is the I/O
around them. Every write is one atomic `store.writer.write`, so a failed selection or a bad
JSONL line leaves nothing behind.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from store.catalog.connection import check_selection, connect
from store.errors import SelectionError
from store.lake import Lake
from store.writer import write
from training.replay.errors import ScenarioError
from training.replay.scenarios import (
    Scenario,
    ScenarioConfig,
    ScenarioResult,
    parse_scenarios_jsonl,
    scenario_from_trajectory,
)


def selected_rows(con: duckdb.DuckDBPyConnection, sql: str, table: str, column: str) -> list[dict[str, Any]]:
    """Rows of `table` whose `column` the user's SQL selects, ordered by it."""
    try:
        text, _ = check_selection(con, sql, column)
        return (
            con.sql(
                f"SELECT x.* FROM {table} x WHERE x.{column} IN (SELECT {column} FROM ({text})) ORDER BY x.{column}"
            )
            .to_arrow_table()
            .to_pylist()
        )
    except SelectionError as exc:
        raise ScenarioError(str(exc), item=sql, reason=exc.reason) from exc
    except duckdb.Error as exc:
        raise ScenarioError(f"the selection SQL failed: {exc}", item=sql, reason="bad_sql") from exc


def split_counts(scenarios: list[Scenario]) -> dict[str, int]:
    return dict(Counter(s.split for s in scenarios))


def create_scenarios(lake: Lake | str, sql: str, config: ScenarioConfig | None = None) -> ScenarioResult:
    """Make scenarios from the trajectories selected by `sql` and write them (one atomic write).

    Trajectories that cannot give a scenario are skipped with a reason code; if none can,
    nothing is written and `ScenarioError` says why.
    """
    config = config or ScenarioConfig()
    with connect(lake, read_only=True) as con:
        rows = selected_rows(con, sql, "trajectories", "trajectory_id")
        labels, ratings = labels_and_ratings(con, [row["trajectory_id"] for row in rows], config)
    if not rows:
        raise ScenarioError(
            f"the selection returned no trajectories: {sql}", item=sql, reason="empty_selection"
        )
    scenarios, skipped, first_problem = [], [], ""
    for row in rows:
        try:
            trajectory_id = row["trajectory_id"]
            scenarios.append(
                scenario_from_trajectory(
                    row,
                    turn=config.turn,
                    val_fraction=config.val_fraction,
                    label=labels.get(trajectory_id),
                    rated=ratings.get(trajectory_id),
                )
            )
        except ScenarioError as exc:
            skipped.append((row["trajectory_id"], exc.reason))
            first_problem = first_problem or str(exc)
    if not scenarios:
        reasons = sorted({reason for _, reason in skipped})
        raise ScenarioError(
            f"none of the {len(rows)} selected trajectories gives a scenario (reasons: {', '.join(reasons)}; "
            f"first: {first_problem}); nothing was written",
            item=sql,
            reason="no_scenarios",
        )
    write(lake, "scenarios", keep_creation_times(lake, [s.to_row() for s in scenarios]))
    return ScenarioResult([s.scenario_id for s in scenarios], skipped, split_counts(scenarios))


def labels_and_ratings(
    con: duckdb.DuckDBPyConnection, ids: list[str], config: ScenarioConfig
) -> tuple[dict[str, str], dict[str, str]]:
    """For the conversations `ids`: the `expected` JSON of each one's newest label that has one,
    and what its user said (`right`/`wrong`): a label's verdict where it gives one, else the
    newest `config.feedback` reward, against `config.right_at`/`wrong_at`."""
    if not ids:
        return {}, {}
    con.register("__labelled", pa.table({"trajectory_id": pa.array(ids, pa.string())}))
    try:
        labels = dict(
            con.execute(
                "SELECT trajectory_id, arg_max(expected, labeled_at) FROM labels "
                "WHERE expected IS NOT NULL AND trajectory_id IN (SELECT trajectory_id FROM __labelled) "
                "GROUP BY trajectory_id"
            ).fetchall()
        )
        scores = con.execute(
            """
            SELECT i.trajectory_id, coalesce(l.verdict, f.value)
            FROM __labelled i
            LEFT JOIN (SELECT trajectory_id, arg_max(verdict, labeled_at) AS verdict FROM labels
                       WHERE verdict IS NOT NULL GROUP BY trajectory_id) l USING (trajectory_id)
            LEFT JOIN (SELECT trajectory_id, value FROM latest_rewards WHERE name = $name) f USING (trajectory_id)
            """,
            {"name": config.feedback},
        ).fetchall()
    finally:
        con.unregister("__labelled")
    ratings = {}
    for trajectory_id, value in scores:
        if value is not None and value >= config.right_at:
            ratings[trajectory_id] = "right"
        elif value is not None and value <= config.wrong_at:
            ratings[trajectory_id] = "wrong"
    return labels, ratings


def keep_creation_times(lake: Lake | str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` with the `created_at` of the scenarios the lake already holds: re-creating a scenario
    (every pipeline run re-creates them all) updates it but does not make it new, so a run can tell
    the scenarios its traffic brought (`store.selections.scenarios_since`) from the ones it has seen."""
    lake = Lake.of(lake)
    if not lake.has_table("scenarios"):
        return rows
    ids = [row["scenario_id"] for row in rows]
    with connect(lake, read_only=True) as con:
        found = dict(
            con.execute(
                "SELECT scenario_id, created_at FROM scenarios WHERE scenario_id IN (SELECT unnest($ids))",
                {"ids": ids},
            ).fetchall()
        )
    return [{**row, "created_at": found.get(row["scenario_id"], row["created_at"])} for row in rows]


def load_scenarios(
    lake: Lake | str, path: str | Path, config: ScenarioConfig | None = None
) -> ScenarioResult:
    """Load scenarios from a JSONL file into the lake (validated entirely before anything is written)."""
    config = config or ScenarioConfig()
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(
            f"cannot read `{path}`: {exc.strerror}", item=str(path), reason="unreadable"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        where = f"{path}:{line}"
        raise ScenarioError(
            f"{where}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the file as UTF-8",
            item=where,
            reason="bad_encoding",
        ) from None
    scenarios = parse_scenarios_jsonl(text.splitlines(), source=str(path), val_fraction=config.val_fraction)
    if not scenarios:
        raise ScenarioError(f"`{path}` has no scenarios (empty file)", item=str(path), reason="empty_file")
    write(lake, "scenarios", [s.to_row() for s in scenarios])
    return ScenarioResult([s.scenario_id for s in scenarios], [], split_counts(scenarios))


def read_scenarios(
    lake: Lake | str,
    sql: str = "SELECT * FROM scenarios",
    *,
    con: duckdb.DuckDBPyConnection | None = None,
) -> list[Scenario]:
    """Scenarios whose ids `sql` selects (any query over the views returning `scenario_id`), by id.

    `con`: an open read-only connection of `lake` to reuse (it is left open).
    """
    if con is not None:
        return [Scenario.from_row(row) for row in selected_rows(con, sql, "scenarios", "scenario_id")]
    with connect(lake, read_only=True) as own:
        return [Scenario.from_row(row) for row in selected_rows(own, sql, "scenarios", "scenario_id")]


def shard_selection(sql: str, shard: int, shards: int) -> str:
    """`sql` (returning `scenario_id`) narrowed to shard `shard` of `shards`, by a hash of the id:
    the shards partition the selection, the same way in every process.

    >>> shard_selection("SELECT scenario_id FROM scenarios", 1, 4)
    'SELECT scenario_id FROM (SELECT scenario_id FROM scenarios) WHERE hash(scenario_id) % 4 = 1'
    """
    if not 0 <= shard < shards:
        raise ScenarioError(
            f"shard {shard} is not one of 0..{shards - 1}", item=str(shard), reason="bad_shard"
        )
    return f"SELECT scenario_id FROM ({sql}) WHERE hash(scenario_id) % {shards} = {shard}"


def slice_selection(lake: Lake | str, sql: str, size: int, index: int) -> str:
    """`sql` (returning `scenario_id`) narrowed to its `index`-th slice of `size` scenarios.

    Slices walk the selection in a fixed order, wrapping around, so successive rounds (index
    0, 1, ...) replay new scenarios before any repeats: first the scenarios cut from
    conversations users rated wrong (what production got wrong is what a policy has most to
    learn from, and their groups are the ones whose rewards differ), then the rest, each part
    in hashed order. A selection of at most `size` scenarios, or `size` <= 0, is returned
    unchanged.
    """
    if size <= 0:
        return sql
    with connect(lake, read_only=True) as con:
        try:
            text, _ = check_selection(con, sql, "scenario_id")
            total = con.execute(f"SELECT count(DISTINCT scenario_id) FROM ({text})").fetchall()[0][0]
        except SelectionError as exc:
            raise ScenarioError(str(exc), item=sql, reason=exc.reason) from exc
    if total <= size:
        return sql
    start = index * size % total
    end = start + size
    ordered = (
        "SELECT scenario_id, row_number() OVER (ORDER BY coalesce(s.rated = 'wrong', false) DESC, "
        "hash(scenario_id), scenario_id) - 1 AS i "
        f"FROM (SELECT DISTINCT scenario_id FROM ({text})) LEFT JOIN scenarios s USING (scenario_id)"
    )
    wrap = f" OR i < {end - total}" if end > total else ""
    return f"SELECT scenario_id FROM ({ordered}) WHERE (i >= {start} AND i < {end}){wrap}"
