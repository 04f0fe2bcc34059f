"""The report's lineage section: what a published adapter was trained on, readable.

The `adapters` row keeps the whole lineage (every stage's selection SQL, table versions,
trajectory count and digest); the report shows a table per stage with the SQL in brief
(long `IN (...)` lists of ids collapsed to their count) and folds the raw record away.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from training.models.policies import model_name

_ID_LIST = re.compile(r"IN \(((?:'[^']*'\s*,\s*){5,}'[^']*')\)")


def brief_sql(sql: str, width: int = 240) -> str:
    """`sql` with id lists collapsed (`IN (... 128 ids)`) and cut to `width` characters."""
    short = _ID_LIST.sub(lambda m: f"IN (… {m.group(1).count(',') + 1} ids)", sql)
    return short if len(short) <= width else short[: width - 1] + "…"


def _versions(table_versions: Any) -> str:
    if isinstance(table_versions, str):
        try:
            table_versions = json.loads(table_versions)
        except ValueError:
            return table_versions
    if not isinstance(table_versions, dict):
        return ""
    return ", ".join(
        f"{name} v{v.get('version') if isinstance(v, dict) else v}"
        for name, v in sorted(table_versions.items())
    )


def _origin(adapter: dict[str, Any]) -> str:
    """`, by pipeline run X from Y` when a pipeline run published the version."""
    metrics = adapter.get("metrics")
    origin = (metrics.get("origin") if isinstance(metrics, dict) else None) or {}
    if not origin.get("pipeline_run"):
        return ""
    return (
        f", by pipeline run <code>{html.escape(str(origin['pipeline_run']))}</code> starting from "
        f"<code>{html.escape(str(origin.get('started_from')))}</code>"
    )


def lineage_section(adapter: dict[str, Any]) -> list[str]:
    """Heading, a summary line, one row per training stage, and the raw record folded."""
    data = adapter.get("data")
    stages = data if isinstance(data, list) else []
    rows = "".join(
        "<tr>"
        f"<td>{i + 1}</td><td>{html.escape(str(s.get('stage', '')))}</td>"
        f"<td>{html.escape(str(s.get('reward_name') or '-'))}</td>"
        f"<td>{html.escape(', '.join(map(str, s.get('reward_scorers') or [])) or '-')}</td>"
        f"<td>{html.escape(str(s.get('trajectory_count', '')))}</td>"
        f"<td>{html.escape(_versions(s.get('table_versions')))}</td>"
        f"<td><code>{html.escape(brief_sql(str(s.get('sql', ''))))}</code></td></tr>"
        for i, s in enumerate(stages)
    )
    base = model_name(str(adapter.get("base_model")))  # named as policies name it; the path on hover
    head = (
        f"<p>Adapter <code>{html.escape(str(adapter.get('name')))}</code> v{adapter.get('version')} on "
        f"<code title='{html.escape(str(adapter.get('base_model')))}'>{html.escape(base)}</code>, aliases "
        f"{html.escape(', '.join(adapter.get('aliases') or []) or '-')}, published "
        f"{html.escape(str(adapter.get('published_at', ''))[:19])}; trained in {len(stages)} stages"
        f"{_origin(adapter)}.</p>"
    )
    raw = json.dumps({k: v for k, v in adapter.items() if k != "_written_at"}, indent=1, default=str)
    return [
        "<h2 id='lineage'>Adapter lineage</h2>",
        head,
        *erased_data_warning(adapter),
        "<table><thead><tr><th>#</th><th>stage</th><th>reward</th><th>scorers</th><th>trajectories</th>"
        f"<th>table versions read</th><th>selection</th></tr></thead><tbody>{rows}</tbody></table>",
        f"<details><summary>The raw lineage record</summary><pre>{html.escape(raw)}</pre></details>",
    ]


def erased_data_warning(adapter: dict[str, Any]) -> list[str]:
    """A warning paragraph when the adapter was trained on rows erased since (`trajlake forget`,
    retention): its weights may still encode them."""
    if not adapter.get("trained_on_erased_data"):
        return []
    erasures = ", ".join(f"<code>{html.escape(str(e))}</code>" for e in adapter.get("erasures") or [])
    return [
        "<p class='warning' id='trained-on-erased-data'><strong>Trained on erased data</strong>: rows this "
        f"adapter was trained on were erased since (erasures {erasures or '-'}); its weights may still "
        f"encode them. Retrain without them: <code>trajlake retrain {html.escape(str(adapter.get('name')))}:"
        f"{adapter.get('version')}</code>.</p>"
    ]
