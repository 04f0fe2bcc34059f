"""`trajlake score`, `trajlake combine`, `trajlake agreement`: the judging stage on the command line.

Thin wrappers: options become `ScoreConfig`/`JudgeConfig`, the API key is read from the
environment variable the user names, one library call does the work, and a summary
table says what happened.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption, resolve_lake
from flows.commands.options import build, configured, setting
from judging import agreement as agreements
from judging import combine as combining
from judging import stage as scoring
from judging.config import JudgeConfig, ScoreConfig
from judging.errors import JudgingError
from judging.sql_reward import SqlReward

FormatOption = Annotated[str, typer.Option("--format", "-f", help="table or json")]
# A scoring run's options (`--where`, `--force`, ...): command-line only, no table in trajlake.toml.


def _fmt(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _print_summaries(summaries: list, fmt: str, lake: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([s.as_dict() for s in summaries], default=str) + "\n")
        return
    table = Table(title="trajlake score", show_lines=False)
    for column in (
        "reward",
        "groups scored",
        "groups failed",
        "skipped",
        "values",
        "mean",
        "std",
        "all-equal groups",
        "judge calls",
        "cache hits",
        "tokens",
        "cost $",
    ):
        table.add_column(column, overflow="fold")
    for s in summaries:
        stats = list(s.values.values()) or [None]
        for i, v in enumerate(stats):
            share = None if v is None else v.all_equal_share
            table.add_row(
                v.name if v is not None else s.reward,
                str(s.groups_scored) if i == 0 else "",
                str(s.groups_failed) if i == 0 else "",
                str(s.groups_skipped + s.trajectories_skipped * (s.kind != "ruler")) if i == 0 else "",
                str(v.count if v is not None else 0),
                _fmt(v.mean if v is not None else None),
                _fmt(v.std if v is not None else None),
                "" if share is None else f"{share:.0%} ({v.all_equal_groups}/{v.groups})",
                str(s.judge_calls) if s.kind == "ruler" and i == 0 else "",
                str(s.cache_hits) if s.kind == "ruler" and i == 0 else "",
                str(s.prompt_tokens + s.completion_tokens) if s.kind == "ruler" and i == 0 else "",
                _fmt(s.cost_usd, 4) if i == 0 else "",
            )
    console = Console(width=max(140, Console().width))
    console.print(table)
    for s in summaries:
        console.print(f"{s.reward}: scorer [bold]{s.scorer}[/bold]")
        if s.failures:
            reasons = ", ".join(f"{reason} x{n}" for reason, n in sorted(s.failures.items()))
            console.print(f"[red]{s.reward}: failed rows by reason: {reasons}[/red] (a rerun retries them)")
        for note in s.notes:
            console.print(f"{s.reward}: {note}")
    written = sum(s.rows_written for s in summaries)
    console.print(
        f"{written} reward rows written to {lake}/rewards (run {', '.join(s.run_id for s in summaries)})"
    )


def score(
    run: ScoreConfig,
    judge: JudgeConfig,
    reward: Annotated[
        list[str] | None,
        typer.Option(
            "--reward",
            "-r",
            help="`ruler`, a built-in (exact_match, normalized_match, valid_json, "
            "tool_success, turn_penalty, length_penalty) or `package.module:function`. Repeatable "
            "(default: `[score] rewards` of trajlake.toml, unless --sql-reward is given).",
        ),
    ] = None,
    sql_reward: Annotated[
        str | None,
        typer.Option("--sql-reward", help="DuckDB expression over `candidates` giving the reward."),
    ] = None,
    rubric: Annotated[
        Path | None, typer.Option("--rubric", help="Rubric file (default: RULER's rubric).")
    ] = None,
    lake: LakeOption = None,
    fmt: FormatOption = "table",
) -> None:
    """Score trajectories with RULER, programmatic or SQL rewards; idempotent and resumable."""
    configured_rewards = [] if sql_reward is not None else list(setting("score.rewards"))
    specs = list(reward or configured_rewards)
    if not specs and sql_reward is None:
        raise fail(
            "give at least one --reward (ruler, a built-in, or package.module:function) or --sql-reward", 2
        )
    if run.name and len(specs) + (sql_reward is not None) > 1:
        raise fail("--name applies to a single reward; run one `trajlake score` per named reward", 2)
    target = resolve_lake(lake, must_exist=True)
    config = run
    judge_config = None
    if "ruler" in specs:
        if not judge.model:  # no default: a hosted judge costs money, its model is named
            raise fail(
                "RULER needs --judge-model (or `judge.model` in trajlake.toml, TRAJLAKE_JUDGE__MODEL)", 2
            )
        text = rubric.read_text(encoding="utf-8") if rubric else None
        judge_config = build(judge, **({"rubric": text} if text else {}))
    rewards: list = [*specs]
    if sql_reward is not None:
        try:
            rewards.append(SqlReward(sql_reward, run.name or "sql"))
        except JudgingError as exc:
            raise fail(str(exc), 2) from None
    try:
        summaries = [scoring.score(target, spec, config, judge=judge_config) for spec in rewards]
    except (JudgingError, OSError) as exc:
        raise fail(str(exc)) from None
    _print_summaries(summaries, fmt, str(target))


def combine(
    weight: Annotated[
        list[str],
        typer.Option(
            "--weight", "-w", help="`name=weight`, repeatable: e.g. -w ruler=0.7 -w exact_match=0.3"
        ),
    ],
    name: Annotated[str, typer.Option("--name", help="Name of the combined reward.")] = "combined",
    where: Annotated[str | None, typer.Option("--where", help="SQL condition over trajectories.")] = None,
    normalize: Annotated[
        bool, typer.Option("--normalize/--no-normalize", help="Divide by the sum of |weights|.")
    ] = True,
    lake: LakeOption = None,
) -> None:
    """Combine named rewards with weights into the one reward training uses (default name `combined`)."""
    weights: dict[str, float] = {}
    for item in weight:
        key, sep, value = item.partition("=")
        try:
            weights[key.strip()] = float(value)
        except ValueError:
            raise fail(f"--weight `{item}`: expected name=number, e.g. ruler=0.7", 2) from None
        if not sep or not key.strip():
            raise fail(f"--weight `{item}`: expected name=number, e.g. ruler=0.7", 2)
    try:
        summary = combining.combine(
            resolve_lake(lake, must_exist=True), weights, name, where=where, normalize=normalize
        )
    except JudgingError as exc:
        raise fail(str(exc)) from None
    failed = ", ".join(f"{k} x{v}" for k, v in sorted(summary.failed.items())) or "none"
    typer.echo(
        f"{summary.name} ({summary.scorer}): {summary.combined} combined, {summary.unchanged} unchanged, "
        f"failed: {failed}, mean {_fmt(summary.mean)}"
    )


def agreement(
    a: Annotated[str, typer.Argument(help="Reward name, or name@scorer.")],
    b: Annotated[str, typer.Argument(help="Reward name, or name@scorer.")],
    where: Annotated[str | None, typer.Option("--where", help="SQL condition over trajectories.")] = None,
    groups: Annotated[bool, typer.Option("--groups", help="Also list every group.")] = False,
    lake: LakeOption = None,
    fmt: FormatOption = "table",
) -> None:
    """Rank agreement of two rewards within groups (Spearman's rho, pairwise agreement)."""
    try:
        report = agreements.agreement(resolve_lake(lake, must_exist=True), a, b, where=where)
    except JudgingError as exc:
        raise fail(str(exc)) from None
    if fmt == "json":
        sys.stdout.write(json.dumps(report, default=lambda o: o.__dict__) + "\n")
        return
    table = Table(title=f"agreement: {a} vs {b}")
    for column in (
        "groups",
        "rho defined",
        "mean rho",
        "median rho",
        "pairwise agreement",
        f"constant {a}",
        f"constant {b}",
    ):
        table.add_column(column)
    table.add_row(
        str(report.groups),
        str(report.defined),
        _fmt(report.mean_spearman),
        _fmt(report.median_spearman),
        _fmt(report.pairwise_agreement),
        str(report.constant_a),
        str(report.constant_b),
    )
    console = Console(width=max(120, Console().width))
    console.print(table)
    if groups:
        detail = Table("group", "size", "rho", "concordant", "discordant")
        for g in report.per_group:
            detail.add_row(g.group_id, str(g.size), _fmt(g.spearman), str(g.concordant), str(g.discordant))
        console.print(detail)
    if report.groups == 0:
        console.print(f"no group has two or more trajectories scored by both `{a}` and `{b}`")


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("score")(configured(score, run=ScoreConfig, judge="judge"))
app.command("combine")(combine)
app.command("agreement")(agreement)
