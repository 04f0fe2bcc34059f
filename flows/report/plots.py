"""The report's plots, each a PNG (base64) or None when there is nothing to draw.

Every plot draws numbers `flows.report.report_data` read from the lake, so a reader can
re-derive them with `trajlake sql`.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from store.policy_names import SEPARATOR, split_policy

if TYPE_CHECKING:
    from flows.report.data import ReportData

COLORS = ["#2b6cb0", "#c05621", "#2f855a", "#6b46c1"]


def png(fig: Figure) -> str:
    # A `Figure` of its own, not pyplot's: saving it draws with Agg, whatever backend the
    # process (a notebook, a user's GUI) has chosen, and no global figure is left open.
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def short(text: str, width: int = 28) -> str:
    """`text` in at most `width` characters, its middle elided: a run id keeps both its stage
    (the start) and its random part (the end), which tell two adapters apart.

    >>> short("grpo-20261126T101500-1a2b3c4d", 20)
    'grpo-2026…0-1a2b3c4d'
    """
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def name(policy: str | None, width: int = 28) -> str:
    """A policy's name (`training.models.policies`) for a plot: the base model, and the adapter on a
    line of its own, each at most `width` characters."""
    parts = split_policy(policy or "(base)")
    adapter = f"\n{SEPARATOR}{short(parts.adapter, width - 1)}" if parts.adapter is not None else ""
    return short(parts.base, width) + adapter


def slanted(ax: Any) -> None:
    """Tick labels rotated so long names never overlap."""
    for label in ax.get_xticklabels():
        label.set_rotation(30)
        label.set_horizontalalignment("right")


def plot_learning(data: ReportData) -> str | None:
    """Success per stage on the val scenarios with 95% CIs; production policies as reference lines."""
    stages = [r for r in data.learning if r.kind == "val"]
    if not stages:
        return None
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    xs = list(range(len(stages)))
    means = [r.mean for r in stages]
    errors = [[r.mean - r.ci[0] for r in stages], [r.ci[1] - r.mean for r in stages]]
    ax.errorbar(xs, means, yerr=errors, marker="o", capsize=4, color=COLORS[0], label="val success (95% CI)")
    for i, r in enumerate(r for r in data.learning if r.kind == "production" and r.adapter is None):
        color = COLORS[1 + i % (len(COLORS) - 1)]
        ax.axhline(r.mean, color=color, linestyle="--", label=f"production: {name(r.policy, 24)}")
        ax.axhspan(r.ci[0], r.ci[1], color=color, alpha=0.12)
    ax.set_xticks(xs, [r.stage for r in stages], fontsize=8)
    slanted(ax)
    ax.set_ylim(-0.02, 1.05)
    ax.set_ylabel(f"success (`{data.success_reward}`)")
    ax.set_title("Learning: success per stage on the val scenarios")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return png(fig)


def plot_production(data: ReportData) -> str | None:
    """Production feedback per policy, in the order the policies first served."""
    if not data.production:
        return None
    fig = Figure(figsize=(5, 3))
    ax = fig.subplots()
    labels = [name(p.policy, 22) for p in data.production]
    colors = ["#38a169" if p.adapter else "#a0aec0" for p in data.production]
    bars = ax.bar(labels, [p.mean for p in data.production], color=colors)
    ax.bar_label(bars, labels=[f"{p.mean:.3f}\n(n={p.trajectories})" for p in data.production], fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel(f"mean `{data.production_reward}`")
    ax.set_title("Production before and after (policy_performance)")
    slanted(ax)
    return png(fig)


def plot_production_days(data: ReportData) -> str | None:
    """Production feedback per policy and day (`policy_performance`): adapters over time."""
    if len({day for day, _, _, _ in data.production_days}) < 2:
        return None
    fig = Figure(figsize=(7, 3.2))
    ax = fig.subplots()
    policies = list(dict.fromkeys(p for _, p, _, _ in data.production_days))
    for i, policy in enumerate(policies):
        points = [(day, mean) for day, p, mean, _ in data.production_days if p == policy]
        ax.plot(
            [d for d, _ in points],
            [m for _, m in points],
            marker="o",
            color=COLORS[i % len(COLORS)],
            label=name(policy, 30),
        )
    ax.set_ylabel(f"mean `{data.production_reward}`")
    ax.set_title("Production feedback per day and policy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    slanted(ax)
    return png(fig)


def plot_gap_steps(data: ReportData) -> str | None:
    """Mean |trainer - sampler| logprob of the stored tokens at every GRPO step, by round."""
    if not data.gap_steps:
        return None
    fig = Figure(figsize=(7, 3))
    ax = fig.subplots()
    rounds = sorted({r for r, _, _ in data.gap_steps})
    offset = 0
    for i, round_ in enumerate(rounds):
        steps = [(s, g) for r, s, g in data.gap_steps if r == round_]
        ax.plot(
            [offset + k for k in range(len(steps))],
            [g for _, g in steps],
            marker=".",
            color=COLORS[i % len(COLORS)],
            label=f"round {round_}",
        )
        offset += len(steps)
    ax.set_yscale("log")
    ax.set_xlim(-0.5, max(offset - 0.5, 0.5))
    locator = ax.xaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # a linear axis's AutoLocator: whole step numbers only
        locator.set_params(integer=True)
    ax.set_xlabel("GRPO step (all rounds in order)")
    ax.set_ylabel("mean |Δ logprob|")
    ax.set_title("Sampler/trainer logprob gap per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=min(5, len(rounds)))
    return png(fig)


def plot_rounds(data: ReportData) -> str | None:
    if not data.rounds:
        return None
    fig = Figure(figsize=(6, 3.2))
    ax = fig.subplots()
    xs = [r.round for r in data.rounds]
    means = [r.mean for r in data.rounds]
    stds = [r.std for r in data.rounds]
    ax.errorbar(xs, means, yerr=stds, marker="o", capsize=4, color=COLORS[0])
    ax.set_xticks(xs, [f"{r.round}: {name(r.policy, 22)}" for r in data.rounds], fontsize=8)
    ax.set_ylabel(f"mean `{data.reward_name}`")
    ax.set_title("Reward per round (replayed groups, ±1 std)")
    ax.grid(alpha=0.3)
    slanted(ax)
    return png(fig)


def plot_groups(data: ReportData) -> str | None:
    if not data.group_rewards:
        return None
    rounds = {r.policy: r.round for r in data.rounds}  # panels in round order, not name order
    policies = sorted(data.group_rewards, key=lambda p: rounds.get(p, len(rounds) + 1))
    fig = Figure(figsize=(max(6, 3.2 * len(policies)), 3.2))
    axes = fig.subplots(1, len(policies), squeeze=False, sharey=True)
    for ax, policy in zip(axes[0], policies, strict=True):
        groups = data.group_rewards[policy]
        ax.boxplot(groups, showfliers=False)
        for i, values in enumerate(groups, start=1):
            ax.scatter([i] * len(values), values, s=10, alpha=0.6, color=COLORS[1])
        ax.set_title(name(policy, 24), fontsize=9)
        ax.set_xlabel("group")
        ax.set_xticks([])
    axes[0][0].set_ylabel(data.reward_name)
    fig.suptitle("Reward distribution per group", fontsize=10, y=1.06)  # above two-line titles
    return png(fig)


def plot_evaluation(data: ReportData) -> str | None:
    ev = data.evaluation
    if ev is None:
        return None
    fig = Figure(figsize=(4.5, 3))
    ax = fig.subplots()
    bars = ax.bar(
        [short(ev.baseline), short(ev.candidate)],
        [ev.baseline_reward, ev.candidate_reward],
        color=["#a0aec0", "#38a169"],
    )
    ax.bar_label(bars, fmt="%.3f")
    ax.set_ylabel(f"val mean `{data.success_reward}`")
    ax.set_title(f"Val reward on {ev.scenarios} scenarios")
    return png(fig)
