"""The report's "what changed" section: the val scenarios a candidate answers better or worse than
where its run started, read from the evaluation's own samples, shown in a real browser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.report import report_data, write_report
from flows.report.changes import compared_stages
from flows.report.data import StageRow
from judging.evaluation_stats import compare, evaluation_table, record_evaluation
from store.lake import Lake
from store.rows import utc_now
from store.writer import write
from tests.flows.report.browser import chromium, console_errors, screenshot_sections

QUESTIONS = {  # scenario: (question, right answer), stored as `expected` JSON
    "sc-a": ("What is 2 + 2?", "4"),
    "sc-b": ("What do I get if I take 1 away from 5?", "4"),
    "sc-c": ("What is 3 * 3?", "9"),
    "sc-d": ("What is 1 + 1?", "2"),
}
# per scenario and policy: the four sampled final answers, then the greedy one
ANSWERS = {
    ("sc-a", "m+sft"): ["5", "5", "5", "6", "5"],
    ("sc-a", "m+g1"): ["4", "4", "4", "4", "4"],  # fixed: 0/4 -> 4/4
    ("sc-b", "m+sft"): ["4", "4", "4", "4", "4"],
    ("sc-b", "m+g1"): ["-4", "4", "-4", "-4", "-4"],  # broken: 4/4 -> 1/4, greedy 1 -> 0
    ("sc-c", "m+sft"): ["9", "8", "9", "8", "8"],
    ("sc-c", "m+g1"): ["8", "9", "8", "9", "9"],  # same 2/4 sampled; greedy 0 -> 1
    ("sc-d", "m+sft"): ["2"] * 5,
    ("sc-d", "m+g1"): ["2"] * 5,  # unchanged
}


def seed_evaluation(lake: Lake) -> None:
    now = utc_now()
    scenarios = [
        {
            "scenario_id": sid,
            "split": "val",
            "expected": json.dumps({"final_output": answer}),
            "messages": [{"role": "system", "content": "Be careful."}, {"role": "user", "content": question}],
        }
        for sid, (question, answer) in QUESTIONS.items()
    ]
    trajectories, rewards = [], []

    def sample(tid: str, sid: str, policy: str, answer: str, temperature: float, run: str = "eval") -> None:
        trajectories.append(
            {
                "trajectory_id": tid,
                "source": "replay",
                "started_at": now,
                "scenario_id": sid,
                "scenario_split": "val",
                "replay_run": run,
                "policy": policy,
                "final_output": answer,
                "sampling": {"temperature": temperature, "seed": 0},
            }
        )
        right = float(answer == QUESTIONS[sid][1])
        rewards.append(
            {"trajectory_id": tid, "name": "exact_match", "scorer": "f@1", "value": right, "scored_at": now}
        )

    for (sid, policy), answers in ANSWERS.items():
        for i, answer in enumerate(answers):
            sample(f"{sid}-{policy}-{i}", sid, policy, answer, 1.0 if i < 4 else 0.0)
    for sid in QUESTIONS:  # the base model, right nowhere: not one of the two compared
        sample(f"{sid}-m", sid, "m", "0", 1.0)
    # a training round's samples of the candidate are not its evaluation
    sample("round-sc-d", "sc-d", "m+g1", "7", 1.0, run="round-1")
    # nor is a sample without a sampling record (written before `trajlake migrate`)
    sample("unrecorded-sc-d", "sc-d", "m+g1", "7", 1.0)
    trajectories[-1]["sampling"] = None
    # a second scorer of the same reward is not more samples (`latest_rewards`: one value each)
    rewards += [{**r, "scorer": "g@1"} for r in rewards if r["trajectory_id"].startswith("sc-a-m+sft")]
    write(lake, "scenarios", scenarios)
    write(lake, "trajectories", trajectories)
    write(lake, "rewards", rewards)
    scores = {
        policy: {
            sid: sum(QUESTIONS[sid][1] == a for a in ANSWERS[(sid, policy)][:4]) / 4 for sid in QUESTIONS
        }
        for policy in ("m+sft", "m+g1")
    }
    table = evaluation_table(
        [
            ("base", "m", dict.fromkeys(QUESTIONS, 0.0)),
            ("sft", "m+sft", scores["m+sft"]),
            ("grpo-1", "m+g1", scores["m+g1"]),
        ],
        references=("base", "sft"),
    )
    record_evaluation(
        lake, compare("exact_match", ("m+g1", scores["m+g1"]), ("m", dict.fromkeys(QUESTIONS, 0.0))), table
    )


def test_the_candidate_is_compared_with_where_its_run_started_scenario_by_scenario(lake: Lake) -> None:
    seed_evaluation(lake)
    changes = report_data(lake, "exact_match").changes
    assert changes is not None
    assert (changes.before_stage, changes.after_stage, changes.scenarios) == ("sft", "grpo-1", 4)
    assert [c.scenario_id for c in changes.fixed] == ["sc-a", "sc-c"]  # most changed first
    assert [c.scenario_id for c in changes.regressed] == ["sc-b"]
    fixed, greedy_only = changes.fixed
    assert (fixed.before.successes, fixed.before.samples, fixed.before.answer, fixed.before.answer_count) == (
        0,
        4,
        "5",
        3,
    )
    assert (fixed.after.answer, fixed.after.answer_count, fixed.sampled_change) == ("4", 4, 1.0)
    assert (greedy_only.sampled_change, greedy_only.before.greedy, greedy_only.after.greedy) == (
        0.0,
        0.0,
        1.0,
    )
    (broken,) = changes.regressed
    assert (broken.after.successes, broken.after.answer, broken.after.answer_count, broken.after.greedy) == (
        1,
        "-4",
        3,
        0.0,
    )


@pytest.mark.parametrize(
    ("stages", "compared"),
    [
        (["base", "sft", "grpo-1", "grpo-2"], ("sft", "grpo-2")),
        (["calculator-agent:v1", "grpo-2"], ("calculator-agent:v1", "grpo-2")),  # a run that continued v1
        (["base", "grpo-1"], ("base", "grpo-1")),  # no SFT
        (["v1", "v2"], ("v1", "v2")),  # an ad-hoc evaluation of two adapters
        (["sft"], None),
    ],
)
def test_the_stages_compared(stages: list[str], compared: tuple[str, str] | None) -> None:
    rows = [StageRow(stage, f"p-{stage}", "val", 0.5, (0.4, 0.6), 10) for stage in stages]
    rows.append(StageRow("production", "llm", "production", 0.7, (0.6, 0.8), 300))  # never compared
    pair = compared_stages(rows)
    assert ((pair[0].stage, pair[1].stage) if pair else None) == compared


def test_the_section_in_a_real_browser(lake: Lake, tmp_path: Path) -> None:
    seed_evaluation(lake)
    page = write_report(tmp_path / "report.html", report_data(lake, "exact_match"))
    with chromium() as browser:
        browser.get(Path(page).as_uri() + "#changes")
        section = browser.find_element("id", "changes")
        assert section.is_displayed() and section.text == "What changed on the val scenarios"
        body = browser.find_element("tag name", "body").text
        assert "2 answered better, 1 worse" in body
        tables = browser.find_elements(
            "xpath", "//h2[@id='changes']/following-sibling::table[position() <= 2]"
        )
        better, worse = (
            [
                [td.text for td in tr.find_elements("tag name", "td")]
                for tr in t.find_elements("css selector", "tbody tr")
            ]
            for t in tables
        )
        assert [row[0] for row in better] == ["What is 2 + 2?", "What is 3 * 3?"]
        assert better[0][1:] == [
            "4",
            "0/4; greedy 0\n“5” ×3",
            "4/4; greedy 1\n“4” ×4",
            "+1.00",
        ]  # the answer, not its JSON
        assert [row[0] for row in worse] == ["What do I get if I take 1 away from 5?"]
        assert worse[0][3:] == ["1/4; greedy 0\n“-4” ×3", "-0.75"]
        assert console_errors(browser) == []
        screenshot_sections(browser, "changes")
