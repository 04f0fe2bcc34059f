"""Commands that need no model start without the trainers' libraries (issue 57: `trajlake --help`
took 43 s importing torch, transformers and PEFT).

Each check runs the real CLI in a fresh interpreter and reads which modules it imported;
the time it takes is bench/startup.py's to print, not a test's to assert.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from flows.cli import SUMMARIES, TrajlakeGroup, app
from flows.commands import LazyGroup
from flows.commands.train_cmds import TrainGroup
from flows.config.lake import load_lake
from flows.config.lake_sources import read_lake
from flows.config.sections import LakeSettings
from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj

ROOT = Path(__file__).resolve().parents[2]
# What training, the flows' runner and the report's plots need, and no other command.
HEAVY = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "prefect", "matplotlib")
# Their options are TRL's config fields: showing them imports TRL.
TRL_OPTIONS = {("train", "sft"), ("train", "grpo")}

# Runs `trajlake ARGV` for each ARGV of the JSON list in argv[1], in this one interpreter, and
# prints after each the exit code and the heavy modules imported so far, as one JSON line.
RUNNER = """
import contextlib, io, json, sys
from flows.cli import main
heavy, ran = json.loads(sys.argv[2]), []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["trajlake", *argv]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code or 0
    ran.append({"argv": argv, "code": code, "heavy": sorted(m for m in heavy if m in sys.modules)})
print(json.dumps(ran))
"""


def run_in_one_process(*argvs: list[str], heavy: tuple[str, ...] = HEAVY) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, json.dumps(argvs), json.dumps(heavy)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ran: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return ran


def command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command below `command`, hidden ones included, but for those whose options are TRL's."""
    yield path
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            if (*path, name) not in TRL_OPTIONS:
                yield from command_paths(command.get_command(ctx, name), (*path, name))


def test_trajlake_help_imports_no_command_and_no_heavy_library() -> None:
    (ran,) = run_in_one_process(["--help"])
    assert ran["code"] == 0 and ran["heavy"] == [], ran


def test_every_help_but_trls_options_imports_no_heavy_library() -> None:
    paths = list(command_paths(typer.main.get_command(app)))
    assert {("sql",), ("collect",), ("train",), ("publish",), ("scenarios", "create")} <= set(paths)
    ran = run_in_one_process(*([*path, "--help"] for path in paths))
    assert [r["code"] for r in ran] == [0] * len(paths)
    # modules only add up in one interpreter: the first command that imported one is the culprit
    first = next((r for r in ran if r["heavy"]), None)
    assert first is None, f"`trajlake {' '.join(first['argv'])}` imported {first['heavy']}"


def test_sql_imports_no_heavy_library(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    # nor pandas (pyarrow builds it in for arrays made from Python objects) nor polars
    (ran,) = run_in_one_process(
        ["sql", "SELECT count(*) FROM trajectories", "--lake", lake.root], heavy=(*HEAVY, "pandas", "polars")
    )
    assert ran["code"] == 0 and ran["heavy"] == [], ran


@pytest.mark.slow  # a real collector process, until it listens (~4 s)
def test_collect_serves_without_a_heavy_library(tmp_path: Path) -> None:
    # The real collector, until it listens; `-X importtime` names every module it imported.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = ["-X", "importtime", "-m", "flows.cli", "collect", "--lake", str(tmp_path / "lake")]
    collector = subprocess.Popen(
        [sys.executable, *argv, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE,
        text=True,
    )
    imported, listening, deadline = set(), False, time.monotonic() + 120
    try:
        assert collector.stderr is not None
        for line in collector.stderr:
            if line.startswith("import time:"):
                imported.add(line.rpartition("|")[2].strip().partition(".")[0])
            elif "listening on" in line:
                listening = True
                break
            assert time.monotonic() < deadline, "the collector did not start"
    finally:
        collector.terminate()
        collector.wait(timeout=60)
    assert listening
    assert "uvicorn" in imported  # what it did import is read
    assert sorted(imported & set(HEAVY)) == []


@pytest.mark.parametrize("group", [TrajlakeGroup, TrainGroup])
def test_each_listed_summary_is_the_commands_own(group: type[LazyGroup]) -> None:
    # `trajlake --help` lists the summaries instead of loading the commands: they must say what
    # the commands' own help says, and list the commands a group has, hidden ones apart.
    parent = typer.main.get_command(app)
    command = parent if group is TrajlakeGroup else parent.get_command(parent.context_class(parent), "train")
    ctx = command.context_class(command)
    assert set(group.lazy) == set(group.summaries) | group.unlisted
    for name in group.lazy:
        loaded = command.get_command(ctx, name)
        assert loaded.hidden == (name in group.unlisted), name
        if name in group.summaries:
            assert group.summaries[name] == loaded.get_short_help_str(limit=10_000), name
    assert SUMMARIES is TrajlakeGroup.summaries


def test_sql_with_nothing_to_read_loads_no_settings_library(lake: Lake) -> None:
    """With no trajlake.toml and no `TRAJLAKE_LAKE*` variable, `[lake]` is its declared defaults:
    `trajlake sql` imports neither pydantic-settings nor fsspec, nor pyarrow.compute (together
    half its start-up beyond duckdb and pyarrow; bench/startup.py)."""
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    (ran,) = run_in_one_process(
        ["sql", "SELECT count(*) FROM trajectories", "--lake", lake.root],
        heavy=("pydantic_settings", "fsspec", "pyarrow.compute"),
    )
    assert ran["code"] == 0 and ran["heavy"] == [], ran


def test_sql_that_names_no_table_reads_no_table_log_and_validates_nothing(lake: Lake) -> None:
    """`SELECT 1` binds no view (`store.catalog.query_views`): no delta-rs, no Arrow file system;
    and no pydantic, which typer from 0.29 on and the settings' option machinery would load."""
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    (ran,) = run_in_one_process(
        ["sql", "SELECT 1", "--lake", lake.root],
        heavy=("deltalake", "pyarrow.fs", "pydantic", "pyarrow.dataset"),
    )
    assert ran["code"] == 0 and ran["heavy"] == [], ran


@pytest.mark.parametrize(
    ("file_text", "variables"),
    [
        ("", {}),
        ("[lake]\nsql_timeout_s = 5\nsql_lake_only = true\n", {}),
        ("", {"TRAJLAKE_LAKE__SQL_TIMEOUT_S": "7"}),
        ("", {"trajlake_lake__sql_memory_limit": "1GB"}),  # pydantic-settings reads variables case-blind
        ("[lake]\nsql_timeout_s = 5\n", {"TRAJLAKE_LAKE": "/elsewhere", "TRAJLAKE_LAKE__SQL_TIMEOUT_S": "9"}),
    ],
)
def test_lake_settings_are_the_same_read_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_text: str, variables: dict[str, str]
) -> None:
    """`load_lake` skips pydantic-settings only when it would read nothing: what it returns is
    always what pydantic-settings reads from the same sources."""
    monkeypatch.chdir(tmp_path)
    if file_text:
        (tmp_path / "trajlake.toml").write_text(file_text)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    file = tmp_path / "trajlake.toml" if file_text else None
    assert load_lake() == read_lake(file)
    if not file_text and not variables:
        assert load_lake() == LakeSettings()
    else:
        assert load_lake() != LakeSettings()


def test_collect_help_reads_the_settings_without_other_sections_libraries() -> None:
    """`collect --help` shows the settings in effect; reading them imports each section's declaration
    alone, not the judge's client, Langfuse's, polars or pandas (the packages import nothing,
    `[retention]` lives apart from the erasure's steps, and polars loads with the first write)."""
    (ran,) = run_in_one_process(["collect", "--help"], heavy=("openai", "langfuse", "polars", "pandas"))
    assert ran["code"] == 0 and ran["heavy"] == [], ran
