"""The `trajlake` entry point makes OpenMP wait passively unless the user chose a policy.

Busy-waiting OpenMP threads slowed a decode step ~10x on a shared CPU (README: Performance). The
variable only counts if it is set before torch's OpenMP runtime loads, so the entry point sets it
first, and importing the CLI must not load torch.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import flows.cli


def _run_main(monkeypatch: pytest.MonkeyPatch) -> str | None:
    seen: list[str | None] = []
    monkeypatch.setattr(flows.cli, "app", lambda: seen.append(os.environ.get("OMP_WAIT_POLICY")))
    flows.cli.main()
    return seen[0]


def test_the_entry_point_waits_passively_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _run_main(monkeypatch) == "PASSIVE"


def test_a_policy_the_user_set_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert _run_main(monkeypatch) == "ACTIVE"


def test_importing_the_cli_loads_no_torch() -> None:
    code = "import sys, flows.cli; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
