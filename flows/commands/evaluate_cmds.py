"""`trajlake evaluate`: compare policies on the evaluation scenarios, paired by scenario, publishing nothing.

The same measurement as the pipeline's evaluation and the publish gate (`flows.stages.evaluate`:
replay the scenarios with each policy, score them, pair by scenario with bootstrap intervals),
on the policies the user names, for a decision made by a person: is this adapter better
than production, than the base model, than last week's?
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Column, Table

from flows.commands import command_app
from flows.commands.exits import fail
from flows.commands.lake import LakeOption
from flows.commands.options import quiet_libraries
from flows.config.checks import load_config
from flows.config.errors import ConfigError
from flows.stages import StageError, base_model, compare_policies, default_policies

ConfigOption = Annotated[
    str | None,
    typer.Option("--config", "-c", help="trajlake.toml (default: $TRAJLAKE_CONFIG, then ./trajlake.toml)."),
]


def evaluate(
    policies: Annotated[
        list[str] | None,
        typer.Argument(
            help="Policies to compare, in order: `base` (the base model), a published adapter `name`, "
            "`name:alias` or `name:vN`, or an adapter folder. Each is paired with every one before it. "
            "Default: base, and `<publish.name>:production` when an adapter holds it.",
            show_default=False,
        ),
    ] = None,
    scenarios: Annotated[
        str | None,
        typer.Option(
            help="SQL returning the `scenario_id`s to evaluate on (default: `[select] evaluate`, the val "
            "scenarios).",
            show_default=False,
        ),
    ] = None,
    reward: Annotated[
        str | None,
        typer.Option(
            help="Reward measuring success (default: `[evaluate] reward`, else the scored training reward).",
            show_default=False,
        ),
    ] = None,
    group_size: Annotated[
        int | None,
        typer.Option(help="Samples per scenario (default: `[evaluate] group_size`).", show_default=False),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            help="Temperature of the sampled evaluation (default: `[evaluate] temperature`, else the "
            "replay's).",
            show_default=False,
        ),
    ] = None,
    greedy: Annotated[
        bool | None,
        typer.Option(
            "--greedy/--no-greedy",
            help="Also sample each policy once at temperature 0 (default: `[evaluate] greedy`).",
            show_default=False,
        ),
    ] = None,
    production: Annotated[
        bool,
        typer.Option(
            "--production/--no-production",
            help="Add each production policy's success on its own traffic (`[evaluate] production_reward`) "
            "as reference rows: not paired, production answered its own questions.",
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the evaluation as JSON.")] = False,
    config: ConfigOption = None,
    lake: LakeOption = None,
) -> None:
    """Compare policies on the evaluation scenarios with paired 95% CIs; publishes nothing.

    Runs the pipeline's evaluation on the policies named: each is replayed once on the scenarios
    (the base model from `[sampler] model`), scored with the evaluation reward, and paired by
    scenario with every policy before it. The table is recorded as an `eval` run in `runs`
    (`trajlake report --eval-run ID` shows it); no adapter is published and no alias moves.
    """
    from flows.stages import (
        ReplaySections,
        lake_of,
    )

    try:
        settings = load_config(config).with_lake(lake)
        if scenarios:
            settings = settings.with_values("select", evaluate=scenarios)
        overrides = {
            key: value
            for key, value in (
                ("reward", reward),
                ("group_size", group_size),
                ("temperature", temperature),
                ("greedy", greedy),
            )
            if value is not None
        }
        if overrides:
            settings = settings.with_values("evaluate", **overrides)
        base_model(settings.sampler)
        the_lake = lake_of(settings.lake)
        quiet_libraries()
        evaluation = compare_policies(
            the_lake,
            policies or default_policies(the_lake, settings.publish),
            production=production,
            evaluate=settings.evaluate,
            select=settings.select,
            score=settings.score,
            judge=settings.judge,
            replaying=ReplaySections.of(settings),
        )
    except (ConfigError, StageError) as exc:
        raise fail(str(exc), 2) from None
    if as_json:
        typer.echo(json.dumps(evaluation.to_dict(), indent=1))
        return
    print_evaluation(evaluation.to_dict(), settings.evaluate.production_reward)


def print_evaluation(evaluation: dict[str, Any], production_reward: str) -> None:
    """The evaluation table: each policy's success with its interval, then its paired difference with
    every policy before it; production rows (their `production_reward`) as references."""
    rows = evaluation["table"]
    val = [r for r in rows if r["kind"] == "val"]
    earlier = [r["stage"] for r in val[:-1]]
    reward = evaluation["comparison"]["reward"]
    table = Table(
        "policy",
        Column("lake name", overflow="fold"),
        "success [95% CI]",
        "greedy [95% CI]",
        "n",
        *(f"vs {label} (paired)" for label in earlier),
        title=f"Success ({reward}) on {val[0]['n'] if val else 0} scenarios"
        + (f"; production: {production_reward} on its own traffic" if len(val) < len(rows) else ""),
    )
    for row in rows:
        diffs = {d["against"]: d for d in row["differences"]}
        greedy = row.get("greedy")
        table.add_row(
            row["stage"] if row["kind"] == "val" else "production",
            row["policy"],
            interval(row["mean"], row["ci"]),
            interval(greedy["mean"], greedy["ci"]) if greedy else "",
            str(row["n"]),
            *(interval(diffs[a]["mean"], diffs[a]["ci"], signed=True) if a in diffs else "" for a in earlier),
        )
    console = Console()
    console.print(table)
    comparison = evaluation["comparison"]
    low, high = comparison["difference_ci"]
    verdict = "better" if low > 0 else "worse" if high < 0 else "not distinguishable"
    console.print(
        f"{val[-1]['stage']} vs {val[0]['stage']}: {comparison['difference']:+.3f} [{low:+.3f}, {high:+.3f}] "
        f"on {comparison['paired_scenarios']} paired scenarios: {verdict}; recorded as eval run "
        f"`{evaluation['eval_run_id']}` (nothing published)"
    )


def interval(mean: float, ci: Any, signed: bool = False) -> str:
    """A mean and its interval.

    >>> interval(0.5, (0.25, 0.75)), interval(0.1, (-0.05, 0.2), signed=True)
    ('0.500 [0.250, 0.750]', '+0.100 [-0.050, +0.200]')
    """
    sign = "+" if signed else ""
    return f"{mean:{sign}.3f} [{ci[0]:{sign}.3f}, {ci[1]:{sign}.3f}]"


app = command_app()  # its commands join `trajlake` on first use (flows.cli)
app.command("evaluate")(evaluate)
