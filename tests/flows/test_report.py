"""The HTML report: numbers come from the lake, plots are embedded, nothing external."""

from __future__ import annotations

import re
from datetime import timedelta

import store
from flows.report import Evaluation, render_report, report_data, write_report


def seed_rounds(lake: store.Lake) -> None:
    now = store.utc_now()
    trajectories, rewards = [], []
    values = {"base": [0, 0, 1, 0, 0, 1, 1, 1], "agent:v1": [1, 1, 1, 0, 1, 1, 1, 1]}
    for offset, (policy, vals) in enumerate(values.items()):
        started = now + timedelta(minutes=offset)  # rounds are ordered by when their policy first sampled
        for i, value in enumerate(vals):
            tid = f"{policy}-{i}"
            group = f"{policy}-g{i // 4}"
            trajectories.append(
                {
                    "trajectory_id": tid,
                    "source": "replay",
                    "started_at": started,
                    "group_id": group,
                    "policy": policy,
                }
            )
            rewards.append(
                {
                    "trajectory_id": tid,
                    "name": "exact_match",
                    "scorer": "f@1",
                    "value": float(value),
                    "scored_at": now,
                }
            )
    # a production trajectory and another reward name must not leak into the rounds
    trajectories.append({"trajectory_id": "prod", "source": "otel", "started_at": now})
    rewards.append(
        {"trajectory_id": "prod", "name": "exact_match", "scorer": "f@1", "value": 5.0, "scored_at": now}
    )
    rewards.append(
        {"trajectory_id": "base-0", "name": "other", "scorer": "g@1", "value": 9.0, "scored_at": now}
    )
    store.write(lake, "trajectories", trajectories)
    store.write(lake, "rewards", rewards)


def test_report_data_per_round_from_the_lake(lake: store.Lake) -> None:
    seed_rounds(lake)
    data = report_data(lake, "exact_match")
    assert [(r.round, r.policy, r.trajectories, r.groups) for r in data.rounds] == [
        (1, "base", 8, 2),
        (2, "agent:v1", 8, 2),
    ]
    assert data.rounds[0].mean == 0.5 and data.rounds[1].mean == 0.875
    assert data.rounds[0].equal_groups == 0 and data.rounds[1].equal_groups == 1  # group 2 of v1 is all ones
    assert sorted(map(sorted, data.group_rewards["base"])) == [[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]


def test_render_embeds_plots_and_measured_evaluation(lake: store.Lake, tmp_path) -> None:
    seed_rounds(lake)
    evaluation = Evaluation("agent:v1", 0.75, "base model", 0.25, 8, True)
    data = report_data(lake, "exact_match", evaluation=evaluation, sql_recipes=[("Rounds", "SELECT 1")])
    page = render_report(data)
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', page)) == 3
    assert "0.750" in page and "0.250" in page and "promoted" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    path = write_report(tmp_path / "out" / "report.html", data)
    assert path.read_text() == page


def test_empty_lake_renders_without_plots(lake: store.Lake) -> None:
    page = render_report(report_data(lake, "exact_match"))
    assert "No data for reward per round" in page
