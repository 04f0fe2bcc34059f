"""`trajlake report`: one self-contained HTML page for a lake (learning, rounds, groups, lineage)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from store.errors import StoreError


def report(
    lake: LakeOption = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path(
        "trajlake-report.html"
    ),
    reward: Annotated[
        str | None,
        typer.Option(help="Reward to show (default: the newest evaluation's, else the most common)."),
    ] = None,
    eval_run: Annotated[
        str | None,
        typer.Option(
            "--eval-run", help="Evaluation run (`runs.run_id`) of the learning table; default newest."
        ),
    ] = None,
    adapter: Annotated[
        str | None,
        typer.Option(
            help="Adapter whose lineage to show: NAME or NAME:vN (default: the newest published name, at "
            "its version holding `production`, else its newest version)."
        ),
    ] = None,
    since: Annotated[str | None, typer.Option(help="Only groups and feedback from this ISO time on.")] = None,
    until: Annotated[str | None, typer.Option(help="Only groups and feedback before this ISO time.")] = None,
    max_groups: Annotated[int, typer.Option("--max-groups", help="Most groups in the group viewer.")] = 60,
    tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer folder to show sampled tokens as text (default: token ids).")
    ] = None,
) -> None:
    """Write the lake's report: learning per stage, reward per round, sampler gap, production
    feedback over time, lineage, and a group viewer; open it in any browser."""
    from flows.report import build_report

    if max_groups < 1:
        raise fail(f"--max-groups must be >= 1; got {max_groups}", 2)
    for flag, value in (("--since", since), ("--until", until)):
        if value is not None and not is_iso_time(value):
            raise fail(
                f"{flag} must be an ISO 8601 date or time (2026-05-01, 2026-05-01T12:00Z); got {value!r}", 2
            )
    the_lake = resolve_lake(lake, must_exist=True)
    try:
        path, data = build_report(
            str(the_lake.root),
            str(out),
            reward=reward,
            adapter=adapter,
            tokenizer=tokenizer,
            eval_run=eval_run,
            since=since,
            until=until,
            max_groups=max_groups,
        )
    except (StoreError, OSError, ValueError) as exc:
        raise fail(f"cannot write the report: {exc}") from None
    shown = data.groups.groups if data.groups else []
    Console(stderr=True).print(
        f"report: {path} ({len(data.rounds)} rounds, {len(data.learning)} evaluated policies, "
        f"{len(shown)} of {data.groups.total if data.groups else 0} groups)"
    )


def is_iso_time(value: str) -> bool:
    """Whether `value` reads as an ISO 8601 date or time (as the report's SQL compares it)."""
    from datetime import datetime

    try:
        datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("report")(report)
