"""The pipeline report: one self-contained HTML page with plots, built from the lake.

`report_data` gathers what the page shows with SQL over the lake's views (so every
number on the page can be re-derived by a user with `trajlake sql`); `render_report`
turns it into HTML, with matplotlib plots (`flows.report_plots`) embedded as PNG:

- learning: success per stage (base model, SFT, each GRPO round) on the val scenarios
  with 95% CIs, the production policy's success as a reference line, and the table
  behind it with paired differences (the newest evaluation run in `runs`);
- production before and after: feedback per policy from `policy_performance`, served
  adapters attributed to their version;
- mean reward per round, the reward distribution of each group, the published adapter's
  evaluation and lineage.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import store
from flows import report_plots
from flows.report_sampling import SamplerGapRow, sampler_gap_rows, sampler_gap_table


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


@dataclass
class Evaluation:
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
    production: list[ProductionRow] = field(default_factory=list)
    rounds: list[RoundRewards] = field(default_factory=list)
    group_rewards: dict[str, list[list[float]]] = field(default_factory=dict)  # policy -> groups -> values
    sampler_gap: list[SamplerGapRow] = field(default_factory=list)  # per GRPO round
    evaluation: Evaluation | None = None
    adapter: dict[str, Any] | None = None  # the adapters-table row, lineage JSON parsed
    tables: list[tuple[str, int]] = field(default_factory=list)
    sql_recipes: list[tuple[str, str]] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)


def report_data(
    lake: store.Lake | str | os.PathLike[str],
    reward_name: str,
    *,
    title: str = "trajlake pipeline report",
    evaluation: Evaluation | None = None,
    adapter_name: str | None = None,
    sql_recipes: list[tuple[str, str]] | None = None,
    timings: list[tuple[str, float]] | None = None,
    production_reward: str = "user_feedback",
) -> ReportData:
    """Everything the report shows, read from the lake's views."""
    con = store.connect(lake)
    learning, success_reward = learning_rows(con)
    production = production_rows(con, production_reward)
    served = {p.policy: p.adapter for p in production}
    for row in learning:
        row.adapter = served.get(row.policy) if row.kind == "production" else None
    per_round = con.execute(
        """
        WITH scored AS (
            SELECT t.policy, t.group_id, t.started_at, r.value
            FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
            WHERE t.source = 'replay' AND r.name = ?
        ),
        per_group AS (
            SELECT policy, group_id, min(value) = max(value) AS equal FROM scored GROUP BY ALL
        )
        SELECT s.policy, min(s.started_at) AS first_seen, count(*) AS n, count(DISTINCT s.group_id) AS groups,
               avg(s.value) AS mean, coalesce(stddev_pop(s.value), 0) AS std,
               (SELECT count(*) FROM per_group g WHERE g.policy = s.policy AND g.equal) AS equal_groups
        FROM scored s GROUP BY s.policy ORDER BY first_seen
        """,
        [reward_name],
    ).fetchall()
    rounds = [
        RoundRewards(i + 1, policy or "(base)", n, groups, float(mean), float(std), int(equal))
        for i, (policy, _, n, groups, mean, std, equal) in enumerate(per_round)
    ]
    group_rows = con.execute(
        """
        SELECT t.policy, t.group_id, list(r.value ORDER BY r.value) AS values
        FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
        WHERE t.source = 'replay' AND r.name = ? AND t.group_id IS NOT NULL
        GROUP BY ALL ORDER BY t.group_id
        """,
        [reward_name],
    ).fetchall()
    group_rewards: dict[str, list[list[float]]] = {}
    for policy, _, values in group_rows:
        group_rewards.setdefault(policy or "(base)", []).append([float(v) for v in values])
    adapter = None
    if adapter_name:
        row = con.execute(
            "SELECT * FROM adapters WHERE name = ? ORDER BY version DESC LIMIT 1", [adapter_name]
        ).fetchone()
        if row is not None:
            columns = [d[0] for d in con.description]
            adapter = dict(zip(columns, row, strict=True))
            for key in ("data", "metrics"):
                if isinstance(adapter.get(key), str):
                    adapter[key] = json.loads(adapter[key])
    tables = [(s.table, s.rows) for s in _table_counts(con)]
    return ReportData(
        title=title,
        reward_name=reward_name,
        success_reward=success_reward or reward_name,
        production_reward=production_reward,
        learning=learning,
        production=production,
        rounds=rounds,
        group_rewards=group_rewards,
        sampler_gap=sampler_gap_rows(con),
        evaluation=evaluation,
        adapter=adapter,
        tables=tables,
        sql_recipes=sql_recipes or [],
        timings=timings or [],
    )


def learning_rows(con: Any) -> tuple[list[StageRow], str]:
    """The table of the newest evaluation run (`runs`, stage `eval`, role `table`) and its reward."""
    run = con.execute(
        """SELECT run_id FROM runs WHERE stage = 'eval' ORDER BY "at" DESC, run_id DESC LIMIT 1"""
    ).fetchone()
    if run is None:
        return [], ""
    metrics = [
        json.loads(m)
        for (m,) in con.execute(
            "SELECT metrics FROM runs WHERE run_id = ? ORDER BY step", [run[0]]
        ).fetchall()
    ]
    rows = []
    for m in (m for m in metrics if m.get("role") == "table"):
        against = [
            k[len("diff_") :] for k in m if k.startswith("diff_") and not k.endswith(("_ci_low", "_ci_high"))
        ]
        rows.append(
            StageRow(
                stage=m["stage"],
                policy=m["policy"],
                kind=m["kind"],
                mean=float(m["mean_reward"]),
                ci=(float(m["ci_low"]), float(m["ci_high"])),
                n=int(m["n"]),
                differences={
                    a: (float(m[f"diff_{a}"]), float(m[f"diff_{a}_ci_low"]), float(m[f"diff_{a}_ci_high"]))
                    for a in against
                },
            )
        )
    return rows, str(metrics[0].get("reward", "")) if metrics else ""


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
    return [
        _Count(name, con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in store.TABLES
    ]


# --- rendering ---------------------------------------------------------------------------


def _img(b64: str | None, alt: str) -> str:
    return (
        f'<img alt="{alt}" src="data:image/png;base64,{b64}">'
        if b64
        else f"<p><em>No data for {alt}.</em></p>"
    )


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, indent=1, default=str)
    return "" if value is None else str(value)


def _interval(mean: float, low: float, high: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{mean:{sign}.3f} [{low:{sign}.3f}, {high:{sign}.3f}]"


def learning_section(data: ReportData) -> list[str]:
    """The learning curve: plot, then the table behind it (95% CIs, paired differences)."""
    against = list(dict.fromkeys(a for r in data.learning for a in r.differences))
    rows = [
        [r.stage, r.policy, r.kind, _interval(r.mean, *r.ci), r.n]
        + [_interval(*r.differences[a], signed=True) if a in r.differences else "" for a in against]
        for r in data.learning
    ]
    return [
        "<h2>Learning: success per stage</h2>",
        f"<p>Success (<code>{html.escape(data.success_reward)}</code>) of each stage on the same val "
        "scenarios, 95% bootstrap CIs over scenarios; differences are paired by scenario. Production "
        f"rows: each production policy's <code>{html.escape(data.production_reward)}</code> over its own "
        "traffic (CI over trajectories), a reference rather than a paired comparison.</p>",
        _img(report_plots.plot_learning(data), "learning curve"),
        _table(
            ["stage", "policy", "kind", "success [95% CI]", "n", *(f"vs {a}" for a in against)],
            rows,
        ),
    ]


def production_section(data: ReportData) -> list[str]:
    """Production before and after: feedback per policy, adapters attributed to their version."""
    return [
        "<h2>Production before and after</h2>",
        _img(report_plots.plot_production(data), "production per policy"),
        _table(
            ["policy", "adapter", "version", "trajectories", f"mean {data.production_reward}"],
            [[p.policy, p.adapter, p.adapter_version, p.trajectories, p.mean] for p in data.production],
        ),
    ]


def render_report(data: ReportData) -> str:
    """The whole page as one HTML string (plots inlined; no external assets)."""
    parts = [f"<h1>{html.escape(data.title)}</h1>"]
    ev = data.evaluation
    if ev is not None:
        verdict = "promoted" if ev.promoted else "not promoted"
        parts.append(
            f"<p class='headline'>Published adapter <code>{html.escape(ev.candidate)}</code>: val mean "
            f"<b>{ev.candidate_reward:.3f}</b> vs <code>{html.escape(ev.baseline)}</code> "
            f"<b>{ev.baseline_reward:.3f}</b> on {ev.scenarios} val scenarios ({verdict}), as measured.</p>"
        )
        parts.append(_img(report_plots.plot_evaluation(data), "evaluation"))
    if data.learning:
        parts += learning_section(data)
    if data.production:
        parts += production_section(data)
    parts.append("<h2>Reward per round</h2>")
    parts.append(_img(report_plots.plot_rounds(data), "reward per round"))
    parts.append(
        _table(
            ["round", "policy", "trajectories", "groups", "mean", "std", "groups with equal rewards"],
            [
                [r.round, r.policy, r.trajectories, r.groups, r.mean, r.std, r.equal_groups]
                for r in data.rounds
            ],
        )
    )
    if data.sampler_gap:
        parts.append("<h2>Sampler/trainer logprob gap per round</h2>")
        parts.append(
            "<p>|trainer − sampler| logprob of the stored completion tokens, from GRPO's loss pass. "
            "The first step of a round is the mismatch alone (the sampler's kernels, dtype and batch "
            "shapes against the trainer's); later steps add what the optimiser changed.</p>"
        )
        parts.append(_table(*sampler_gap_table(data.sampler_gap)))
    parts.append("<h2>Reward distribution per group</h2>")
    parts.append(_img(report_plots.plot_groups(data), "group rewards"))
    if data.adapter:
        parts.append("<h2>Adapter lineage</h2>")
        rows = [[k, v] for k, v in data.adapter.items() if k != "_written_at"]
        parts.append(_table(["field", "value"], rows))
    if data.timings:
        parts.append("<h2>Stage timings</h2>")
        parts.append(_table(["stage", "seconds"], [[s, t] for s, t in data.timings]))
    parts.append("<h2>Lake tables</h2>")
    parts.append(_table(["table", "rows"], [[t, n] for t, n in data.tables]))
    if data.sql_recipes:
        parts.append("<h2>Explore the lake</h2>")
        for what, sql in data.sql_recipes:
            parts.append(f"<p>{html.escape(what)}</p><pre>trajlake sql {html.escape(json.dumps(sql))}</pre>")
    style = (
        "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#1a202c}"
        "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #cbd5e0;padding:4px 8px;"
        "text-align:left;vertical-align:top}td{white-space:pre-wrap;max-width:640px;overflow-wrap:anywhere}"
        "pre{background:#f7fafc;padding:8px;overflow-x:auto}.headline{font-size:1.1em}img{max-width:100%}"
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(data.title)}</title><style>{style}</style></head><body>{''.join(parts)}</body></html>"


def write_report(path: str | os.PathLike[str], data: ReportData) -> Path:
    """Write the page atomically and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp")
    temp.write_text(render_report(data))
    temp.replace(target)
    return target
