"""What `trajlake demo` prints: the learning table, production before and after, the step times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Column, Table

console = Console()


def _interval(mean: float, ci: Any, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"{mean:{sign}.3f} [{ci[0]:{sign}.3f}, {ci[1]:{sign}.3f}]"


def print_learning(result: dict[str, Any]) -> None:
    """The pipeline's evaluation table: each stage on the val scenarios, production as the reference."""
    evaluation = result.get("evaluation")
    if not evaluation:
        return
    rows = evaluation["table"]
    scenarios = next((r["n"] for r in rows if r["kind"] == "val"), 0)
    # paired with the previous stage, and with the run's starting point (its SFT or the adapter it continued)
    compared = {d["against"] for r in rows for d in r["differences"]}
    against = [
        "previous",
        *(a for a in dict.fromkeys(("sft", evaluation["baseline"])) if a in compared - {"base"}),
    ]
    table = Table(
        "stage",
        Column("policy", overflow="fold"),  # a run id tells the adapters apart: never cut it off
        "success [95% CI]",
        "n",
        *(f"vs {a} (paired)" for a in against),
        title=f"Success: val scenarios ({scenarios}) and production feedback",
    )
    for row in rows:
        diffs = {d["against"]: d for d in row["differences"]}
        cells = [
            _interval(diffs[a]["mean"], diffs[a]["ci"], signed=True) if a in diffs else "" for a in against
        ]
        table.add_row(
            row["stage"],
            row["policy"],
            _interval(row["mean"], row["ci"]),
            str(row["n"]),
            *cells,
        )
    console.print(table)
    published = result.get("published") or {}
    if published:
        console.print(f"gate: [bold]{published['decision']}[/]")


def print_summary(data: Any, report: Path, lake: Path, recipes: list[tuple[str, str]]) -> None:
    """Rewards per round, production before/after, the report and SQL to explore the lake."""
    table = Table(
        "round",
        Column("policy", overflow="fold"),
        "trajectories",
        "mean reward",
        "std",
        "all-equal groups",
        title="Reward per round",
    )
    for r in data.rounds:
        table.add_row(
            str(r.round),
            r.policy,
            str(r.trajectories),
            f"{r.mean:.3f}",
            f"{r.std:.3f}",
            f"{r.equal_groups}/{r.groups}",
        )
    console.print(table)
    if data.production:
        table = Table(
            "policy",
            "adapter version",
            "trajectories",
            f"mean {data.production_reward}",
            title="Production before and after (policy_performance)",
        )
        for p in data.production:
            version = f"{p.adapter} v{p.adapter_version}" if p.adapter else ""
            table.add_row(p.policy, version, str(p.trajectories), f"{p.mean:.3f}")
        console.print(table)
    console.print(f"\nReport: [bold]{report}[/]\nExplore the lake:")
    for what, sql in recipes:
        console.print(f'  # {what}\n  trajlake sql --lake {lake} "{sql}"')


def print_timings(timings: list[tuple[str, float]], title: str = "Demo steps") -> None:
    table = Table("step", "wall time (s)", title=title)
    for name, seconds in timings:
        table.add_row(name, f"{seconds:.1f}")
    table.add_row("total", f"{sum(t for _, t in timings):.1f}")
    console.print(table)
