"""Property test: any mix of writes (with repeated keys) and compactions reads like a dict keyed on the key."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import store
from store.compact import CompactConfig, compact
from tests.store.helpers import make_traj

# One step: write some (id, day, model) rows in one call, or compact (with or without grace).
_write = st.lists(
    st.tuples(st.integers(0, 12), st.integers(0, 2), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=6
)
_step = st.one_of(_write, st.sampled_from(["compact", "compact_now"]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(_step, min_size=1, max_size=7))
def test_views_and_scan_match_a_last_write_wins_model(steps: list[object]) -> None:
    with tempfile.TemporaryDirectory() as root:
        lake = store.Lake(root)
        model: dict[str, tuple[str, int]] = {}
        for step in steps:
            if step == "compact":
                compact(lake, ["trajectories"], config=CompactConfig(grace_seconds=3600))
            elif step == "compact_now":
                compact(lake, ["trajectories"], config=CompactConfig(grace_seconds=0))
            else:
                assert isinstance(step, list)
                store.write(lake, "trajectories", [make_traj(i, model=m, day=d) for i, d, m in step])
                for i, d, m in step:  # within one call, the later row is newer
                    model[f"t{i}"] = (m, d)
            con = store.connect(lake)
            got = con.execute("SELECT trajectory_id, model, day(dt) - 20 FROM trajectories").fetchall()
            con.close()
            assert sorted(got) == sorted((k, m, d) for k, (m, d) in model.items())
            scanned = store.scan(lake, "trajectories").select("trajectory_id", "model").collect().rows()
            assert sorted(scanned) == sorted((k, m) for k, (m, _) in model.items())
