"""Columns added to a table go after `_written_at`: delta-rs reads file statistics back for the
first 32 leaf columns only, whatever `delta.dataSkippingStatsColumns` names, and the typed
columns of issue 57 (added before `_written_at`) cost `trajectories` and `runs` theirs: `trajlake
tables` lost `newest_data` and the writer's MERGE its file pruning. A table an older trajlake
created gets the same layout as a new one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from store.catalog.versions import table_stats
from store.keys import merge_predicate
from store.lake import Lake
from store.rows import runs_row
from store.schema import TABLES, WRITTEN_AT, table_spec
from store.writer import stats_columns, write
from tests.store.helpers import make_traj
from tests.store.test_typed_columns import old_layout, old_replayed
from tests.training.helpers import make_trajectory

# delta-rs (delta-kernel) builds a table's statistics schema from its first 32 leaf columns
DELTA_INDEXED_LEAVES = 32


def leaves(kind: pa.DataType) -> int:
    if pa.types.is_struct(kind):
        return sum(leaves(f.type) for f in kind)
    if pa.types.is_map(kind):
        return leaves(kind.key_type) + leaves(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return leaves(kind.value_type)
    return 1


@pytest.mark.parametrize("table", list(TABLES))
def test_every_statistics_column_is_within_the_leaves_delta_rs_reads(table: str) -> None:
    spec = TABLES[table]
    position, seen = {}, 0
    for field in spec.schema:
        seen += leaves(field.type)
        position[field.name] = seen
    late = {c: position[c] for c in stats_columns(spec) if position[c] > DELTA_INDEXED_LEAVES}
    assert late == {}, f"{table}: statistics columns past leaf {DELTA_INDEXED_LEAVES}: {late}"
    assert WRITTEN_AT in stats_columns(spec)


def newest_stamps(lake: Lake, table: str) -> list[object]:
    actions = pa.table(DeltaTable(lake.table_uri(table)).get_add_actions(flatten=True))
    assert f"max.{WRITTEN_AT}" in actions.column_names, actions.column_names
    return actions.column(f"max.{WRITTEN_AT}").to_pylist()


def test_new_tables_keep_written_at_statistics_for_tables_and_the_writers_pruning(lake: Lake) -> None:
    write(lake, "trajectories", [make_traj(i) for i in range(3)])
    write(lake, "runs", [runs_row("r", 1, "sft", {"loss": 1.5})])
    assert all(newest_stamps(lake, t) for t in ("trajectories", "runs"))
    actions = pa.table(DeltaTable(lake.table_uri("trajectories")).get_add_actions(flatten=True))
    assert f"t.{WRITTEN_AT} BETWEEN" in merge_predicate(actions)  # the MERGE scans only those files
    stats = {s.table: s for s in table_stats(lake)}
    assert stats["trajectories"].newest is not None and stats["runs"].newest is not None


def test_a_table_an_older_trajlake_made_gets_the_same_layout_and_statistics(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    old_layout(root, "trajectories", [old_replayed("t-1", 0.8), make_trajectory("t-2")])
    old_layout(root, "runs", [{"run_id": "r", "step": 1, "stage": "sft", "metrics": '{"loss": 1.5}'}])
    lake = Lake.of(root)
    write(lake, "trajectories", [make_traj(9)])  # adds the typed columns, at the end
    write(lake, "runs", [runs_row("r", 2, "sft", {"loss": 1.0})])
    for table in ("trajectories", "runs"):
        names = DeltaTable(lake.table_uri(table)).schema().to_arrow().names
        assert list(names) == table_spec(table).schema.names
        stamps = newest_stamps(lake, table)  # the old files' and the new one's
        assert len(stamps) >= 2 and all(stamps)
