"""What `trajlake demo` prints: the learning table, production before and after, the step times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from judging.evaluation_stats import independent_difference

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


# --- summary.json ----------------------------------------------------------------------------------


def _stage(row: dict[str, Any]) -> dict[str, Any]:
    """One evaluation-table row as summary.json has it: `success` is the row's mean (sampled at the
    replay temperature), `sampled` and `greedy` (T=0, one sample per scenario) each with its CI."""
    greedy = row.get("greedy")
    return {
        "stage": row["stage"],
        "policy": row["policy"],
        "success": row["mean"],
        "ci": list(row["ci"]),
        "n": row["n"],
        "sampled": {"success": row["mean"], "ci": list(row["ci"]), "n": row["n"]},
        "greedy": {"success": greedy["mean"], "ci": list(greedy["ci"]), "n": greedy["scenarios"]}
        if greedy
        else None,
        "differences": [
            {"against": d["against"], "mean": d["mean"], "ci": list(d["ci"]), "n": d["paired_scenarios"]}
            for d in row["differences"]
        ],
    }


def _difference(row: dict[str, Any] | None, against: str) -> dict[str, Any] | None:
    diff = next((d for d in (row or {}).get("differences", []) if d["against"] == against), None)
    return {"mean": diff["mean"], "ci": list(diff["ci"]), "n": diff["paired_scenarios"]} if diff else None


def night_summary(night: int, result: dict[str, Any]) -> dict[str, Any]:
    """What one pipeline run measured and decided: its stages on the val scenarios (base, sft,
    grpo-N, or the adapter it continued), the production policies' rows, the gate's decision."""
    evaluation = result.get("evaluation") or {}
    table = evaluation.get("table") or []
    val = [row for row in table if row["kind"] == "val"]
    published = result.get("published") or {}
    run = result.get("run")
    comparison = evaluation.get("comparison")
    return {
        "night": night,
        "run_id": getattr(run, "run_id", None),
        "start": getattr(run, "start_adapter", None) or "base",
        "training_steps": getattr(run, "training_steps", 0),
        "adapter": f"{published['name']}:{published['version']}" if published else None,
        "promoted": bool(published.get("promoted")),
        "decision": published.get("decision") or getattr(run, "decision", None),
        "stages": [_stage(row) for row in val],
        "production": [_stage(row) for row in table if row["kind"] == "production"],
        "candidate_minus_baseline": {
            "baseline": evaluation["baseline"],
            "mean": comparison["difference"],
            "ci": list(comparison["difference_ci"]),
            "n": comparison["paired_scenarios"],
        }
        if comparison
        else None,
        "learned_from": result.get("learned_from"),
        "rounds": [
            {
                k: r[k]
                for k in (
                    "round",
                    "policy",
                    "groups",
                    "mean_reward",
                    "equal_reward_groups",
                    "failed_scenarios",
                )
            }
            for r in result.get("rounds", [])
        ],
        "wall_s": {name: round(seconds, 1) for name, seconds in result.get("timings", [])},
    }


def demo_summary(
    *,
    model: str,
    backend: str,
    task: str,
    nights: list[dict[str, Any]],
    captured: dict[str, Any],
    second: dict[str, Any] | None,
    timings: list[tuple[str, float]],
    total_s: float,
) -> dict[str, Any]:
    """summary.json: the numbers the console and the report print, machine-readable.

    The top-level `adapter`, `stages` and `final_minus_sft` are night 1's (the run that starts
    from the base model); `nights` holds both pipeline runs. `production.before` is the
    production LLM's success on its own traffic (user feedback), `after` the published
    adapter's on the batch it served.
    """
    first = [night_summary(i, result) for i, result in enumerate(nights, start=1)]
    night1 = first[0]
    val = [row for row in (nights[0].get("evaluation") or {}).get("table", []) if row["kind"] == "val"]
    teacher = next((row for row in night1["production"] if row["policy"] == captured.get("model")), None)
    before = teacher["success"] if teacher else captured["correct"] / max(1, captured["agent_runs"])
    n_before = teacher["n"] if teacher else captured["agent_runs"]
    n_after = second["agent_runs"] if second else 0
    difference: dict[str, Any] | None = None
    if second and n_after and n_before:
        # each run's success is 0 or 1 (the user's thumbs): the two batches as their outcomes
        right_before = round(before * n_before)
        mean, ci = independent_difference(
            [1.0] * second["correct"] + [0.0] * (n_after - second["correct"]),
            [1.0] * right_before + [0.0] * (n_before - right_before),
        )
        difference = {"mean": mean, "ci": list(ci)}
    return {
        "model": model,
        "backend": backend,
        "task": task,
        "adapter": night1["adapter"],
        "stages": night1["stages"],
        "final_minus_sft": _difference(val[-1] if val else None, "sft"),
        "production": {
            "before": before,
            "before_policy": captured.get("model"),
            "before_n": captured["agent_runs"],
            "n_before": n_before,
            "after": second["success"] if second else None,
            "after_policy": second["model"] if second else None,
            "after_n": n_after,
            "n_after": n_after,
            "difference": difference,  # after - before, with its 95% CI (independent batches)
        },
        "nights": first,
        "wall_s": {"total": round(total_s, 1), **{name: round(seconds, 1) for name, seconds in timings}},
    }


def write_summary(path: Path, summary: dict[str, Any]) -> Path:
    """Write summary.json whole (a temporary file renamed into place: never a half-written one)."""
    import json

    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    partial.replace(path)
    return path
