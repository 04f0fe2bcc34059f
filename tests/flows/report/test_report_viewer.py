"""`trajlake report` on a lake of replayed groups: what the group viewer picks, policies by their
stored names, the lineage in brief, and the page as a person sees it in a real headless Chromium."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from flows.report.data import report_data
from flows.report.lineage import brief_sql
from store.catalog.connection import connect
from store.lake import Lake
from store.rows import runs_row, utc_now
from store.writer import write
from tests.flows.report.browser import chromium, console_errors, decoded_images, screenshot_sections
from tests.training.train_helpers import msg

WORK = "/work/w"
# as samplers name them (`training.models.policies`): the model folder's name + the adapter's run id
POLICIES = [f"model+grpo-2026112{r}T101500-1a2b3c4{r}" for r in (1, 2)]
# per round, per scenario: `calc` of the four samples; `ruler` ranks sc-3's samples the other way
CALC = {"sc-1": [0.0, 1.0, 1.0, 0.0], "sc-2": [1.0, 1.0, 1.0, 1.0], "sc-3": [0.0, 0.2, 0.4, 1.0]}


def seed(lake: Lake) -> None:
    now = utc_now()
    trajectories, rewards = [], []
    for r, policy in enumerate(POLICIES):
        for scenario, values in CALC.items():
            group = f"g-{scenario}-r{r + 1}"
            for k, value in enumerate(values):
                tid = f"{group}-{k}"
                call = {
                    "id": f"c{k}",
                    "name": "calculator",
                    "arguments": json.dumps({"expression": f"{k}+1"}),
                }
                trajectories.append(
                    {
                        "trajectory_id": tid,
                        "source": "replay",
                        "started_at": now + timedelta(minutes=r),
                        "scenario_id": scenario,
                        "group_id": group,
                        "policy": policy,
                        "messages": [
                            msg("user", f"What is {k} + 1? ({scenario})"),
                            msg("assistant", None, tool_calls=[call]),
                            msg("tool", str(k + 1), name="calculator", tool_call_id=f"c{k}"),
                            msg("assistant", f"answer-{tid}"),
                        ],
                        "final_output": f"answer-{tid}",
                        "turns": [
                            {
                                "prompt_token_ids": [5, 6, 7],
                                "completion_token_ids": [11, 12, 13],
                                "logprobs": [-0.01, math.log(0.01), -0.2],
                                "finish_reason": "stop",
                            }
                        ],
                    }
                )
                rewards.append(
                    {"trajectory_id": tid, "name": "calc", "scorer": "f@1", "value": value, "scored_at": now}
                )
                if scenario == "sc-3":
                    rewards.append(
                        {
                            "trajectory_id": tid,
                            "name": "ruler",
                            "scorer": "judge@1",
                            "value": 1.0 - value,
                            "explanation": f"judge-says-{tid}",
                            "scored_at": now,
                        }
                    )
    write(lake, "trajectories", trajectories)
    write(lake, "rewards", rewards)
    write(
        lake,
        "runs",
        [
            runs_row(f"grpo-{r}", s, "grpo", {"sampling/sampling_logp_difference/mean": 1e-6 * (s + 1)})
            for r in (1, 2)
            for s in range(3)
        ],
    )
    ids = ", ".join(f"'g-{i}'" for i in range(40))
    lineage = [
        {"stage": "sft", "sql": "SELECT trajectory_id FROM trajectories", "trajectory_count": 10},
        {
            "stage": "grpo",
            "reward_name": "calc",
            "reward_scorers": ["f@1"],
            "sql": f"SELECT trajectory_id FROM trajectories WHERE group_id IN ({ids})",
            "trajectory_count": 24,
            "table_versions": {"rewards": {"version": 3}, "trajectories": {"version": 2}},
        },
    ]
    write(
        lake,
        "adapters",
        [
            {
                "name": "agent",
                "version": 1,
                "path": "/r/agent/v1",
                "base_model": f"{WORK}/model",
                "aliases": ["latest"],
                "data": json.dumps(lineage),
                "published_at": now,
            }
        ],
    )


def test_the_viewer_picks_each_kind_of_group(lake: Lake) -> None:
    seed(lake)
    data = report_data(lake, "calc", adapter_name="agent")
    view = data.groups
    assert view is not None and view.total == 6
    by_id = {g.group_id: g for g in view.groups}
    assert by_id["g-sc-2-r1"].equal and by_id["g-sc-2-r2"].equal  # all-equal groups
    assert by_id["g-sc-3-r1"].disagree and not by_id["g-sc-1-r1"].disagree  # ruler ranks sc-3 the other way
    assert view.groups[0].spread == 1.0  # largest spread first
    member = next(m for m in by_id["g-sc-3-r1"].members if m.trajectory_id.endswith("-3"))
    assert [r["name"] for r in member.rewards] == ["calc", "ruler"]
    assert member.rewards[1]["explanation"] == "judge-says-g-sc-3-r1-3"
    assert member.advantage is not None and member.advantage > 1  # the best calc of its group
    assert member.tokens[1] == ("#12", pytest.approx(math.log(0.01)))
    assert [r.policy for r in data.rounds] == POLICIES
    assert {g.policy for g in view.groups} == set(POLICIES)
    assert [s for _, s, _ in data.gap_steps] == [0, 1, 2, 0, 1, 2]


def test_a_small_cap_bounds_the_groups_and_says_so(lake: Lake) -> None:
    seed(lake)
    view = report_data(lake, "calc", max_groups=2).groups
    assert view is not None and len(view.groups) == 2 and view.total == 6


def test_lineage_in_brief() -> None:
    ids = ", ".join(f"'g-{i}'" for i in range(100))
    assert brief_sql(f"SELECT x FROM t WHERE group_id IN ({ids}) AND y") == (
        "SELECT x FROM t WHERE group_id IN (… 100 ids) AND y"
    )


@pytest.fixture
def report_page(lake: Lake, tmp_path: Path) -> Path:
    seed(lake)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "--lake", lake.root, "--out", str(out), "--reward", "calc"])
    assert result.exit_code == 0, result.output
    assert "6 groups" in result.output
    return out


def test_the_page_in_a_real_browser(report_page: Path) -> None:
    with chromium() as browser:
        browser.get(report_page.as_uri())
        headings = [h.text for h in browser.find_elements("css selector", "h2")]
        assert {
            "Reward per round",
            "Sampler/trainer logprob gap per round",
            "Adapter lineage",
            "Groups",
        } <= set(headings)
        images = decoded_images(browser)
        assert images and all(width > 0 and height > 0 for _, width, height in images), images
        assert console_errors(browser) == []
        body = browser.find_element("tag name", "body").text
        assert all(policy in body for policy in POLICIES)  # the stored names, as they are
        assert "Adapter agent v1 on model, aliases latest" in body and WORK not in body  # no paths
        assert "IN (… 40 ids)" in body

        def shown() -> list[str]:
            return [
                g.get_attribute("id").removeprefix("group-")
                for g in browser.find_elements("css selector", "#groups .group")
                if g.is_displayed()
            ]

        assert len(shown()) == 6
        browser.find_element("css selector", "button[data-filter='equal']").click()
        assert sorted(shown()) == ["g-sc-2-r1", "g-sc-2-r2"]
        assert browser.current_url.endswith("#groups/filter=equal")  # the state is in the URL
        browser.find_element("css selector", "button[data-filter='disagree']").click()
        assert sorted(shown()) == ["g-sc-3-r1", "g-sc-3-r2"]
        # a round's link to its groups: the name has a `+`, which must survive the URL
        browser.find_elements("css selector", "a[href^='#groups/policy=']")[1].click()
        assert sorted(shown()) == ["g-sc-1-r2", "g-sc-2-r2", "g-sc-3-r2"]
        assert browser.find_element("id", "policy-filter").get_attribute("value") == POLICIES[1]
        browser.get(report_page.as_uri() + "#groups/scenario=sc-1")  # a scenario's groups across rounds
        browser.refresh()
        assert sorted(shown()) == ["g-sc-1-r1", "g-sc-1-r2"]
        card = browser.find_element("id", "group-g-sc-1-r2")
        assert "answer-g-sc-1-r2-1" in card.text and "calculator" in card.text  # the answer, the tool call
        low = card.find_elements("css selector", ".tok.low")  # p < 0.2: one of each sample's three tokens
        assert len(low) == 4 and all("p=0.010" in t.get_attribute("title") for t in low)
        assert console_errors(browser) == []
        screenshot_sections(browser, "viewer")


def test_a_time_window_keeps_the_rounds_and_groups_inside_it(lake: Lake) -> None:
    seed(lake)
    second = connect(lake).execute("SELECT max(started_at) FROM trajectories").fetchone()[0]
    later = report_data(lake, "calc", since=second.isoformat())
    assert [r.policy for r in later.rounds] == POLICIES[1:]
    assert later.groups is not None and {g.policy for g in later.groups.groups} == {POLICIES[1]}
    earlier = report_data(lake, "calc", until=second.isoformat())
    assert [r.policy for r in earlier.rounds] == POLICIES[:1]
