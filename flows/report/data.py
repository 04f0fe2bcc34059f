"""The pipeline report: one self-contained HTML page with plots, built from the lake.

`report_data` gathers what the page shows with SQL over the lake's views (so every
number on the page can be re-derived by a user with `trajlake sql`); `render_report`
turns it into HTML, with matplotlib plots (`flows.report_plots`) embedded as PNG:

- learning: success per stage (base model, SFT, each GRPO round) on the val scenarios
  with 95% CIs, the production policy's success as a reference line, and the table
  behind it with paired differences (the newest evaluation run in `runs`);
- what changed: the val scenarios the candidate answers better or worse than where its run
  started (`flows.report.changes`);
- production before and after: feedback per policy from `policy_performance`, served
  adapters attributed to their version;
- mean reward per round, the reward distribution of each group, the published adapter's
  evaluation and lineage.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from flows.report.changes import ValChanges, val_changes
from flows.report.groups import GroupView, group_view
from flows.report.production import Conversation, TrafficRow, newest_conversations, production_traffic
from flows.report.sampling import SamplerGapRow, gap_steps, sampler_gap_rows
from flows.report.window import time_window
from store.catalog.connection import connect
from store.lake import Lake
from store.metrics import EvaluationTableRow, is_table_row, row_metrics
from store.pipeline_runs import GateDecision, PipelineRun
from store.pipeline_runs import gate_decisions as read_gate_decisions
from store.pipeline_runs import pipeline_runs as read_pipeline_runs
from store.schema import TABLES
from store.selections import OUTSIDE_VAL_SCENARIOS
from store.vocabulary import PRODUCTION_SOURCES, equals, one_of

REPLAYED = equals("t.source", "replay", table="trajectories")
PIPELINE_ROUND = "t.replay_run LIKE 'round-%'"  # flows.stages.replay's run names
GROUPS_PER_POLICY = 200  # the reward-distribution plot's sample of each policy's groups


@dataclass
class RoundRewards:
    """Rewards of the trajectories one policy sampled (one round of the loop)."""

    round: int
    policy: str
    trajectories: int
    groups: int
    mean: float
    std: float
    equal_groups: int

    @property
    def equal_share(self) -> float:
        """Share of the round's groups whose rewards were all equal (no GRPO signal)."""
        return self.equal_groups / self.groups if self.groups else 0.0


@dataclass
class PublishedComparison:
    """Val-scenario reward of the published adapter and of what it was compared with."""

    candidate: str
    candidate_reward: float
    baseline: str
    baseline_reward: float
    scenarios: int
    promoted: bool


@dataclass
class StageRow:
    """One row of the newest evaluation table: a stage on the val scenarios, or a production policy."""

    stage: str
    policy: str
    kind: str  # "val" or "production"
    mean: float
    ci: tuple[float, float]
    n: int  # val scenarios, or production trajectories
    differences: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # against -> mean, CI
    adapter: str | None = None  # a production policy that is a published adapter's served name
    greedy: tuple[float, float, float, int] | None = None  # T=0: mean, CI, scenarios (when measured)


@dataclass
class ProductionRow:
    """Production feedback of one policy (`policy_performance`, all days)."""

    policy: str
    adapter: str | None
    adapter_version: int | None
    trajectories: int
    mean: float


@dataclass
class ReportData:
    title: str
    reward_name: str
    success_reward: str = ""
    production_reward: str = "user_feedback"
    learning: list[StageRow] = field(default_factory=list)
    changes: ValChanges | None = None  # the val scenarios the candidate answers differently
    production: list[ProductionRow] = field(default_factory=list)
    rounds: list[RoundRewards] = field(default_factory=list)
    group_rewards: dict[str, list[list[float]]] = field(default_factory=dict)  # policy -> groups -> values
    sampler_gap: list[SamplerGapRow] = field(default_factory=list)  # per GRPO round
    evaluation: PublishedComparison | None = None
    adapter: dict[str, Any] | None = None  # the adapters-table row, lineage JSON parsed
    tables: list[tuple[str, int]] = field(default_factory=list)
    gap_steps: list[tuple[int, int, float]] = field(
        default_factory=list
    )  # (round, step, mean gap) per GRPO step
    production_days: list[tuple[str, str, float, int]] = field(default_factory=list)  # (day, policy, mean, n)
    groups: GroupView | None = None
    # per production policy, in the order they first served: its trajectories' feedback values
    production_values: list[tuple[str, list[float]]] = field(default_factory=list)
    pipeline_runs: list[PipelineRun] = field(default_factory=list)  # oldest first
    gate_decisions: list[GateDecision] = field(default_factory=list)  # `trajlake publish`'s, oldest first
    traffic: list[TrafficRow] = field(default_factory=list)  # every production trajectory, per day
    traffic_left_out: int = 0
    conversations: list[Conversation] = field(default_factory=list)  # the newest production ones
    sql_recipes: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)


def report_data(
    lake: Lake | str | os.PathLike[str],
    reward_name: str,
    *,
    title: str = "trajlake pipeline report",
    evaluation: PublishedComparison | None = None,
    adapter_name: str | None = None,
    sql_recipes: list[tuple[str, str]] | None = None,
    timings: list[tuple[str, float]] | None = None,
    production_reward: str = "user_feedback",
    eval_run: str | None = None,
    adapter_version: int | None = None,
    since: str | None = None,
    until: str | None = None,
    max_groups: int = 60,
    tokenizer: Any = None,
) -> ReportData:
    """Everything the report shows, read from the lake's views with bounded queries.

    `eval_run` picks the evaluation table (default: the newest pipeline run's, else the
    newest evaluation), `adapter_name` and
    `adapter_version` the lineage shown (default: the version holding `production`, else the newest), `since`/`until`
    (ISO times) the window of replayed groups and production feedback; the group viewer
    shows at most `max_groups` groups, token ids decoded with `tokenizer` when given.
    """
    # Read-only: a lake an older trajlake wrote reads as it is, its rows without the typed
    # columns (`trajlake migrate` fills them) left out of what those columns drive.
    con = connect(lake)
    window, params = time_window(since, until)
    day_window, day_params = time_window(since, until, "t.day")
    pipeline_runs = read_pipeline_runs(lake, skip_unmigrated=True)
    evaluated = [run.eval_run_id for run in pipeline_runs if run.eval_run_id]
    learning, success_reward = learning_rows(con, eval_run or (evaluated[-1] if evaluated else None))
    changes = val_changes(con, learning, success_reward)
    # a lake the pipeline runs on: its rounds are the pipeline's (an ad-hoc replay is not a round)
    rounds_only = f"AND {PIPELINE_ROUND}" if pipeline_runs else ""
    production = production_rows(con, production_reward)
    served = {p.policy: p.adapter for p in production}
    for row in learning:
        row.adapter = served.get(row.policy) if row.kind == "production" else None
    per_round = con.execute(
        """
        WITH scored AS (
            SELECT t.policy, t.group_id, t.started_at, r.value
            FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
            WHERE {replayed} AND r.name = ? {window} AND {outside_val} {rounds_only}
        ),
        per_group AS (
            SELECT policy, group_id, min(value) = max(value) AS equal FROM scored GROUP BY ALL
        )
        SELECT s.policy, min(s.started_at) AS first_seen, count(*) AS n, count(DISTINCT s.group_id) AS groups,
               avg(s.value) AS mean, coalesce(stddev_pop(s.value), 0) AS std,
               (SELECT count(*) FROM per_group g WHERE g.policy = s.policy AND g.equal) AS equal_groups
        FROM scored s GROUP BY s.policy ORDER BY first_seen
        """.replace("{window}", window)
        .replace("{rounds_only}", rounds_only)
        .replace("{outside_val}", OUTSIDE_VAL_SCENARIOS)
        .replace("{replayed}", REPLAYED),
        [reward_name, *params],
    ).fetchall()
    rounds = [
        RoundRewards(i + 1, policy or "(base)", n, groups, float(mean), float(std), int(equal))
        for i, (policy, _, n, groups, mean, std, equal) in enumerate(per_round)
    ]
    group_rows = con.execute(  # at most GROUPS_PER_POLICY groups of each policy (a hash sample)
        f"""
        SELECT t.policy, t.group_id, list(r.value ORDER BY r.value) AS values
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE {REPLAYED} AND r.name = ? AND t.group_id IS NOT NULL {window} AND {OUTSIDE_VAL_SCENARIOS}
            {rounds_only}
        GROUP BY t.policy, t.group_id
        QUALIFY row_number() OVER (PARTITION BY t.policy ORDER BY hash(t.group_id)) <= {GROUPS_PER_POLICY}
        ORDER BY t.group_id
        """,
        [reward_name, *params],
    ).fetchall()
    group_rewards: dict[str, list[list[float]]] = {}
    for policy, _, values in group_rows:
        group_rewards.setdefault(policy or "(base)", []).append([float(v) for v in values])
    adapter = None
    if adapter_name:
        adapter_row = con.execute(
            # no version named: the one in production, else the newest
            "SELECT * FROM adapters WHERE name = ? AND (? IS NULL OR version = ?) "
            "ORDER BY list_contains(coalesce(aliases, []), 'production') DESC, version DESC LIMIT 1",
            [adapter_name, adapter_version, adapter_version],
        ).fetchone()
        if adapter_row is not None:
            columns = [d[0] for d in con.description]
            adapter = dict(zip(columns, adapter_row, strict=True))
            for key in ("data", "metrics"):
                if isinstance(adapter.get(key), str):
                    adapter[key] = json.loads(adapter[key])
    tables = [(s.table, s.rows) for s in _table_counts(con)]
    production_days = [
        (str(day)[:10], policy, float(mean), int(n))
        for day, policy, mean, n in con.execute(
            f"""SELECT day, policy, mean, trajectories FROM policy_performance t
                WHERE name = ? {day_window} ORDER BY day, policy""",
            [production_reward, *day_params],
        ).fetchall()
    ]
    traffic, traffic_left_out = production_traffic(con, production_reward)
    groups = group_view(con, reward_name, cap=max_groups, since=since, until=until, tokenizer=tokenizer)
    return ReportData(
        title=title,
        reward_name=reward_name,
        success_reward=success_reward or reward_name,
        production_reward=production_reward,
        learning=learning,
        changes=changes,
        production=production,
        production_values=production_values(con, production_reward),
        rounds=rounds,
        group_rewards=group_rewards,
        sampler_gap=sampler_gap_rows(con),
        gap_steps=gap_steps(con),
        production_days=production_days,
        groups=groups,
        pipeline_runs=pipeline_runs,
        gate_decisions=read_gate_decisions(lake, skip_unmigrated=True),
        traffic=traffic,
        traffic_left_out=traffic_left_out,
        conversations=newest_conversations(con, production_reward),
        evaluation=evaluation,
        adapter=adapter,
        tables=tables,
        sql_recipes=sql_recipes or [],
        timings=timings or [],
    )


def default_reward(con: Any) -> str | None:
    """The reward a report shows by default: the newest evaluation's, else the one most replayed
    trajectories carry."""
    _, reward = learning_rows(con)
    if reward:
        return reward
    found = con.execute(
        f"""SELECT r.name FROM latest_rewards r JOIN trajectories t USING (trajectory_id)
           WHERE {REPLAYED} GROUP BY r.name ORDER BY count(*) DESC, r.name LIMIT 1"""
    ).fetchone()
    return found[0] if found else None


def newest_adapter(con: Any) -> str | None:
    """The name of the most recently published adapter, if any."""
    found = con.execute(
        "SELECT name FROM adapters ORDER BY published_at DESC, version DESC LIMIT 1"
    ).fetchone()
    return found[0] if found else None


def learning_rows(con: Any, eval_run: str | None = None) -> tuple[list[StageRow], str]:
    """The table of an evaluation run (`runs`, stage `eval`, role `table`; default the newest) and its reward."""
    run = con.execute(
        f"""SELECT run_id FROM runs WHERE {equals("stage", "eval", table="runs")} AND (? IS NULL OR run_id = ?)
           ORDER BY "at" DESC, run_id DESC LIMIT 1""",
        [eval_run, eval_run],
    ).fetchone()
    if run is None:
        return [], ""
    metrics = [
        row_metrics(scalars, tags)
        for scalars, tags in con.execute(
            "SELECT scalars, tags FROM runs WHERE run_id = ? ORDER BY step", [run[0]]
        ).fetchall()
    ]
    rows = []
    for row in (EvaluationTableRow.from_metrics(m) for m in metrics if is_table_row(m)):
        rows.append(
            StageRow(
                stage=row.stage,
                policy=row.policy,
                kind=row.kind,
                mean=row.mean_reward,
                ci=(row.ci_low, row.ci_high),
                n=row.n,
                differences=row.differences,
                greedy=row.greedy,
            )
        )
    return rows, str(metrics[0].get("reward", "")) if metrics else ""


def production_values(con: Any, reward: str) -> list[tuple[str, list[float]]]:
    """Each production policy's feedback values (`reward`) over its own traffic, first served first."""
    found = con.execute(
        f"""
        SELECT t.policy, list(r.value ORDER BY t.trajectory_id)
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE r.name = ? AND r.value IS NOT NULL AND t.policy IS NOT NULL
              AND {one_of("t.source", PRODUCTION_SOURCES, table="trajectories")}
        GROUP BY t.policy ORDER BY min(t.started_at), t.policy
        """,
        [reward],
    ).fetchall()
    return [(policy, [float(v) for v in values]) for policy, values in found]


def production_rows(con: Any, reward: str) -> list[ProductionRow]:
    """Production feedback per policy over all days, in the order the policies first served."""
    found = con.execute(
        """
        SELECT policy, any_value(adapter), any_value(adapter_version), sum(trajectories),
               sum(mean * trajectories) / sum(trajectories)
        FROM policy_performance WHERE name = ? GROUP BY policy ORDER BY min(first_seen), policy
        """,
        [reward],
    ).fetchall()
    return [ProductionRow(p, a, v, int(n), float(mean)) for p, a, v, n, mean in found]


@dataclass
class _Count:
    table: str
    rows: int


def _table_counts(con: Any) -> list[_Count]:
    return [_Count(name, con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in TABLES]
