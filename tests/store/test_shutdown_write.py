"""A write from an `atexit` hook (where OTel exporters flush) still commits its rows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import store


def test_write_during_interpreter_shutdown_commits(lake: store.Lake) -> None:
    script = textwrap.dedent(
        f"""
        import atexit, store
        rows = [{{"run_id": "at-exit", "step": i, "stage": "sft"}} for i in range(3)]
        atexit.register(lambda: store.write({lake.root!r}, "runs", rows))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    con = store.connect(lake)
    assert con.execute("SELECT count(*) FROM runs WHERE run_id = 'at-exit'").fetchone()[0] == 3
