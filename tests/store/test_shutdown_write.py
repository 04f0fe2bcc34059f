"""A write from an `atexit` hook (where OTel exporters flush) still commits its rows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from store.catalog.connection import connect
from store.lake import Lake


def test_write_during_interpreter_shutdown_commits(lake: Lake) -> None:
    script = textwrap.dedent(
        f"""
        import atexit
        from store.writer import write
        rows = [{{"run_id": "at-exit", "step": i, "stage": "sft"}} for i in range(3)]
        atexit.register(lambda: write({lake.root!r}, "runs", rows))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    con = connect(lake)
    assert con.execute("SELECT count(*) FROM runs WHERE run_id = 'at-exit'").fetchone()[0] == 3
