"""Clear errors from the command line, never a traceback or a silent empty lake (issue 13, #8 and #9).

A `--lake` that is a file is refused by every command; a lake that is not there is
refused by the commands that only read it, naming the path; a writing command creates
a new lake where nothing is yet. Unreadable input files (not UTF-8, JSON nested 10,000
deep) are errors naming the file and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj

pytestmark = pytest.mark.reliability

runner = CliRunner()
DEEP = "[" * 10_000 + "]" * 10_000


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    # An uncaught exception would be result.exception with a traceback; a clean exit is SystemExit.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.fixture
def a_file(tmp_path: Path) -> str:
    path = tmp_path / "not-a-lake"
    path.write_text("hello\n")
    return str(path)


@pytest.mark.parametrize(
    "command",
    [
        ["sql", "SELECT 1"],
        ["tables"],
        ["assemble"],
        ["compact"],
        ["collect", "--port", "1"],
        ["scenarios", "load", "scenarios.jsonl"],
        ["ingest", "langfuse", "--file", "export.jsonl"],
    ],
)
def test_a_lake_path_that_is_a_file_is_refused_by_every_command(command: list[str], a_file: str) -> None:
    for lake in (a_file, f"{a_file}/sub", "/etc/passwd"):
        code, output = invoke(*command, "--lake", lake)
        assert code == 2 and "is a file; a lake is a directory" in output, output


@pytest.mark.parametrize(
    "command",
    [
        ["sql", "SELECT count(*) FROM trajectories"],
        ["tables"],
        ["assemble"],
        # the stages that read what the lake holds: an empty selection or "0 reward rows" would hide the typo
        ["scenarios", "create", "--sql", "SELECT trajectory_id FROM trajectories"],
        ["replay", "--scenarios", "SELECT scenario_id FROM scenarios", "--model", "m"],
        ["score", "--reward", "exact_match"],
        ["train", "sft", "--base-model", "m", "-o", "out"],
        ["train", "grpo", "--base-model", "m", "-o", "out", "--reward", "r"],
    ],
)
def test_reading_a_lake_that_is_not_there_names_the_path(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    code, output = invoke(*command, "--lake", str(missing))
    assert code == 2 and f"no lake at `{missing}`" in output
    code, output = invoke(*command, "--lake", str(tmp_path))  # a folder, but no lake in it
    assert code == 2 and "holds none of the lake's tables" in output
    assert not missing.exists()  # reading created nothing


def test_a_writing_command_starts_a_new_lake(tmp_path: Path) -> None:
    scenarios = tmp_path / "s.jsonl"
    scenarios.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    code, output = invoke("scenarios", "load", str(scenarios), "--lake", str(tmp_path / "new"))
    assert code == 0, output
    assert Lake(str(tmp_path / "new")).has_table("scenarios")


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"\xff\xfe{}\n", "not UTF-8"), (DEEP.encode() + b"\n", "nested too deep")],
)
def test_unreadable_scenario_files_are_errors_with_the_line(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"messages": [{"role": "user", "content": "ok"}]}\n' + content)
    code, output = invoke("scenarios", "load", str(path), "--lake", str(tmp_path / "lake"))
    assert code == 1 and f"{path}:2" in output and needle in output
    assert not Lake(str(tmp_path / "lake")).has_table("scenarios")


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bad.jsonl", b'{"id": "a"}\n\xff\xfe{"a": 1}\n', "line 2: invalid_utf8"),
        ("deep.jsonl", b'{"id": "a"}\n' + DEEP.encode() + b"\n", "line 2: invalid_json"),
        ("deep.json", DEEP.encode(), "line 1: invalid_json: nested too deep"),
        ("bad.json", b'[{"id": "\xff"}]', "line 1: invalid_utf8"),
    ],
)
def test_unreadable_langfuse_exports_are_errors_with_the_line(
    tmp_path: Path, name: str, content: bytes, needle: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, output = invoke(
        "ingest", "langfuse", "--file", str(path), "--lake", str(tmp_path / "lake"), "--no-progress"
    )
    assert code == 2 and needle in output, output  # a bad file is the user's input: exit 2
    assert "nothing written" in output


def test_sql_lake_only_switch_refuses_files_outside_the_lake(
    lake: Lake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    write(lake, "trajectories", [make_traj(0)])
    outside = tmp_path / "notes.csv"
    outside.write_text("a\n1\n")
    query = f"SELECT count(*) AS n FROM read_csv('{outside}')"
    code, output = invoke("sql", query, "--lake", lake.root, "--format", "json")
    assert code == 0 and '"n": 1' in output  # a user's own shell reads local files
    monkeypatch.setenv("TRAJLAKE_LAKE__SQL_LAKE_ONLY", "true")
    try:
        code, output = invoke("sql", query, "--lake", lake.root)
        assert code == 2 and "sql_lake_only" in output and "disabled by configuration" in output
        code, output = invoke(
            "sql", "SELECT count(*) AS n FROM trajectories", "--lake", lake.root, "--format", "json"
        )
        assert code == 0 and '"n": 1' in output
    finally:
        monkeypatch.delenv("TRAJLAKE_LAKE__SQL_LAKE_ONLY")


@pytest.mark.parametrize("field", ["temperature", "num_generations"])
def test_a_grpo_field_the_groups_decide_is_refused_not_ignored(tmp_path: Path, field: str) -> None:
    code, output = invoke(
        "train", "grpo", "--base-model", "m", "-o", str(tmp_path / "o"), "--set", f"{field}=3",
        "--lake", str(tmp_path / "lake"),
    )  # fmt: skip
    assert code == 1 and f"`{field}` is not a setting" in output
    assert not (tmp_path / "o").exists()


def test_a_base_model_that_does_not_load_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write(str(lake), "trajectories", [{**make_traj(i), "has_content": True} for i in range(3)])
    missing = str(tmp_path / "no-such-model")
    code, output = invoke(
        "train", "sft", "--base-model", missing, "-o", str(tmp_path / "o"), "--lake", str(lake)
    )
    assert code == 2 and f"base model `{missing}` cannot be loaded" in output
    assert len(output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # no run folder, no run.json left behind

    # the pipeline refuses it before it rewrites scenarios or trains anything
    config = tmp_path / "trajlake.toml"
    config.write_text(f'[sampler]\nmodel = "{missing}"\n')
    code, output = invoke("pipeline", "--config", str(config), "--lake", str(lake))
    assert code == 2 and "`sampler.model`" in output and f"`{missing}` cannot be loaded" in output
    assert not Lake(str(lake)).has_table("scenarios")


def test_as_of_a_version_the_lake_does_not_have_is_one_line(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write(str(lake), "trajectories", [{**make_traj(0), "has_content": True}])
    for as_of, says in (("trajectories=9999", "the table has versions 0.."), ("nope=1", "not a table")):
        code, output = invoke(
            "train",
            "sft",
            "--base-model",
            "m",
            "-o",
            str(tmp_path / "o"),
            "--as-of",
            as_of,
            "--lake",
            str(lake),
        )
        assert code == 2 and f"--as-of `{as_of.split('=')[0]}" in output and says in output, output
        assert len(output.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
