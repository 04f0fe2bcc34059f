"""The pipeline report: one self-contained HTML page with plots, built from the lake.

`report_data` gathers what the page shows with SQL over the lake's views (so every
number on the page can be re-derived by a user with `trajlake sql`); `render_report`
turns it into HTML, with matplotlib plots embedded as PNG: mean reward per round, the
reward distribution of each group, the evaluation of the published adapter against the
base model, and the adapter's lineage.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import store


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
class ReportData:
    title: str
    reward_name: str
    rounds: list[RoundRewards] = field(default_factory=list)
    group_rewards: dict[str, list[list[float]]] = field(default_factory=dict)  # policy -> groups -> values
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
) -> ReportData:
    """Everything the report shows, read from the lake's views."""
    con = store.connect(lake)
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
        rounds=rounds,
        group_rewards=group_rewards,
        evaluation=evaluation,
        adapter=adapter,
        tables=tables,
        sql_recipes=sql_recipes or [],
        timings=timings or [],
    )


@dataclass
class _Count:
    table: str
    rows: int


def _table_counts(con: Any) -> list[_Count]:
    return [
        _Count(name, con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]) for name in store.TABLES
    ]


# --- rendering ---------------------------------------------------------------------------


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def plot_rounds(data: ReportData) -> str | None:
    if not data.rounds:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = [r.round for r in data.rounds]
    means = [r.mean for r in data.rounds]
    stds = [r.std for r in data.rounds]
    ax.errorbar(xs, means, yerr=stds, marker="o", capsize=4, color="#2b6cb0")
    ax.set_xticks(xs, [f"{r.round}\n{_short(r.policy)}" for r in data.rounds], fontsize=8)
    ax.set_ylabel(f"mean `{data.reward_name}`")
    ax.set_title("Reward per round (replayed groups, ±1 std)")
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_groups(data: ReportData) -> str | None:
    if not data.group_rewards:
        return None
    policies = list(data.group_rewards)
    fig, axes = plt.subplots(
        1, len(policies), figsize=(max(6, 3.2 * len(policies)), 3.2), squeeze=False, sharey=True
    )
    for ax, policy in zip(axes[0], policies, strict=True):
        groups = data.group_rewards[policy]
        ax.boxplot(groups, showfliers=False)
        for i, values in enumerate(groups, start=1):
            ax.scatter([i] * len(values), values, s=10, alpha=0.6, color="#c05621")
        ax.set_title(_short(policy), fontsize=9)
        ax.set_xlabel("group")
        ax.set_xticks([])
    axes[0][0].set_ylabel(data.reward_name)
    fig.suptitle("Reward distribution per group", fontsize=10)
    return _png(fig)


def plot_evaluation(data: ReportData) -> str | None:
    ev = data.evaluation
    if ev is None:
        return None
    fig, ax = plt.subplots(figsize=(4.5, 3))
    bars = ax.bar(
        [_short(ev.baseline), _short(ev.candidate)],
        [ev.baseline_reward, ev.candidate_reward],
        color=["#a0aec0", "#38a169"],
    )
    ax.bar_label(bars, fmt="%.3f")
    ax.set_ylabel(f"val mean `{data.reward_name}`")
    ax.set_title(f"Val reward on {ev.scenarios} scenarios")
    return _png(fig)


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1) :]


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
        parts.append(_img(plot_evaluation(data), "evaluation"))
    parts.append("<h2>Reward per round</h2>")
    parts.append(_img(plot_rounds(data), "reward per round"))
    parts.append(
        _table(
            ["round", "policy", "trajectories", "groups", "mean", "std", "groups with equal rewards"],
            [
                [r.round, r.policy, r.trajectories, r.groups, r.mean, r.std, r.equal_groups]
                for r in data.rounds
            ],
        )
    )
    parts.append("<h2>Reward distribution per group</h2>")
    parts.append(_img(plot_groups(data), "group rewards"))
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
