"""Property test: any mix of writes (repeated keys, keys moving partition) and compactions reads
like a dict keyed on the key, through the views, polars and a plain Delta reader."""

from __future__ import annotations

import tempfile

from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.catalog.connection import connect, scan
from store.lake import Lake
from store.maintenance import CompactConfig, compact
from store.writer import write
from tests.store.helpers import make_traj

# One step: write some (id, day, model) rows in one call, or compact (keeping or vacuuming old files).
_write = st.lists(
    st.tuples(st.integers(0, 12), st.integers(0, 2), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=6
)
_step = st.one_of(_write, st.sampled_from(["compact", "compact_vacuum"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=7))
def test_every_reader_matches_a_last_write_wins_model(steps: list[object]) -> None:
    with tempfile.TemporaryDirectory() as root:
        lake = Lake(root)
        model: dict[str, tuple[str, int]] = {}
        for step in steps:
            if step in ("compact", "compact_vacuum"):
                hours = 0 if step == "compact_vacuum" else 168
                compact(lake, CompactConfig(tables=("trajectories",), retention_hours=hours))
            else:
                assert isinstance(step, list)
                write(lake, "trajectories", [make_traj(i, model=m, day=d) for i, d, m in step])
                for i, d, m in step:  # within one call, the later row wins
                    model[f"t{i}"] = (m, d)
            expected = sorted((k, m, d) for k, (m, d) in model.items())
            con = connect(lake)
            got = con.execute("SELECT trajectory_id, model, day(dt) - 20 FROM trajectories").fetchall()
            con.close()
            assert sorted(got) == expected
            scanned = scan(lake, "trajectories").select("trajectory_id", "model").collect().rows()
            assert sorted(scanned) == sorted((k, m) for k, m, _ in expected)
            if lake.has_table("trajectories"):  # a compaction of a table never written is a no-op
                plain = DeltaTable(lake.table_uri("trajectories")).to_pyarrow_table(
                    columns=["trajectory_id", "model", "dt"]
                )
                rows = sorted((r["trajectory_id"], r["model"], r["dt"].day - 20) for r in plain.to_pylist())
                assert rows == expected
