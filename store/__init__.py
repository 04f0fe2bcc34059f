"""The trajectory lake: Delta Lake tables with one schema module, a writer, DuckDB views and maintenance.

Imports nothing else of trajlake. Public surface:

- `write(lake, table, data)`: validate and commit, one row per key (`store.writer`);
- `connect(lake)`, `refresh`, `run_read_only`, `scan(lake, table)`: SQL and polars over a
  snapshot, on connections that cannot open a file; `query_lake`: `trajlake sql`'s user SQL
  (local files readable where the kernel forbids it to write: `store.sandbox`); `snapshot(lake, versions)`: table versions, for lineage and time travel;
- `compact(lake)`: OPTIMIZE + Z-order + VACUUM (`store.maintenance`); `migrate(lake)`:
  the Parquet-files release to Delta (`store.migrate`);
- `TABLES`, `table_spec`, `empty_table`: the schemas (`store.schema`); `Lake`;
- the vocabularies (`store.vocabulary`) and the default selections (`store.selections`);
- the shapes other packages write into the lake and read back, declared once: the message
  struct (`store.messages`), a replay's metadata and sampling record (`store.documents`),
  each kind of `runs.metrics` (`store.metrics`), the policy name (`store.policy_names`);
  `open_lake` (the checked way to open a configured lake) and `SettingError` (the base of
  configuration errors, with the failing `field`).
"""

from store.catalog import (
    Snapshot,
    TableVersion,
    check_selection,
    connect,
    refresh,
    scan,
    snapshot,
)
from store.conform import conform_batch
from store.errors import (
    CompactionError,
    DataErased,
    LakeUnusable,
    QueryTimeout,
    ReadOnlyViolation,
    SchemaViolation,
    SelectionError,
    SettingError,
    StoreError,
)
from store.lake import DEFAULT_LAKE, Lake, open_lake
from store.maintenance import CompactConfig, TableCompaction, compact
from store.migrate import TableMigration, migrate
from store.pipeline_runs import (
    PipelineRun,
    last_finished_run,
    learning_since,
    pipeline_runs,
    record_pipeline_run,
)
from store.readonly import run_read_only
from store.rows import new_run_id, runs_row, served_adapter_name, utc_now
from store.schema import TABLES, TableSpec, empty_table, table_spec
from store.selections import (
    GRPO_TRAJECTORIES,
    OUTSIDE_VAL_SCENARIOS,
    PRODUCTION_TRAJECTORIES,
    SFT_TRAJECTORIES,
    TRAIN_SCENARIOS,
    VAL_SCENARIOS,
    grpo_trajectories_of,
    scenarios_since,
    trajectories_since,
)
from store.user_sql import QueryResult, query_lake
from store.vocabulary import (
    PRODUCTION_SOURCES,
    SPAN_SOURCES,
    IngestStage,
    IngestStatus,
    RewardStatus,
    RunStage,
    SpanSource,
    Split,
    TrajectorySource,
    TrajectoryStatus,
    equals,
    one_of,
)
from store.writer import WriteResult, write

__all__ = [
    "DEFAULT_LAKE",
    "GRPO_TRAJECTORIES",
    "OUTSIDE_VAL_SCENARIOS",
    "PRODUCTION_SOURCES",
    "PRODUCTION_TRAJECTORIES",
    "SFT_TRAJECTORIES",
    "SPAN_SOURCES",
    "TABLES",
    "TRAIN_SCENARIOS",
    "VAL_SCENARIOS",
    "CompactConfig",
    "CompactionError",
    "DataErased",
    "IngestStage",
    "IngestStatus",
    "Lake",
    "LakeUnusable",
    "PipelineRun",
    "QueryResult",
    "QueryTimeout",
    "ReadOnlyViolation",
    "RewardStatus",
    "RunStage",
    "SchemaViolation",
    "SelectionError",
    "SettingError",
    "Snapshot",
    "SpanSource",
    "Split",
    "StoreError",
    "TableCompaction",
    "TableMigration",
    "TableSpec",
    "TableVersion",
    "TrajectorySource",
    "TrajectoryStatus",
    "WriteResult",
    "check_selection",
    "compact",
    "conform_batch",
    "connect",
    "empty_table",
    "equals",
    "grpo_trajectories_of",
    "last_finished_run",
    "learning_since",
    "migrate",
    "new_run_id",
    "one_of",
    "open_lake",
    "pipeline_runs",
    "query_lake",
    "record_pipeline_run",
    "refresh",
    "run_read_only",
    "runs_row",
    "scan",
    "scenarios_since",
    "served_adapter_name",
    "snapshot",
    "table_spec",
    "trajectories_since",
    "utc_now",
    "write",
]
