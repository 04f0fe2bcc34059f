"""The group-sampling stage: token-exact groups on the real tiny model, resumability after a kill, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj
from tests.training.helpers import TOOLS, FailingSampler, ScriptedSampler, calculator_script, make_trajectory
from training.replay.errors import ReplayError
from training.replay.rollout.loop import RolloutLimits
from training.replay.rollout.openai_app import LoopbackServer, create_app
from training.replay.rollout.tools import make_tools
from training.replay.rows import group_id_for
from training.replay.samplers import make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams
from training.replay.scenario_io import create_scenarios, load_scenarios
from training.replay.stage import ReplayConfig, ReplaySetupError, replay, replay_passes

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

REPO = Path(__file__).resolve().parents[3]


def _load(lake: Lake, tmp_path: Path, count: int = 3) -> None:
    path = tmp_path / "scenarios.jsonl"
    lines = [
        {
            "messages": [{"role": "user", "content": f"What is {i} + {i * 3}?"}],
            "tools": TOOLS,
            "expected": {"answer": 4 * i},
        }
        for i in range(count)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    load_scenarios(lake, path)


def _rows(lake: Lake, where: str = "true") -> list[dict]:
    con = connect(lake)
    return (
        con.sql(f"SELECT * FROM trajectories WHERE {where} ORDER BY trajectory_id")
        .to_arrow_table()
        .to_pylist()
    )


def test_tiny_model_groups_are_complete_and_token_exact(lake: Lake, tmp_path: Path, tiny_model: Path) -> None:
    _load(lake, tmp_path)
    sampler = make_sampler("transformers", str(tiny_model))
    config = ReplayConfig(group_size=3, sampling=SamplingParams(max_tokens=12, seed=0))
    result = replay(lake, "SELECT scenario_id FROM scenarios", sampler, config, progress=False)
    assert len(result.group_ids) == 3 and result.failed == [] and result.skipped_group_ids == []
    rows = _rows(lake)
    assert len(rows) == 9
    tokenizer = sampler.tokenizer
    for row in rows:
        assert (
            row["source"] == "replay" and row["policy"] == tiny_model.name and row["model"] == str(tiny_model)
        )  # the base model is named by its folder's name; the path stays in `model`
        assert row["group_id"] == group_id_for(
            row["scenario_id"], tiny_model.name, "default", 3, config.sampling
        )
        assert json.loads(row["tools"]) == TOOLS
        meta = json.loads(row["metadata"])
        assert meta["backend"] == "transformers" and meta["expected"]["answer"] % 4 == 0
        # what other stages read back, in typed columns only (no JSON copy in `metadata`)
        assert row["replay_run"] == "default" and row["scenario_split"] in ("train", "val")
        assert not {"run", "split", "sampling"} & set(meta)
        assert row["sampling"] == {
            "temperature": 1.0,
            "top_p": 1.0,
            "top_k": 0,
            "max_tokens": 12,
            "seed": 0,
            "stop_token_ids": [],
        }
        assert row["turns"], "every replayed trajectory has token data"
        (turn,) = row["turns"]  # an untrained model never writes a valid tool call here
        ids = turn["completion_token_ids"]
        assert len(turn["logprobs"]) == len(ids) >= 1
        assert row["output_tokens"] == len(ids) and row["input_tokens"] == len(turn["prompt_token_ids"])
        # The prompt is the scenario rendered with the template; the completion decodes to the stored text.
        assert tokenizer.decode(turn["prompt_token_ids"]).endswith("<|im_start|>assistant\n")
        assistant = row["messages"][-1]
        assert assistant["role"] == "assistant"
        if turn["finish_reason"] == "length":
            assert row["status"] == "truncated" and len(ids) == 12
            assert tokenizer.decode(ids, skip_special_tokens=False) == assistant["content"]
        else:
            assert ids[-1] == tokenizer.eos_token_id
            assert assistant["content"] in tokenizer.decode(ids[:-1], skip_special_tokens=False)
    groups = {r["group_id"] for r in rows}
    assert groups == set(result.group_ids)


def test_an_evaluations_sampled_and_greedy_passes_share_batches(
    lake: Lake, tmp_path: Path, tiny_model: Path
) -> None:
    """`replay_passes`: the sampled groups and the greedy samples of the same scenarios go through
    one sampler at once (their requests in the same batches) and write what each pass writes
    alone: the same groups, the same tokens."""
    _load(lake, tmp_path, count=4)
    sampled = ReplayConfig(
        group_size=2, run="eval", sampling=SamplingParams(max_tokens=10, temperature=0.8, seed=0)
    )
    greedy = ReplayConfig(
        group_size=1, run="eval", sampling=SamplingParams(max_tokens=10, temperature=0.0, seed=0), greedy=True
    )
    sampler = make_sampler("transformers", str(tiny_model))
    batches: list[set[float]] = []
    stream = sampler.stream

    def recording(requests: list[tuple[int, SampleRequest]], more: Any, deliver: Any) -> None:
        batches.append({r.params.temperature for _, r in requests})
        stream(requests, more, deliver)

    sampler.stream = recording  # type: ignore[method-assign]
    together = replay_passes(lake, "SELECT scenario_id FROM scenarios", sampler, [sampled, greedy])
    assert [len(r.group_ids) for r in together] == [4, 4] and not any(r.failed for r in together)
    assert {0.0, 0.8} in batches  # greedy and sampled rows decoded in one batch

    alone = Lake(str(tmp_path / "alone"))
    _load(alone, tmp_path, count=4)
    for config in (sampled, greedy):
        replay(
            alone,
            "SELECT scenario_id FROM scenarios",
            make_sampler("transformers", str(tiny_model)),
            config,
            progress=False,
        )

    def tokens(where: Lake) -> dict[str, list[int]]:
        return {row["trajectory_id"]: row["turns"][0]["completion_token_ids"] for row in _rows(where)}

    assert tokens(lake) == tokens(alone)
    assert len(tokens(lake)) == 4 * 2 + 4


def test_rerun_skips_complete_groups_and_new_run_name_samples_new_ones(
    lake: Lake, tmp_path: Path, tiny_model: Path
) -> None:
    _load(lake, tmp_path, count=2)
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = make_tools(["tests.training.helpers:calculator"])
    config = ReplayConfig(group_size=2)
    first = replay(lake, "SELECT scenario_id FROM scenarios", sampler, config, tools=tools, progress=False)
    again = replay(lake, "SELECT scenario_id FROM scenarios", sampler, config, tools=tools, progress=False)
    assert again.group_ids == [] and sorted(again.skipped_group_ids) == sorted(first.group_ids)
    other = replay(
        lake,
        "SELECT scenario_id FROM scenarios",
        sampler,
        ReplayConfig(group_size=2, run="r2"),
        tools=tools,
        progress=False,
    )
    assert len(other.group_ids) == 2 and not set(other.group_ids) & set(first.group_ids)
    rows = _rows(lake)
    assert len(rows) == 8
    for (
        row
    ) in rows:  # the scripted agent calls the calculator, then answers: two turns, each extending the last
        assert row["status"] == "ok" and row["final_output"] == 'The answer is {"result": 84}.'
        first_turn, second_turn = row["turns"]
        head = first_turn["prompt_token_ids"] + first_turn["completion_token_ids"]
        assert second_turn["prompt_token_ids"][: len(head)] == head
        assert [m["role"] for m in row["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_backend_failure_writes_no_group_and_rerun_retries(
    lake: Lake, tmp_path: Path, tiny_model: Path
) -> None:
    _load(lake, tmp_path, count=3)
    config = ReplayConfig(group_size=2, concurrency=1)
    broken = FailingSampler(str(tiny_model), calculator_script, "0 + 0")  # one scenario's question
    result = replay(lake, "SELECT scenario_id FROM scenarios", broken, config, progress=False)
    assert len(result.group_ids) == 2 and len(result.failed) == 1
    assert "backend went away" in result.failed[0][1]
    assert len(_rows(lake)) == 4
    healthy = ScriptedSampler(str(tiny_model), calculator_script)
    retry = replay(lake, "SELECT scenario_id FROM scenarios", healthy, config, progress=False)
    assert len(retry.group_ids) == 1 and len(retry.skipped_group_ids) == 2
    assert len(_rows(lake)) == 6


def test_user_rollout_function_through_replay(lake: Lake, tmp_path: Path, tiny_model: Path) -> None:
    _load(lake, tmp_path, count=2)
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    result = replay(
        lake,
        "SELECT scenario_id FROM scenarios",
        sampler,
        ReplayConfig(group_size=2),
        rollout="tests.training.replay.rollout.user_agents:async_agent",
        progress=False,
    )
    assert len(result.group_ids) == 2
    for row in _rows(lake):
        assert row["status"] == "ok" and len(row["turns"]) == 2
        assert (
            json.loads(row["metadata"])["tools"]
            == "rollout:tests.training.replay.rollout.user_agents:async_agent"
        )


_WORKER = """
import sys
from tests.training.helpers import ScriptedSampler, calculator_script
from training.replay.stage import ReplayConfig, replay
sampler = ScriptedSampler(sys.argv[2], calculator_script, delay_s=0.4)
replay(sys.argv[1], "SELECT scenario_id FROM scenarios", sampler,
       ReplayConfig(group_size=3, concurrency=1, flush_groups=1), progress=False)
"""


def test_resumes_after_kill_without_half_groups(lake: Lake, tmp_path: Path, tiny_model: Path) -> None:
    _load(lake, tmp_path, count=6)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", _WORKER, lake.root, str(tiny_model)], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            done = connect(lake).execute("SELECT count(DISTINCT group_id) FROM trajectories").fetchone()[0]
            if done >= 2:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the worker finished before it could be killed; slow it down"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    con = connect(lake)
    sizes = [r[0] for r in con.execute("SELECT count(*) FROM trajectories GROUP BY group_id").fetchall()]
    assert 2 <= len(sizes) < 6 and set(sizes) == {3}  # killed mid-run: only whole groups on disk
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    result = replay(
        lake,
        "SELECT scenario_id FROM scenarios",
        sampler,
        ReplayConfig(group_size=3, concurrency=1),
        progress=False,
    )
    assert len(result.skipped_group_ids) == len(sizes) and len(result.group_ids) == 6 - len(sizes)
    sizes = [
        r[0] for r in connect(lake).execute("SELECT count(*) FROM trajectories GROUP BY group_id").fetchall()
    ]
    assert sorted(sizes) == [3] * 6


def test_cli_scenarios_replay_and_sql_show_complete_groups(lake: Lake, tiny_model: Path) -> None:
    write(lake, "trajectories", [make_trajectory("prod-1"), make_trajectory("prod-2")])
    runner = CliRunner()
    out = runner.invoke(
        app, ["scenarios", "create", "--sql", "SELECT trajectory_id FROM trajectories", "--lake", lake.root]
    )
    assert out.exit_code == 0, out.output
    assert "wrote 2 scenarios" in out.output
    args = [
        "replay",
        "--scenarios",
        "SELECT scenario_id FROM scenarios",
        "--model",
        str(tiny_model),
        "-g",
        "2",
    ]
    out = runner.invoke(app, [*args, "--max-tokens", "8", "--lake", lake.root])
    assert out.exit_code == 0, out.output
    assert "wrote 2 groups (4 trajectories" in out.output
    query = (
        "SELECT group_id, count(*) AS n, min(len(turns)) AS min_turns, "
        "min(len(turns[1].completion_token_ids)) AS min_tokens, "
        "bool_and(len(turns[1].logprobs) = len(turns[1].completion_token_ids)) AS aligned "
        "FROM trajectories WHERE source = 'replay' GROUP BY group_id"
    )
    out = runner.invoke(app, ["sql", query, "--format", "json", "--lake", lake.root])
    assert out.exit_code == 0, out.output
    groups = json.loads(out.output)
    assert len(groups) == 2
    assert all(g["n"] == 2 and g["min_turns"] >= 1 and g["min_tokens"] >= 1 and g["aligned"] for g in groups)
    out = runner.invoke(app, [*args, "--lake", lake.root])
    assert out.exit_code == 0 and "skipped 2 complete groups" in out.output


def test_cli_errors_are_clear(lake: Lake, tiny_model: Path) -> None:
    runner = CliRunner()
    write(lake, "trajectories", [make_traj(0)])  # a lake, but no scenario in it
    out = runner.invoke(
        app,
        [
            "replay",
            "--scenarios",
            "SELECT scenario_id FROM scenarios",
            "--model",
            str(tiny_model),
            "--lake",
            lake.root,
        ],
    )
    assert out.exit_code == 1 and "returned no scenarios" in out.output
    out = runner.invoke(
        app,
        [
            "replay",
            "--scenarios",
            "SELECT 1",
            "--model",
            str(tiny_model),
            "--backend",
            "tgi",
            "--lake",
            lake.root,
        ],
    )
    message = " ".join(out.output.split())
    assert out.exit_code == 2 and "'tgi' is not one of 'transformers', 'vllm-server', 'vllm'" in message


def test_scenarios_from_trajectories_replay_with_recorded_tools(lake: Lake, tiny_model: Path) -> None:
    write(lake, "trajectories", [make_trajectory("prod-1")])
    create_scenarios(lake, "SELECT trajectory_id FROM trajectories")
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    replay(lake, "SELECT scenario_id FROM scenarios", sampler, ReplayConfig(group_size=2), progress=False)
    for row in _rows(lake, "source = 'replay'"):  # the recorded production result answers the replayed call
        assert row["messages"][3]["content"] == '{"result": 84}' and row["messages"][3]["is_error"] is False
        assert row["final_output"] == 'The answer is {"result": 84}.'


def test_multi_turn_replay_over_the_vllm_protocol(lake: Lake, tmp_path: Path, tiny_model: Path) -> None:
    """vllm-server backend end to end: token-id prompts over loopback HTTP, tools, groups in the lake."""
    _load(lake, tmp_path, count=2)
    server_side = ScriptedSampler(str(tiny_model), calculator_script)
    with (
        LoopbackServer(create_app(server_side)) as url,
        make_sampler("vllm-server", "served-tiny", tokenizer=str(tiny_model), base_url=url) as sampler,
    ):
        result = replay(
            lake,
            "SELECT scenario_id FROM scenarios",
            sampler,
            ReplayConfig(group_size=3),
            tools=make_tools(["tests.training.helpers:calculator"]),
            progress=False,
        )
    assert len(result.group_ids) == 2 and result.failed == []
    assert [r.n for r in server_side.requests].count(3) == 2  # one n=G request per scenario's first turn
    for row in _rows(lake):
        assert row["policy"] == "served-tiny" and json.loads(row["metadata"])["backend"] == "vllm-server"
        first_turn, second_turn = row["turns"]
        head = first_turn["prompt_token_ids"] + first_turn["completion_token_ids"]
        assert second_turn["prompt_token_ids"][: len(head)] == head
        assert row["final_output"] == 'The answer is {"result": 84}.'


@pytest.mark.parametrize(
    ("build", "name", "message"),
    [
        (lambda: ReplayConfig(group_size=1), "group_size", "must be >= 2"),
        (lambda: ReplayConfig(concurrency=0), "concurrency", "must be >= 1"),
        (lambda: ReplayConfig(sampling=SamplingParams(temperature=0)), "sampling.temperature", "must be > 0"),
        (lambda: SamplingParams(top_p=0), "top_p", "in (0, 1]"),
        (lambda: RolloutLimits(max_turns=0), "max_turns", "must be >= 1"),
    ],
)
def test_each_setting_is_checked_where_it_is_declared(build: Any, name: str, message: str) -> None:
    with pytest.raises(ReplayError) as info:
        build()
    assert info.value.field == name and message in str(info.value)  # type: ignore[attr-defined]


def test_a_new_sampling_distribution_samples_new_groups_and_a_new_seed_does_not() -> None:
    def gid(**sampling: object) -> str:
        return group_id_for("sc", "model", "round-1", 4, SamplingParams(**sampling))  # type: ignore[arg-type]

    assert gid(temperature=0.8) != gid(temperature=1.0)  # else GRPO would reuse groups of the old one
    assert gid(temperature=0.8, seed=1) == gid(temperature=0.8, seed=2)  # a re-run resumes
    assert gid() == group_id_for("sc", "model", "round-1", 4)  # no distribution given: the default's


def test_a_rerun_resumes_groups_found_by_their_columns_whatever_their_id(
    lake: Lake, tmp_path: Path, tiny_model: Path
) -> None:
    # Groups an older trajlake sampled at the default distribution have ids hashed without it;
    # a re-run finds them by scenario, policy, run, size and `sampling` and samples nothing.
    _load(lake, tmp_path, count=2)
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    tools = make_tools(["tests.training.helpers:calculator"])
    config = ReplayConfig(group_size=2)
    first = replay(lake, "SELECT scenario_id FROM scenarios", sampler, config, tools=tools, progress=False)
    older = Lake(str(tmp_path / "older"))
    _load(older, tmp_path, count=2)
    renamed = {g: f"g-older{i:015d}" for i, g in enumerate(first.group_ids)}
    write(
        older,
        "trajectories",
        [
            {
                **{k: v for k, v in row.items() if k != "_written_at"},
                "group_id": renamed[row["group_id"]],
                "trajectory_id": row["trajectory_id"].replace(row["group_id"], renamed[row["group_id"]]),
            }
            for row in _rows(lake)
        ],
    )
    again = replay(older, "SELECT scenario_id FROM scenarios", sampler, config, tools=tools, progress=False)
    assert again.group_ids == [] and sorted(again.skipped_group_ids) == sorted(renamed.values())
    hotter = ReplayConfig(group_size=2, sampling=SamplingParams(temperature=0.7))
    other = replay(older, "SELECT scenario_id FROM scenarios", sampler, hotter, tools=tools, progress=False)
    assert len(other.group_ids) == 2 and other.skipped_group_ids == []  # another distribution: new groups


def test_only_an_evaluations_greedy_replay_may_sample_one_answer_at_temperature_0() -> None:
    import dataclasses

    greedy = ReplayConfig(group_size=1, sampling=SamplingParams(temperature=0.0), greedy=True)
    assert greedy.group_size == 1
    with pytest.raises(ReplaySetupError, match="group_size"):  # GRPO's groups still need two
        ReplayConfig(group_size=1, sampling=SamplingParams(temperature=0.0))
    with pytest.raises(ReplaySetupError, match="temperature"):
        dataclasses.replace(greedy, sampling=SamplingParams(temperature=0.7))
