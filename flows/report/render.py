"""The report's HTML: one self-contained page (plots inlined as PNG, the group viewer's
script inline, no external assets), from `flows.report.data.ReportData`."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from flows.report import plots
from flows.report.changes import changes_section
from flows.report.data import ReportData
from flows.report.groups import VIEWER_CSS, render_groups
from flows.report.lineage import lineage_section
from flows.report.production import production_traffic_section
from flows.report.sampling import sampler_gap_table
from judging.evaluation_stats import independent_difference

# --- rendering ---------------------------------------------------------------------------


class Raw(str):
    """A table cell that is already HTML (a link), not text to escape."""


def viewer_link(policy: str | None) -> Raw:
    """A link to the group viewer filtered to `policy`'s groups (the name URL-encoded: it has a `+`)."""
    return Raw(f"<a href='#groups/policy={html.escape(quote(policy or '(base)', safe=''))}'>groups</a>")


def _img(b64: str | None, alt: str) -> str:
    return (
        f'<img alt="{alt}" src="data:image/png;base64,{b64}">'
        if b64
        else f"<p><em>No data for {alt}.</em></p>"
    )


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c if isinstance(c, Raw) else html.escape(_fmt(c))}</td>" for c in row)
        + "</tr>"
        for row in rows
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
        [
            r.stage,
            r.policy,
            r.kind,
            _interval(r.mean, *r.ci),
            _interval(*r.greedy[:3]) if r.greedy else "",
            r.n,
        ]
        + [_interval(*r.differences[a], signed=True) if a in r.differences else "" for a in against]
        for r in data.learning
    ]
    return [
        "<h2>Learning: success per stage</h2>",
        f"<p>Success (<code>{html.escape(data.success_reward)}</code>) of each stage on the same val "
        "scenarios, sampled at the replay temperature and greedy (T=0, one sample per scenario, as most "
        "production serves), 95% bootstrap CIs over scenarios; differences (sampled) are paired by scenario. Production "
        f"rows: each production policy's <code>{html.escape(data.production_reward)}</code> over its own "
        "traffic (CI over trajectories), a reference rather than a paired comparison.</p>",
        _img(plots.plot_learning(data), "learning curve"),
        _table(
            [
                "stage",
                "policy",
                "kind",
                "sampled success [95% CI]",
                "greedy success [95% CI]",
                "n",
                *(f"vs {a}" for a in against),
            ],
            rows,
        ),
    ]


def pipeline_runs_section(data: ReportData) -> list[str]:
    """The pipeline's runs, night after night, and the gate decisions `trajlake publish` took between
    them: where each run started, what it learned from and trained, and what the publish gate
    decided, with its numbers; a failed run says where and why."""
    newest = data.pipeline_runs[-1].run_id if data.pipeline_runs else None
    rows: list[tuple[str, list[Any]]] = [
        (
            run.started_at,
            [
                run.started_at[:19].replace("T", " "),
                "pipeline",
                run.start_adapter or "base model",
                "yes" if run.sft else "no",
                f"new since {run.since[:19].replace('T', ' ')}" if run.since else "everything selected",
                learned_from(run.learned_from),
                run.training_steps,
                run.published or "",
                run_outcome(run, still_running=run.run_id == newest),
            ],
        )
        for run in data.pipeline_runs
    ]
    rows += [
        (
            gate.at,
            [
                gate.at[:19].replace("T", " "),
                gate.command,
                gate.candidate,
                "",
                "",
                "",
                "",
                gate.published or "",
                gate.decision,
            ],
        )
        for gate in data.gate_decisions
    ]
    return [
        "<h2>Pipeline runs</h2>",
        "<p>Each run of the pipeline: the adapter it continued, the data it learned from (its train "
        "scenarios: conversations users rated right, and failures, those rated wrong, with the right "
        "answer from a label or without one, for a reward that needs none to judge), the optimiser "
        "steps it trained and the publish gate's decision (paired difference on the val scenarios, "
        "95% CI); a run that failed, the step and the error. Gate decisions of <code>trajlake "
        "publish</code> are listed among them. The learning curve below is the newest run's.</p>",
        _table(
            [
                "started (UTC)",
                "by",
                "starts from",
                "SFT",
                "window",
                "scenarios",
                "steps",
                "published",
                "decision",
            ],
            [row for _, row in sorted(rows, key=lambda r: r[0])],
        ),
    ]


def run_outcome(run: Any, *, still_running: bool) -> str:
    """What a pipeline run's row says it came to.

    >>> from store.pipeline_runs import PipelineRun
    >>> run_outcome(PipelineRun("p", "t", status="failed", error="sft: OSError: disk full"), still_running=False)
    'failed at sft: OSError: disk full'
    >>> run_outcome(PipelineRun("p", "t"), still_running=False)
    'did not finish: its process ended without a record of why (see its flow run in Prefect)'
    """
    if run.status == "failed":
        return f"failed at {run.error}" if run.error else "failed"
    if run.status == "running":
        if still_running:
            return "running"
        return "did not finish: its process ended without a record of why (see its flow run in Prefect)"
    return run.decision or ""


def learned_from(counts: dict[str, int]) -> str:
    """A night's train scenarios in words.

    >>> learned_from({"scenarios": 9, "rated_right": 6, "failures": 3, "failures_labelled": 2, "failures_unlabelled": 1})
    '9: 6 rated right, 3 failures (2 with a label, 1 judged without one)'
    >>> learned_from({"scenarios": 9, "rated_right": 9, "replay_failed": 2})
    '9: 9 rated right, 0 failures; 2 could not be replayed (sampler errors)'
    """
    if not counts:
        return ""
    text = f"{counts.get('scenarios', 0)}: {counts.get('rated_right', 0)} rated right, {counts.get('failures', 0)} failures"
    if counts.get("failures"):
        text += (
            f" ({counts.get('failures_labelled', 0)} with a label, "
            f"{counts.get('failures_unlabelled', 0)} judged without one)"
        )
    if counts.get("unrated"):
        text += f", {counts['unrated']} unrated"
    if counts.get("replay_failed"):
        text += f"; {counts['replay_failed']} could not be replayed (sampler errors)"
    return text


def production_comparison(data: ReportData) -> str:
    """The production LLM against the adapter that served after it: the difference of their
    success on their own traffic, with its 95% CI (independent batches, bootstrapped)."""
    rows = [p for p in data.production_values if p[1]]
    base = next((p for p in rows if p[0] not in {q.policy for q in data.production if q.adapter}), None)
    served = [p for p in rows if p[0] in {q.policy for q in data.production if q.adapter}]
    if base is None or not served:
        return ""
    after = served[-1]
    mean, (low, high) = independent_difference(after[1], base[1])
    return (
        f"<p class='headline'>Production: <code>{html.escape(after[0])}</code> "
        f"<b>{sum(after[1]) / len(after[1]):.3f}</b> on {len(after[1])} runs vs <code>{html.escape(base[0])}</code> "
        f"<b>{sum(base[1]) / len(base[1]):.3f}</b> on {len(base[1])} runs: difference "
        f"<b>{_interval(mean, low, high, signed=True)}</b> (95% CI, independent batches).</p>"
    )


def production_section(data: ReportData) -> list[str]:
    """Production before and after: feedback per policy, adapters attributed to their version."""
    return [
        "<h2>Production before and after</h2>",
        production_comparison(data),
        _img(plots.plot_production(data), "production per policy"),
        _table(
            ["policy", "adapter", "version", "trajectories", f"mean {data.production_reward}"],
            [[p.policy, p.adapter, p.adapter_version, p.trajectories, p.mean] for p in data.production],
        ),
        _img(days, "production per day") if (days := plots.plot_production_days(data)) else "",
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
        parts.append(_img(plots.plot_evaluation(data), "evaluation"))
    if data.pipeline_runs or data.gate_decisions:
        parts += pipeline_runs_section(data)
    if data.learning:
        parts += learning_section(data)
        parts += changes_section(data.changes)
    if data.production:
        parts += production_section(data)
    if data.traffic:
        parts += production_traffic_section(
            data.traffic, data.traffic_left_out, data.conversations, data.production_reward
        )
    parts.append("<h2>Reward per round</h2>")
    parts.append(_img(plots.plot_rounds(data), "reward per round"))
    parts.append(
        _table(
            ["round", "policy", "trajectories", "groups", "mean", "std", "all-equal groups", "share", ""],
            [
                [
                    r.round,
                    r.policy,
                    r.trajectories,
                    r.groups,
                    r.mean,
                    r.std,
                    r.equal_groups,
                    f"{r.equal_share:.0%}",
                    viewer_link(r.policy),
                ]
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
        parts.append(_img(plots.plot_gap_steps(data), "sampler gap per step"))
    parts.append("<h2>Reward distribution per group</h2>")
    parts.append(_img(plots.plot_groups(data), "group rewards"))
    if data.adapter:
        parts += lineage_section(data.adapter)
    if data.groups is not None:
        parts.append(render_groups(data.groups))
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
        "body.wide{max-width:none;margin:2em}" + VIEWER_CSS
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(data.title)}</title><style>{style}</style></head><body class='wide'>{''.join(parts)}</body></html>"


def write_report(path: str | os.PathLike[str], data: ReportData) -> Path:
    """Write the page atomically and return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.tmp")
    temp.write_text(render_report(data))
    temp.replace(target)
    return target
