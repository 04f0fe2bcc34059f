"""`trajlake demo` in its reduced size: the whole loop under a real Prefect API, on the tiny model.

This is also the end-to-end test of the `trajlake-pipeline` flow: production traces
captured through the real collector from an agent instrumented with OpenTelemetry's
OpenAI instrumentation, scenarios, SFT, a replay -> score -> GRPO round, evaluation,
publishing, Prefect artifacts and the HTML report.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from flows.demo.run import run_demo
from flows.report import report_data
from store.catalog.connection import connect
from store.lake import Lake
from store.pipeline_runs import pipeline_runs
from tests.flows.report.browser import chromium, console_errors, decoded_images, screenshot_sections

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


async def _artifact_keys() -> set[str]:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        artifacts = await client.read_artifacts()
    return {a.key for a in artifacts if a.key}


def counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str, calls: list[tuple]) -> None:
    """Spy on `module.name`: record each call's arguments, then run the real function."""
    real = getattr(module, name)

    def spy(*args: object, **kwargs: object) -> object:
        calls.append((name, args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


@pytest.mark.usefixtures("prefect_api")
def test_small_demo_runs_the_whole_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.stages.evaluate

    calls: list[tuple] = []
    counting(monkeypatch, flows.stages.evaluate, "evaluation_replays", calls)
    counting(monkeypatch, flows.stages.evaluate, "score_reward", calls)
    counting(monkeypatch, flows.stages.evaluate, "publish_version", calls)
    result = run_demo(tmp_path / "demo", size="small")
    lake = Lake(result["lake"])
    con = connect(lake)

    # production traces -> trajectories with every message, via the real collector
    otel = con.execute(
        "SELECT count(*), min(len(messages)) FROM trajectories WHERE source = 'otel' AND model = 'production-llm-1'"
    ).fetchone()
    assert otel[0] == result["captured"]["agent_runs"] == 24
    assert otel[1] == 5  # system, user, assistant tool call, tool result, final answer
    tools = con.execute("SELECT DISTINCT tools FROM trajectories WHERE source = 'otel'").fetchall()
    assert [json.loads(t[0])[0]["function"]["name"] for t in tools] == ["calculator"]
    feedback = con.execute("SELECT count(*) FROM rewards WHERE name = 'user_feedback'").fetchone()[0]
    assert feedback == 48  # both production batches

    # then the published adapter served a second production batch (serve-sampler's app, the same
    # instrumented agent): its traces name the version, and policy_performance attributes them to it
    second = result["second_batch"]
    assert second["agent_runs"] == 24 and second["model"] == "calculator-agent-v1"
    performance = con.execute(
        "SELECT policy, adapter, adapter_version, sum(trajectories) FROM policy_performance "
        "WHERE name = 'user_feedback' GROUP BY ALL ORDER BY policy"
    ).fetchall()
    assert performance == [
        ("calculator-agent-v1", "calculator-agent", 1, 24),
        ("production-llm-1", None, None, 24),
    ]

    # replayed groups carry token data and are scored
    groups = con.execute(
        """SELECT count(DISTINCT group_id), min(len(turns)), bool_and(len(turns[1].logprobs) = len(turns[1].completion_token_ids))
           FROM trajectories WHERE source = 'replay' AND replay_run = 'round-1'
           AND policy = ?""",
        [result["rounds"][0]["policy"]],  # night 1's round
    ).fetchone()
    assert groups[0] == result["rounds"][0]["groups"] > 0
    assert groups[1] >= 1 and groups[2]
    for reward in ("calculator", "exact_match", "tool_success"):  # the training reward and two checks
        scored = con.execute("SELECT count(*) FROM groups WHERE name = ?", [reward]).fetchone()[0]
        assert scored >= groups[0], reward

    # training wrote per-step metrics, and the adapter was published with lineage
    stages = {row[0] for row in con.execute("SELECT DISTINCT stage FROM runs").fetchall()}
    assert {"sft", "grpo", "eval"} <= stages
    adapter = con.execute(
        "SELECT name, version, aliases, data FROM adapters WHERE name = 'calculator-agent' AND version = 1"
    ).fetchone()
    # `production` moves only with a version the gate promoted; the demo publishes a refused one
    # as `latest` (`pipeline.latest_if_refused`), to serve it in its second production batch
    assert adapter is not None and ("production" in adapter[2]) == result["published"]["promoted"]
    newest = con.execute("SELECT max(version) FROM adapters WHERE name = 'calculator-agent'").fetchone()[0]
    assert (
        "latest"
        in con.execute(
            "SELECT aliases FROM adapters WHERE name = 'calculator-agent' AND version = ?", [newest]
        ).fetchone()[0]
    )
    assert json.loads(adapter[3])  # lineage
    evaluation = result["evaluation"]
    comparison = evaluation["comparison"]
    assert evaluation["baseline"] == "base" and comparison["paired_scenarios"] > 0

    # each night evaluated once, published once: one replay (both passes) and its scoring per policy of the
    # learning curve (base model = the baseline, SFT, the round's adapter = the candidate); the
    # small demo's first night is not promoted, so its second starts from the base model again
    nights = pipeline_runs(lake)
    assert [(n.start_adapter, n.sft, n.status) for n in nights] == [(None, True, "finished")] * 2
    # every policy sampled (at the replay temperature) and greedily (T=0, one sample per scenario),
    # in one replay of both, and each scored
    night = ["evaluation_replays", "score_reward", "score_reward"] * 3 + ["publish_version"]
    assert [name for name, _, _ in calls[:10]] == night
    sft = str(Path(result["lake"]) / "_work" / nights[0].run_id / "sft-0" / "adapter")
    replayed = [args[1] for name, args, _ in calls if name == "evaluation_replays"]
    greedy = [kwargs["greedy"] for name, _, kwargs in calls if name == "evaluation_replays"]
    assert replayed[:3] == [None, sft, result["adapter"]]
    assert greedy[:3] == [True] * 3
    # the second night learns from the well-rated ones of the 24 conversations the adapter served:
    # a small batch may bring no new train scenario, and then the night says so
    if nights[1].training_steps:
        assert [name for name, _, _ in calls[10:]] == night
        second_sft = str(Path(nights[1].adapter).parents[1] / "sft-0" / "adapter")
        assert replayed[3:] == [None, second_sft, nights[1].adapter]
    else:
        assert calls[10:] == [] and nights[1].decision.startswith(
            "nothing to learn: no train scenario new since"
        )
    evaluations = 2 if nights[1].training_steps else 1
    assert (
        con.execute("SELECT count(DISTINCT run_id) FROM runs WHERE stage = 'eval'").fetchone()[0]
        == evaluations
    )
    table = evaluation["table"]
    assert [(r["stage"], r["kind"]) for r in table] == [
        ("base", "val"),
        ("sft", "val"),
        ("grpo-1", "val"),
        ("production", "production"),
    ]
    assert table[-1]["policy"] == "production-llm-1" and table[-1]["n"] == 24
    # greedy success beside the sampled one, on the same val scenarios, one sample each
    for row in (r for r in table if r["kind"] == "val"):
        assert row["greedy"]["scenarios"] == row["n"] and 0 <= row["greedy"]["mean"] <= 1, row["stage"]
    greedy_sizes = con.execute(
        "SELECT DISTINCT count(*) FROM trajectories WHERE source = 'replay' "
        "AND sampling.temperature = 0 GROUP BY group_id"
    ).fetchall()
    assert greedy_sizes == [(1,)]
    # what each night learned from: well-rated conversations and failures, these only with a label
    # (the demo has no judge, so a failure without the right answer is not selected)
    for night_run in nights:
        learned = night_run.learned_from
        assert learned["scenarios"] == learned["rated_right"] + learned["failures"]
        assert learned["failures"] == learned["failures_labelled"] and learned["failures_unlabelled"] == 0
    labelled = con.execute(
        "SELECT count(*) FROM scenarios WHERE expected_source = 'label' AND rated = 'wrong'"
    ).fetchone()[0]
    assert labelled == con.execute("SELECT count(*) FROM scenarios WHERE rated = 'wrong'").fetchone()[0]
    assert labelled >= 1  # the production LLM erred, and a share of its users sent the right answer
    assert [d["against"] for d in table[2]["differences"]] == ["previous", "base", "sft"]
    # the report compares the night's candidate with its SFT, on every val scenario evaluated
    changes = report_data(lake, "calculator", eval_run=nights[0].eval_run_id).changes
    assert changes is not None and (changes.before_stage, changes.after_stage) == ("sft", "grpo-1")
    assert changes.scenarios == table[2]["n"]
    manifest = json.loads((Path(result["published"]["path"]) / "manifest.json").read_text())
    assert manifest["eval"]["table"] == json.loads(json.dumps(table))  # the manifest carries the table

    # the report shows the newest night's measured numbers and both nights' decisions
    page = Path(result["report"]).read_text()
    newest = (result["night2"].get("evaluation") or evaluation)["comparison"]
    candidate, baseline = newest["candidate"]["mean"], newest["baseline"]["mean"]
    assert f"{candidate:.3f}" in page and f"{baseline:.3f}" in page
    assert "Pipeline runs" in page and all(n.decision and n.decision in page for n in nights)
    # evaluation, learning curve, production before/after, rewards per round, gap per step, groups
    assert page.count("data:image/png;base64,") == 6
    assert "Learning: success per stage" in page and "calculator-agent-v1" in page
    assert "greedy success [95% CI]" in page and "rated right" in page and "failures" in page
    assert "Production: <code>calculator-agent-v1</code>" in page  # before/after with its CI
    # the pipeline flow wrote its own report, with no demo code: seen in a real browser
    pipeline_report = Path(result["lake"]) / "_work" / "report.html"
    with chromium() as browser:
        for name, path in (("demo", Path(result["report"])), ("pipeline", pipeline_report)):
            browser.get(path.as_uri())
            headings = {h.text for h in browser.find_elements("css selector", "h2")}
            assert {"Pipeline runs", "Reward per round", "Groups", "Adapter lineage"} <= headings, name
            assert all(w > 0 and h > 0 for _, w, h in decoded_images(browser)), name
            assert console_errors(browser) == [], name
            cards = browser.find_elements("css selector", "#groups .group")
            assert cards and "final answer" in cards[0].text, name
            assert "/_work/" not in browser.find_element("id", "groups").text  # names, not paths
            screenshot_sections(browser, name)
    assert [name for name, _ in result["timings"]] == [
        "base model",
        "production batch 1 (production LLM)",
        "pipeline night 1",
        "production batch 2 (published adapter)",
        "pipeline night 2",
        "report",
    ]
    steps = [name for name, _ in result["pipeline_timings"]]
    assert steps[:3] == ["assemble", "scenarios", "sft"] and steps[-3:] == ["evaluate", "publish", "report"]
    assert {"round 1: replay", "round 1: score", "round 1: grpo"} <= set(steps)
    keys = asyncio.run(_artifact_keys())
    assert {"trajlake-rounds", "trajlake-evaluation", "trajlake-adapter", "trajlake-report"} <= keys
    check_summary(result)


def check_summary(result: dict) -> None:
    """summary.json holds the numbers the run returned (and the console printed), night by night."""
    path = Path(result["summary"])
    summary = json.loads(path.read_text())
    assert path == Path(result["lake"]).parent / "summary.json"
    assert (summary["model"], summary["backend"], summary["task"]) == ("tiny", "transformers", "simple")
    published = result["published"]
    assert summary["adapter"] == f"calculator-agent:{published['version']}"
    val = [row for row in result["evaluation"]["table"] if row["kind"] == "val"]
    assert [(s["stage"], s["policy"], s["success"], s["ci"], s["n"]) for s in summary["stages"]] == [
        (r["stage"], r["policy"], r["mean"], list(r["ci"]), r["n"]) for r in val
    ]
    assert [s["stage"] for s in summary["stages"]] == ["base", "sft", "grpo-1"]
    final_vs_sft = next(d for d in val[-1]["differences"] if d["against"] == "sft")
    assert summary["final_minus_sft"] == {
        "mean": final_vs_sft["mean"],
        "ci": list(final_vs_sft["ci"]),
        "n": final_vs_sft["paired_scenarios"],
    }
    captured, second = result["captured"], result["second_batch"]
    assert summary["production"]["before"] == pytest.approx(captured["correct"] / captured["agent_runs"])
    assert summary["production"]["before_policy"] == "production-llm-1"
    assert (summary["production"]["after"], summary["production"]["after_n"]) == (second["success"], 24)
    assert summary["production"]["after_policy"] == "calculator-agent-v1"
    production = summary["production"]
    assert (production["n_before"], production["n_after"]) == (24, 24)
    difference = production["difference"]
    assert difference["mean"] == pytest.approx(production["after"] - production["before"])
    assert difference["ci"][0] <= difference["mean"] <= difference["ci"][1]
    for stage, row in zip(summary["stages"], val, strict=True):
        assert stage["sampled"] == {"success": row["mean"], "ci": list(row["ci"]), "n": row["n"]}
        assert stage["greedy"] == {
            "success": row["greedy"]["mean"],
            "ci": list(row["greedy"]["ci"]),
            "n": row["greedy"]["scenarios"],
        }
    # both nights, each with its gate's decision as the run recorded it
    nights = summary["nights"]
    assert [n["night"] for n in nights] == [1, 2]
    assert nights[0]["decision"] == published["decision"] == result["night1"]["run"].decision
    assert nights[1]["decision"] == result["night2"]["run"].decision
    assert nights[0]["stages"] == summary["stages"] and nights[0]["start"] == "base"
    assert nights[0]["learned_from"] == result["night1"]["run"].learned_from
    assert nights[0]["learned_from"]["scenarios"] > 0
    assert nights[1]["run_id"] == result["night2"]["run"].run_id != nights[0]["run_id"]
    second_val = [
        r for r in (result["night2"].get("evaluation") or {}).get("table", []) if r["kind"] == "val"
    ]
    assert [(s["stage"], s["success"]) for s in nights[1]["stages"]] == [
        (r["stage"], r["mean"]) for r in second_val
    ]
    # every demo step's wall time, and the total at least their sum
    steps = dict(result["timings"])
    assert set(summary["wall_s"]) == {"total", *steps}
    assert all(summary["wall_s"][name] == round(seconds, 1) for name, seconds in steps.items())
    assert summary["wall_s"]["total"] >= round(sum(steps.values()), 1) - 0.1
    assert "night 1" not in summary["wall_s"] and nights[0]["wall_s"]["sft"] > 0
