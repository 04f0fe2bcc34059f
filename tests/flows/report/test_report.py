"""The HTML report: numbers come from the lake, plots are embedded, nothing external."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta

import pytest

from flows.cli import app
from flows.report import PublishedComparison, render_report, report_data, write_report
from judging.evaluation_stats import compare, evaluation_table, production_success, record_evaluation
from store.lake import Lake
from store.pipeline_runs import PipelineRun, record_pipeline_run
from store.rows import served_adapter_name, utc_now
from store.writer import write
from tests.store.test_typed_columns import AT, RUN, old_layout, old_replayed


def seed_rounds(lake: Lake) -> None:
    now = utc_now()
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
    write(lake, "trajectories", trajectories)
    write(lake, "rewards", rewards)


def test_report_data_per_round_from_the_lake(lake: Lake) -> None:
    seed_rounds(lake)
    data = report_data(lake, "exact_match")
    assert [(r.round, r.policy, r.trajectories, r.groups) for r in data.rounds] == [
        (1, "base", 8, 2),
        (2, "agent:v1", 8, 2),
    ]
    assert data.rounds[0].mean == 0.5 and data.rounds[1].mean == 0.875
    assert data.rounds[0].equal_groups == 0 and data.rounds[1].equal_groups == 1  # group 2 of v1 is all ones
    assert sorted(map(sorted, data.group_rewards["base"])) == [[0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]


def test_render_embeds_plots_and_measured_evaluation(lake: Lake, tmp_path) -> None:
    seed_rounds(lake)
    evaluation = PublishedComparison("agent:v1", 0.75, "base model", 0.25, 8, True)
    data = report_data(lake, "exact_match", evaluation=evaluation, sql_recipes=[("Rounds", "SELECT 1")])
    page = render_report(data)
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', page)) == 3
    assert "0.750" in page and "0.250" in page and "promoted" in page
    assert "http://" not in page and "https://" not in page  # self-contained
    path = write_report(tmp_path / "out" / "report.html", data)
    assert path.read_text() == page


def test_empty_lake_renders_without_plots(lake: Lake) -> None:
    page = render_report(report_data(lake, "exact_match"))
    assert "No data for reward per round" in page


def seed_learning(lake: Lake) -> None:
    """An evaluation run (base, SFT, one round; production as reference) and feedback before/after."""
    ids = [f"s{i}" for i in range(20)]
    base = dict.fromkeys(ids, 0.0)
    sft = {s: float(i % 2) for i, s in enumerate(ids)}
    grpo = {s: float(i % 2 == 1 or i % 5 != 0) for i, s in enumerate(ids)}  # never below SFT
    now = utc_now()
    served = served_adapter_name("agent", 1)
    rows = [
        {"trajectory_id": f"p{i}", "source": "otel", "started_at": now, "policy": "prod-llm"}
        for i in range(10)
    ]
    rows += [
        {
            "trajectory_id": f"a{i}",
            "source": "otel",
            "started_at": now + timedelta(minutes=1),
            "policy": served,
        }
        for i in range(10)
    ]
    write(lake, "trajectories", rows)
    write(
        lake,
        "rewards",
        [
            {
                "trajectory_id": r["trajectory_id"],
                "name": "user_feedback",
                "scorer": "user",
                "scored_at": now,
                "value": float(r["trajectory_id"] not in ("p0", "p1", "p2", "a0")),
            }
            for r in rows
        ],
    )
    write(lake, "adapters", [{"name": "agent", "version": 1, "path": "/r/agent/v1", "aliases": ["latest"]}])
    table = evaluation_table(
        [("base", "m", base), ("sft", "m+sft", sft), ("grpo-1", "m+g1", grpo)], references=("base", "sft")
    )
    table += production_success(lake, "user_feedback")
    record_evaluation(lake, compare("exact_match", ("m+g1", grpo), ("m", base)), table, adapter="agent")


def test_learning_curve_and_production_before_after(lake: Lake) -> None:
    seed_learning(lake)
    data = report_data(lake, "exact_match")
    assert [(r.stage, r.kind) for r in data.learning] == [
        ("base", "val"),
        ("sft", "val"),
        ("grpo-1", "val"),
        ("production", "production"),
        ("production", "production"),
    ]
    assert data.success_reward == "exact_match"
    grpo = data.learning[2]
    assert (
        grpo.mean == 0.9
        and grpo.differences["sft"][0] == pytest.approx(0.4)
        and grpo.differences["sft"][1] > 0
    )
    assert [(r.policy, r.adapter) for r in data.learning[3:]] == [("prod-llm", None), ("agent-v1", "agent")]
    assert [(p.policy, p.adapter, p.adapter_version, p.trajectories, p.mean) for p in data.production] == [
        ("prod-llm", None, None, 10, 0.7),
        ("agent-v1", "agent", 1, 10, 0.9),
    ]
    page = render_report(data)
    assert "Learning: success per stage" in page and "Production before and after" in page
    assert len(re.findall(r'src="data:image/png;base64,[A-Za-z0-9+/=]{100,}"', page)) == 2  # no rounds here
    assert "0.900 [" in page and "+0.400 [" in page  # grpo-1's success and its lift over SFT, with CIs


def test_production_traffic_counts_every_production_trajectory_rated_or_not(lake: Lake) -> None:
    now = utc_now()

    def conversation(tid: str, source: str, question: str) -> dict:
        return {
            "trajectory_id": tid,
            "source": source,
            "model": "prod-llm",
            "started_at": now,
            "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "4"}],
            "final_output": "4",
        }

    write(
        lake,
        "trajectories",
        [conversation(f"o{i}", "otel", f"What is {i} + 2?") for i in range(3)]
        + [conversation(f"i{i}", "import", "An <b>imported</b> question") for i in range(2)],
    )
    write(
        lake,
        "rewards",
        [
            {
                "trajectory_id": "o0",
                "name": "user_feedback",
                "scorer": "user",
                "value": 1.0,
                "scored_at": now,
            },
            {
                "trajectory_id": "o1",
                "name": "user_feedback",
                "scorer": "user",
                "value": 0.0,
                "scored_at": now,
            },
        ],
    )
    data = report_data(lake, "exact_match")
    day = now.strftime("%Y-%m-%d")
    assert [(r.source, r.policy, r.day, r.trajectories, r.rated, r.mean) for r in data.traffic] == [
        ("import", "prod-llm", day, 2, 0, None),  # imported conversations have no feedback and still count
        ("otel", "prod-llm", day, 3, 2, 0.5),
    ]
    assert len(data.conversations) == 5 and {c.source for c in data.conversations} == {"otel", "import"}
    page = render_report(data)
    assert "Production traffic" in page and "What is 2 + 2?" in page
    assert "An &lt;b&gt;imported&lt;/b&gt; question" in page  # escaped, never markup


def test_an_ad_hoc_replay_is_not_a_round_of_the_pipeline(lake: Lake) -> None:
    seed_rounds(lake)  # two replays by policy, without the pipeline's run names
    assert len(report_data(lake, "exact_match").rounds) == 2  # a lake trained by hand: its replays
    now = utc_now()
    record_pipeline_run(lake, PipelineRun("pipeline-1", now.isoformat(), status="finished"))
    rows = [
        {"trajectory_id": f"r{i}", "source": "replay", "started_at": now, "group_id": "round-g", "policy": "p1",
         "replay_run": "round-1"}
        for i in range(2)
    ]  # fmt: skip
    write(lake, "trajectories", rows)
    write(
        lake,
        "rewards",
        [{"trajectory_id": r["trajectory_id"], "name": "exact_match", "scorer": "f@1", "value": 1.0,
          "scored_at": now} for r in rows],
    )  # fmt: skip
    # with pipeline runs, the rounds are theirs; the earlier ad-hoc replays are not "rounds 1 and 2"
    assert [(r.round, r.policy) for r in report_data(lake, "exact_match").rounds] == [(1, "p1")]


def test_plots_leave_the_processs_matplotlib_backend_alone(lake: Lake) -> None:
    # A notebook or a GUI that renders a report keeps its own backend (`matplotlib.use("Agg")`
    # at import switched it); the plots still come out as PNG.
    program = (
        "import sys, base64, matplotlib; matplotlib.use('svg')\n"
        "from store.lake import Lake\n"
        "from flows.report import render_report, report_data\n"
        "page = render_report(report_data(Lake(sys.argv[1]), 'exact_match'))\n"
        "print(matplotlib.get_backend(), page.count('data:image/png;base64,iVBORw0KGgo'))\n"
    )
    seed_rounds(lake)
    done = subprocess.run(
        [sys.executable, "-c", program, lake.root], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["svg", "2"]


def test_a_lake_an_older_trajlake_wrote_reads_as_it_is(tmp_path) -> None:
    """Read-only paths read a lake of the old layout (no typed columns) without migrating it: the
    typed columns of its rows are null, and the report leaves them out of what those columns drive."""
    import dataclasses
    import json

    from typer.testing import CliRunner

    lake = tmp_path / "lake"
    old_layout(lake, "trajectories", [old_replayed("t-1", 0.8)])
    old_layout(
        lake,
        "runs",
        [
            {
                "run_id": RUN.run_id,
                "step": 0,
                "stage": "pipeline",
                "at": AT,
                "metrics": json.dumps(dataclasses.asdict(RUN)),
            }
        ],
    )
    write(
        lake,
        "rewards",
        [{"trajectory_id": "t-1", "name": "exact_match", "scorer": "f", "value": 1.0, "scored_at": AT}],
    )
    before = sorted(p.relative_to(lake) for p in lake.rglob("*"))
    runner = CliRunner()
    sql = runner.invoke(
        app,
        [
            "sql",
            "SELECT replay_run, sampling, scalars FROM trajectories, runs",
            "--lake",
            str(lake),
            "-f",
            "json",
        ],
    )
    assert sql.exit_code == 0, sql.output
    assert json.loads(sql.stdout) == [{"replay_run": None, "sampling": None, "scalars": None}]
    out = tmp_path / "report.html"
    report = runner.invoke(app, ["report", "--lake", str(lake), "--out", str(out)])
    assert report.exit_code == 0, report.output
    assert out.read_text().startswith("<!")
    assert report_data(lake, "exact_match").pipeline_runs == []  # its run is the older trajlake's
    assert sorted(p.relative_to(lake) for p in lake.rglob("*")) == before  # nothing migrated
