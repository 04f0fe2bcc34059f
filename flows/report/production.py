"""The report's production traffic: every production trajectory, rated or not.

`policy_performance` (the before/after section) counts only trajectories with feedback;
conversations imported with `trajlake ingest jsonl` or traced without feedback would
appear nowhere. This section counts all of them per source, policy and day, says how many
carry feedback and its mean where they do, and shows a sample of the newest conversations.
Both queries are bounded.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.vocabulary import PRODUCTION_SOURCES, one_of

PRODUCTION = one_of("t.source", PRODUCTION_SOURCES, table="trajectories")
MAX_ROWS = 200  # (source, policy, day) rows shown; the rest are counted in a note
SAMPLE = 8  # newest conversations shown


@dataclass
class TrafficRow:
    """Production trajectories of one source, policy and day."""

    source: str
    policy: str
    day: str
    trajectories: int
    rated: int  # how many carry the feedback reward
    mean: float | None  # its mean over those; None when none is rated


@dataclass
class Conversation:
    """One production conversation, in brief."""

    trajectory_id: str
    source: str
    policy: str
    started_at: datetime
    question: str
    answer: str
    feedback: float | None


# per trajectory, the mean of the feedback reward over its scorers (the name bound as `$reward`)
RATED = "(SELECT trajectory_id, avg(value) AS value FROM latest_rewards WHERE name = $reward GROUP BY ALL)"


def production_traffic(con: Any, reward: str) -> tuple[list[TrafficRow], int]:
    """Rows per (source, policy, day), newest day first, and how many rows were left out."""
    found = con.execute(
        f"""
        SELECT t.source, coalesce(t.policy, t.model, '(unknown)') AS policy,
               strftime(date_trunc('day', t.started_at), '%Y-%m-%d') AS day,
               count(*) AS trajectories, count(r.value) AS rated, avg(r.value) AS mean,
               count(*) OVER () AS total_rows
        FROM trajectories t LEFT JOIN {RATED} r USING (trajectory_id)
        WHERE {PRODUCTION}
        GROUP BY ALL ORDER BY day DESC, t.source, policy LIMIT {MAX_ROWS}
        """,
        {"reward": reward},
    ).fetchall()
    rows = [
        TrafficRow(source, policy, day, int(n), int(rated), None if mean is None else float(mean))
        for source, policy, day, n, rated, mean, _ in found
    ]
    return rows, (int(found[0][-1]) - len(rows)) if found else 0


def newest_conversations(con: Any, reward: str, limit: int = SAMPLE) -> list[Conversation]:
    """The newest production conversations: first user message, final output, feedback if any."""
    found = con.execute(
        f"""
        SELECT t.trajectory_id, t.source, coalesce(t.policy, t.model, '(unknown)'), t.started_at,
               coalesce(list_filter(t.messages, lambda m: m.role = 'user')[1].content, ''),
               coalesce(t.final_output, ''), r.value
        FROM trajectories t LEFT JOIN {RATED} r USING (trajectory_id)
        WHERE {PRODUCTION}
        ORDER BY t.started_at DESC, t.trajectory_id LIMIT {int(limit)}
        """,
        {"reward": reward},
    ).fetchall()
    return [
        Conversation(tid, source, policy, started, question, answer, None if value is None else float(value))
        for tid, source, policy, started, question, answer, value in found
    ]


def _cut(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def production_traffic_section(
    rows: list[TrafficRow], left_out: int, conversations: list[Conversation], reward: str
) -> list[str]:
    """Heading, the per source/policy/day table, and the newest conversations."""

    def cells(values: list[Any]) -> str:
        return "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values) + "</tr>"

    table = "".join(
        cells(
            [
                r.day,
                r.source,
                r.policy,
                r.trajectories,
                f"{r.rated} ({r.rated / r.trajectories:.0%})",
                "" if r.mean is None else f"{r.mean:.3f}",
            ]
        )
        for r in rows
    )
    sample = "".join(
        cells(
            [
                c.started_at.strftime("%Y-%m-%d %H:%M"),
                c.source,
                c.policy,
                _cut(c.question),
                _cut(c.answer),
                "" if c.feedback is None else f"{c.feedback:g}",
            ]
        )
        for c in conversations
    )
    note = f"<p><em>{left_out} older rows left out.</em></p>" if left_out else ""
    return [
        "<h2 id='traffic'>Production traffic</h2>",
        f"<p>Every production trajectory (collected, pulled or imported), per source, policy and day; "
        f"<code>{html.escape(reward)}</code> where users gave it.</p>",
        "<table><thead><tr><th>day</th><th>source</th><th>policy</th><th>trajectories</th>"
        f"<th>with {html.escape(reward)}</th><th>mean</th></tr></thead><tbody>{table}</tbody></table>",
        note,
        "<h3>Newest conversations</h3>",
        "<table><thead><tr><th>started (UTC)</th><th>source</th><th>policy</th><th>question</th>"
        f"<th>answer</th><th>{html.escape(reward)}</th></tr></thead><tbody>{sample}</tbody></table>",
    ]
