"""`trajlake ingest jsonl` on hostile files (issue 45, item 3): each refused with exit 2 and
`file:line`, nothing written; a re-import that changes nothing commits nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from typer.testing import CliRunner

from flows.cli import app
from flows.commands.import_cmds import jsonl
from ingest.jsonl.lines import DEFAULT_MAX_LINE_BYTES, MAX_DEPTH
from store.catalog.connection import connect
from store.lake import Lake

pytestmark = pytest.mark.reliability

GOOD = {
    "id": "a1",
    "feedback": 1,
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
}
OTHER = {"id": "b2", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


def ingest(lake: Lake, *args: str) -> object:
    return CliRunner().invoke(app, ["ingest", "jsonl", *args, "--lake", lake.root])


def versions(lake: Lake) -> dict[str, int | None]:
    return {
        t: (DeltaTable(lake.table_uri(t)).version() if lake.has_table(t) else None)
        for t in ("trajectories", "rewards")
    }


def refused(lake: Lake, path: Path, line: int, *needles: str, args: tuple[str, ...] = ()) -> None:
    before = versions(lake)
    result = ingest(lake, str(path), *args)
    assert result.exit_code == 2, result.output
    assert f"{path}:{line}" in result.output and "Traceback" not in result.output, result.output
    for needle in needles:
        assert needle in result.output, result.output
    assert len(result.output.strip().splitlines()) <= 2  # one error, not a dump
    assert versions(lake) == before  # nothing written


def test_a_line_nested_100000_deep_is_refused_not_a_traceback(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    deep = '{"messages": [' + "[" * 100_000 + "]" * 100_000 + "]}"
    path.write_text(json.dumps(GOOD) + "\n" + deep + "\n")
    refused(lake, path, 2, f"deeper than {MAX_DEPTH} levels")


def test_nesting_just_over_the_limit_is_refused_at_the_limit_accepted(lake: Lake, tmp_path: Path) -> None:
    inner = {"k": None}
    for _ in range(MAX_DEPTH - 2):  # the line and the chain under `metadata`: exactly MAX_DEPTH levels
        inner = {"k": inner}
    ok = {**GOOD, "metadata": inner}
    over = {**OTHER, "metadata": {"k": inner}}
    (tmp_path / "ok.jsonl").write_text(json.dumps(ok) + "\n")
    assert ingest(lake, str(tmp_path / "ok.jsonl")).exit_code == 0
    (tmp_path / "over.jsonl").write_text(json.dumps(over) + "\n")
    refused(lake, tmp_path / "over.jsonl", 1, "deeper than")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_non_finite_feedback_is_refused(lake: Lake, tmp_path: Path, value: str) -> None:
    path = tmp_path / "nan.jsonl"
    path.write_text(
        json.dumps(OTHER) + "\n" + json.dumps(GOOD).replace('"feedback": 1', f'"feedback": {value}') + "\n"
    )
    refused(lake, path, 2, "finite")


def test_non_finite_numbers_are_refused_anywhere_in_a_line(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "meta.jsonl"
    path.write_text(json.dumps(GOOD)[:-1] + ', "metadata": {"cost": 1e999}}\n')
    refused(lake, path, 1, "out of range")


def test_a_line_over_the_size_limit_is_refused_without_reading_it_whole(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("w") as handle:
        handle.write(json.dumps(GOOD) + "\n")
        handle.write('{"messages": [{"role": "user", "content": "' + "x" * (200 * 1024 * 1024) + '"}]}\n')
    refused(
        lake,
        path,
        2,
        "longer than the limit",
        f"{1024 * 1024:,} bytes",
        args=("--max-line-bytes", str(1024 * 1024)),
    )
    # Memory: a fresh process's peak grows by about the limit, not by the 200 MB line.
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, sys\n"
            "from ingest.jsonl import import_files\n"
            "from ingest.errors import MalformedPayload\n"
            "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "try:\n    import_files(sys.argv[1], [sys.argv[2]])\nexcept MalformedPayload as exc:\n    print(exc)\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)\n",
            lake.root,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = child.stdout.strip().splitlines()
    assert child.returncode == 0 and "longer than the limit of 16,777,216 bytes" in lines[0], child.stderr[
        -800:
    ]
    assert int(lines[-1]) < 100, f"peak RSS grew {lines[-1]} MB reading a 200 MB line with a 16 MiB limit"
    path.unlink()


def test_the_line_limit_is_stated_and_the_same_in_the_cli(lake: Lake) -> None:
    default = jsonl.__defaults__[1] if jsonl.__defaults__ else None  # (lake, max_line_bytes, replace)
    assert default == DEFAULT_MAX_LINE_BYTES == 16 * 1024 * 1024


def test_a_duplicate_id_within_one_file_is_refused_naming_both_lines(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    changed = {**GOOD, "messages": [{"role": "user", "content": "other"}]}
    path.write_text("\n".join(json.dumps(x) for x in (GOOD, OTHER, changed)) + "\n")
    refused(lake, path, 3, "import-a1", f"{path}:1")


def test_a_reimport_of_an_id_with_new_content_is_refused_unless_replace(lake: Lake, tmp_path: Path) -> None:
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps(GOOD) + "\n")
    assert ingest(lake, str(first)).exit_code == 0
    second = tmp_path / "second.jsonl"
    changed = {
        **GOOD,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "CHANGED"}],
    }
    second.write_text(json.dumps(OTHER) + "\n" + json.dumps(changed) + "\n")
    refused(lake, second, 2, "import-a1", "messages", "--replace")
    # Feedback alone changing is a change too.
    third = tmp_path / "third.jsonl"
    third.write_text(json.dumps({**GOOD, "feedback": 0}) + "\n")
    refused(lake, third, 1, "feedback (1.0 -> 0.0)")
    replaced = ingest(lake, str(second), "--replace")
    assert replaced.exit_code == 0, replaced.output
    with connect(lake) as con:
        assert con.execute(
            "SELECT final_output FROM trajectories WHERE trajectory_id = 'import-a1'"
        ).fetchone() == ("CHANGED",)
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (2,)


def test_a_reimport_that_changes_nothing_commits_nothing_and_says_so(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    no_id = {"messages": [{"role": "user", "content": "digest me"}]}  # its id is a digest of the conversation
    path.write_text("\n".join(json.dumps(x) for x in (GOOD, OTHER, no_id)) + "\n")
    first = ingest(lake, str(path))
    assert first.exit_code == 0 and "imported 3 conversations" in first.output, first.output
    before = versions(lake)
    again = ingest(lake, str(path))
    assert again.exit_code == 0, again.output
    assert "nothing to import" in again.output and "3 conversations" in again.output, again.output
    assert "imported" not in again.output
    assert versions(lake) == before  # no new table version
    # One new line among known ones: only it is written.
    path.write_text(path.read_text() + json.dumps({**OTHER, "id": "c3"}) + "\n")
    more = ingest(lake, str(path))
    assert "imported 1 conversations" in more.output and "3 already there" in more.output, more.output
    assert versions(lake)["trajectories"] == (before["trajectories"] or 0) + 1


def test_an_id_in_two_files_is_kept_once_when_alike_and_refused_when_not(lake: Lake, tmp_path: Path) -> None:
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(json.dumps(GOOD) + "\n")
    two.write_text(json.dumps(OTHER) + "\n" + json.dumps(GOOD) + "\n")
    result = ingest(lake, str(one), str(two))
    assert result.exit_code == 0 and "imported 2 conversations" in result.output, result.output
    other = tmp_path / "three.jsonl"
    other.write_text(json.dumps({**GOOD, "messages": [{"role": "user", "content": "not the same"}]}) + "\n")
    fresh = Lake(str(tmp_path / "fresh"))
    result = ingest(fresh, str(one), str(other))
    assert result.exit_code == 2 and f"{other}:1" in result.output and f"{one}:1" in result.output, (
        result.output
    )
    assert not fresh.has_table("trajectories")
