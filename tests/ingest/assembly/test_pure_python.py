"""The assembler's tests again on its Python source (`TRAJLAKE_PURE_PYTHON=1` at run time), so CI
checks both builds: the compiled one (the suite itself) and the source a contributor edits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ingest.assembly
from flows.cli import app

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

ASSEMBLER_TESTS = [  # relative to tests/ingest
    "assembly/test_assemble.py",
    "assembly/test_assemble_feedback.py",
    "assembly/test_assemble_rebuild.py",
    "assembly/normalize/test_normalize.py",
    "assembly/normalize/test_normalize_genai.py",
    "assembly/normalize/test_normalize_libraries.py",
    "assembly/test_rows.py",
    "assembly/normalize/test_render.py",
    "assembly/test_assembly_mutations.py",
    "frameworks/test_frameworks.py",
    "assembly/test_compiled.py",
]


def test_the_assembler_tests_pass_on_the_python_source() -> None:
    if not ingest.assembly.COMPILED:
        pytest.skip("the suite already runs on the Python source (no compiled modules installed)")
    here = Path(__file__).parents[1]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(str(here / t) for t in ASSEMBLER_TESTS),
        ],
        env={**os.environ, "TRAJLAKE_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]


def test_the_source_build_is_the_one_that_runs() -> None:
    probe = "import ingest.assembly as a; from ingest.assembly import conversation; print(a.COMPILED, a.BUILD, conversation.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "TRAJLAKE_PURE_PYTHON": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.startswith("False Python source") and out.strip().endswith("conversation.py")


def test_trajlake_config_says_which_build_runs() -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["config"])
    assert result.exit_code == 0 and f"# the assembler runs: {ingest.assembly.BUILD}" in result.output
