"""The report: one self-contained HTML page per lake, for the demo, `trajlake report` and
each pipeline run.

- `data`: what the page shows, read from the lake's views with bounded queries;
- `groups`: the group viewer (a group's trajectories side by side, filters in the page);
- `changes`: the val scenarios a candidate answers differently from where its run started;
- `plots`, `sampling`: the matplotlib figures and the sampler/trainer gap section;
- `render`: the HTML.
"""

from flows.report.data import PublishedComparison, ReportData, default_reward, newest_adapter, report_data
from flows.report.render import render_report, write_report
from store.catalog.connection import connect

__all__ = [
    "PublishedComparison",
    "ReportData",
    "build_report",
    "render_report",
    "report_data",
    "write_report",
]


def build_report(
    lake: str,
    out: str,
    *,
    reward: str | None = None,
    adapter: str | None = None,
    tokenizer: str | None = None,
    title: str = "trajlake report",
    **options: object,
) -> tuple[object, ReportData]:
    """The report of a lake written to `out`: the newest evaluation, adapter and groups unless
    chosen (`adapter` = `name` or `name:vN`: a name alone shows its version in production, else its
    newest; `options` go to `report_data`). Returns the path and what it shows."""
    con = connect(lake, read_only=True)
    reward = reward or default_reward(con)
    if reward is None:
        raise ValueError(f"the lake `{lake}` has no scored replayed trajectories to report on")
    name, _, version = (adapter or newest_adapter(con) or "").partition(":v")
    decoder = None
    if tokenizer:
        from transformers import AutoTokenizer

        decoder = AutoTokenizer.from_pretrained(tokenizer)
    data = report_data(
        lake,
        reward,
        title=title,
        adapter_name=name or None,
        adapter_version=int(version) if version else None,
        tokenizer=decoder,
        **options,  # type: ignore[arg-type]
    )
    return write_report(out, data), data
