"""The `trajlake` entry point makes OpenMP spin briefly, then wait passively, unless the user chose.

Busy-waiting OpenMP threads slowed a decode step ~10x on a shared CPU, and a thread woken at every
parallel region cost a decode loop ~20% idle (README: Performance). The variables only count if
they are set before torch's OpenMP runtime loads, so the entry point sets them first, and
importing the CLI must not load torch.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import flows.cli


def _run_main(monkeypatch: pytest.MonkeyPatch) -> tuple[str | None, str | None]:
    seen: list[tuple[str | None, str | None]] = []
    monkeypatch.setattr(
        flows.cli,
        "app",
        lambda: seen.append((os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"))),
    )
    flows.cli.main()
    return seen[0]


def test_the_entry_point_spins_briefly_then_waits_passively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert _run_main(monkeypatch) == ("PASSIVE", str(flows.cli.SPIN_COUNT))
    assert 0 < flows.cli.SPIN_COUNT <= 10_000  # at most ~100 us: libgomp's own default spins ~3 ms


@pytest.mark.parametrize(
    ("policy", "spins"), [("ACTIVE", None), ("PASSIVE", None), (None, "0"), ("PASSIVE", "200000")]
)
def test_what_the_user_set_is_kept(
    policy: str | None, spins: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in (("OMP_WAIT_POLICY", policy), ("GOMP_SPINCOUNT", spins)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert _run_main(monkeypatch) == (policy, spins)


def test_importing_the_cli_loads_no_torch() -> None:
    code = "import sys, flows.cli; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
