"""`trajlake compact --retention-hours 0` says what it risks before it vacuums."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from flows.cli import app
from store.lake import Lake
from store.writer import write
from tests.store.helpers import make_traj


@pytest.mark.parametrize(("hours", "warned"), [("0", True), ("168", False)])
def test_a_zero_retention_warns_that_readers_can_fail(lake: Lake, hours: str, warned: bool) -> None:
    for i in range(3):  # three commits: files for the compaction to replace and the vacuum to delete
        write(lake, "trajectories", [make_traj(i)])
    result = CliRunner().invoke(app, ["compact", "--lake", lake.root, "--retention-hours", hours])
    assert result.exit_code == 0, result.output
    assert ("vacuums replaced files at once" in result.output) is warned
    assert ("No files found" in result.output) is warned
