"""The trajectory lake: Delta Lake tables with one schema module, a writer, DuckDB views and maintenance.

Imports nothing else of trajlake. This package imports nothing itself: each name is imported
from the module that defines it (`from store.writer import write`), so `import store.errors`
(the CLI's option parsing, the trainers' errors) costs that module alone, `trajlake sql` loads
the SQL path without the writer's or maintenance's libraries, and where the lake's libraries
are not installed (the GPU machine: bench/gpu.py) the declarations still load. Public surface:

- `store.writer`: `write(lake, table, data)` (validate and commit, one row per key), `WriteResult`;
- `store.catalog`: `connect(lake)`, `refresh`, `scan(lake, table)`, `check_selection`
  (`store.catalog.connection`): SQL and polars over a snapshot, on connections that cannot
  open a file; `snapshot(lake, versions)`, `Snapshot`, `TableVersion`
  (`store.catalog.versions`): table versions, for lineage and time travel;
- `store.readonly`: `run_read_only`; `store.user_sql`: `query_lake`, `QueryResult`
  (`trajlake sql`'s user SQL; local files readable where the kernel forbids it to write:
  `store.sandbox`);
- `store.maintenance`: `compact(lake)`, `CompactConfig`, `TableCompaction` (OPTIMIZE + Z-order +
  VACUUM); `store.migrate`: `migrate(lake)`, `check_migrated`, `require_migrated`,
  `TableMigration` (the Parquet-files release to Delta, typed columns);
- `store.schema`: `TABLES`, `TableSpec`, `table_spec`, `empty_table`; `store.conform`:
  `conform_batch`;
- `store.lake`: `Lake`, `open_lake` (the checked way to open a configured lake), `DEFAULT_LAKE`;
- `store.errors`: `StoreError` and its kinds (`SchemaViolation`, `LakeUnusable`, `LegacyRows`,
  `SelectionError`, `QueryTimeout`, `ReadOnlyViolation`, `CompactionError`, `DataErased`),
  `SettingError` (the base of configuration errors, with the failing `field`), `SettingRule`,
  `check_settings`, `address_rules`, `is_host`;
- `store.vocabulary`: the vocabularies (`Split`, `RunStage`, `TrajectorySource`, ...,
  `PRODUCTION_SOURCES`, `SPAN_SOURCES`) and the SQL tests `one_of`, `equals`;
- `store.selections`: the default selections (`SFT_TRAJECTORIES`, `GRPO_TRAJECTORIES`,
  `TRAIN_SCENARIOS`, `VAL_SCENARIOS`, `OUTSIDE_VAL_SCENARIOS`, `PRODUCTION_TRAJECTORIES`,
  `grpo_trajectories_of`, `scenarios_since`, `trajectories_since`);
- `store.pipeline_runs`: `PipelineRun`, `GateDecision`, `record_pipeline_run`,
  `record_gate_decision`, `pipeline_runs`, `gate_decisions`, `last_finished_run`,
  `learning_since`; `store.rows`: `utc_now`, `new_run_id`, `runs_row`, `served_adapter_name`;
- the shapes other packages write into the lake and read back, declared once: the message
  struct (`store.messages`), a replay's sampling record and temperature rule (`store.sampling`),
  each kind of `runs.metrics` (`store.metrics`), the policy name (`store.policy_names`);
- `store.erasure`: erasure plans, their application and verification (`trajlake forget`).
"""
