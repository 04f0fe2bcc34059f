"""Every bad input to the real CLI (a subprocess, as a user runs it) is one line naming what
and where, exit 2, no traceback (issue 55 item 5): each case here was a traceback (up to
3,000 lines), a wrong exit code, a wrong answer (a port bound modulo 65536) or accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # `{lake}` and `{dir}` are filled in
    words: str  # in the one line
    toml: str | None = None  # the trajlake.toml of the folder it runs in
    file: tuple[str, str] | None = None  # (name, text) written into that folder


DEEP_TOML = "x = " + "[" * 5000 + "1" + "]" * 5000 + "\n"
CASES = [
    Case("deep-toml-sql", ("sql", "SELECT 1", "--lake", "{lake}"), "nested over", toml=DEEP_TOML),
    Case("deep-toml-check", ("config", "--check"), "nested over", toml=DEEP_TOML),
    Case("blank-sql-reward", ("score", "--sql-reward", "  ", "--lake", "{lake}"), "--sql-reward"),
    Case("since", ("report", "--since", "yesterday-ish", "--lake", "{lake}"), "--since"),
    Case(
        "redact-function",
        ("collect", "--redact-function", "nosuch.module:fn", "--lake", "{lake}"),
        "--redact-function",
    ),
    Case("serve-model", ("serve-sampler", "--model", "/nonexistent"), "/nonexistent"),
    Case(
        "replay-model",
        ("replay", "--model", "/nonexistent", "--scenarios", "SELECT 1", "--lake", "{lake}"),
        "/nonexistent",
    ),
    Case("update-extensions", ("sql", "UPDATE EXTENSIONS", "--lake", "{lake}"), "read-only"),
    Case("collect-port", ("collect", "--port", "99999", "--lake", "{lake}"), "65535"),
    Case("collect-host", ("collect", "--host", "not a host!", "--lake", "{lake}"), "host"),
    Case("serve-port", ("serve-sampler", "--model", "/nonexistent", "--port", "-1"), "--port"),
    Case("sql-timeout", ("config", "--check"), "sql_timeout_s", toml="[lake]\nsql_timeout_s = -5\n"),
    Case("sql-memory", ("config", "--check"), "sql_memory_limit", toml='[lake]\nsql_memory_limit = "lots"\n'),
    Case(
        "group-size",
        ("config", "--check"),
        "group_size",
        toml="[replay]\ngroup_size = 99999999999999999999\n",
    ),
    *(
        Case(
            f"jsonl-id-{kind}",
            ("ingest", "jsonl", "{dir}/c.jsonl", "--lake", "{lake}"),
            "c.jsonl:1",
            file=("c.jsonl", json.dumps({"id": value, "messages": MESSAGES}) + "\n"),
        )
        for kind, value in (
            ("object", {"a": 1}),
            ("long", "x" * 10_000),
            ("dots", "../../etc/passwd"),
            ("nul", "a\0b"),
        )
    ),
]


def trajlake(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJLAKE_")}
    env.update(PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-2000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], lines[:5]


@pytest.fixture(scope="module")
def a_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = Lake(str(tmp_path_factory.mktemp("one-line") / "lake"))
    write(lake, "trajectories", [make_traj(0)])
    return lake.root


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case: Case, a_lake: str, tmp_path: Path) -> None:
    if case.toml is not None:
        (tmp_path / "trajlake.toml").write_text(case.toml)
    if case.file is not None:
        (tmp_path / case.file[0]).write_text(case.file[1])
    args = [a.format(lake=a_lake, dir=tmp_path) for a in case.args]
    before = sorted(Path(a_lake).rglob("*"))
    assert_one_line(trajlake(args, tmp_path), case.words)
    assert sorted(Path(a_lake).rglob("*")) == before  # nothing was written


def test_a_zip_bomb_is_refused_before_it_is_read(a_lake: str, tmp_path: Path) -> None:
    """A Langfuse export zip declaring 512 MiB from well under 1 MiB took 198 s to refuse."""
    bomb = tmp_path / "export.zip"
    line = b'{"id": "t", "name": "x"}\n'
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive, archive.open("e.jsonl", "w") as member:
        block = line * (MIB // len(line))
        for _ in range(512):
            member.write(block)
    assert bomb.stat().st_size < 2 * MIB
    start = time.monotonic()
    result = trajlake(
        ["ingest", "langfuse", "--file", str(bomb), "--lake", a_lake, "--no-progress"], tmp_path
    )
    assert_one_line(result, "compression bomb")
    assert "declares" in result.stderr
    assert time.monotonic() - start < 60  # an interpreter's start; not 198 s of reading
