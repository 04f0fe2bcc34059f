"""The public surface of `store`, for the type checker and for `lazy_loader` (scientific-python's
SPEC 1), which reads these imports to load each name on first use: see `store/__init__.py`."""

from .catalog import (
    Snapshot as Snapshot,
    TableVersion as TableVersion,
    check_selection as check_selection,
    connect as connect,
    refresh as refresh,
    scan as scan,
    snapshot as snapshot,
)
from .conform import conform_batch as conform_batch
from .errors import (
    CompactionError as CompactionError,
    DataErased as DataErased,
    LakeUnusable as LakeUnusable,
    LegacyRows as LegacyRows,
    QueryTimeout as QueryTimeout,
    ReadOnlyViolation as ReadOnlyViolation,
    SchemaViolation as SchemaViolation,
    SelectionError as SelectionError,
    SettingError as SettingError,
    SettingRule as SettingRule,
    StoreError as StoreError,
    address_rules as address_rules,
    check_settings as check_settings,
    is_host as is_host,
)
from .lake import (
    DEFAULT_LAKE as DEFAULT_LAKE,
    Lake as Lake,
    open_lake as open_lake,
)
from .maintenance import (
    CompactConfig as CompactConfig,
    TableCompaction as TableCompaction,
    compact as compact,
)
from .migrate import (
    TableMigration as TableMigration,
    check_migrated as check_migrated,
    migrate as migrate,
    require_migrated as require_migrated,
)
from .pipeline_runs import (
    GateDecision as GateDecision,
    PipelineRun as PipelineRun,
    gate_decisions as gate_decisions,
    last_finished_run as last_finished_run,
    learning_since as learning_since,
    pipeline_runs as pipeline_runs,
    record_gate_decision as record_gate_decision,
    record_pipeline_run as record_pipeline_run,
)
from .readonly import run_read_only as run_read_only
from .rows import (
    new_run_id as new_run_id,
    runs_row as runs_row,
    served_adapter_name as served_adapter_name,
    utc_now as utc_now,
)
from .schema import (
    TABLES as TABLES,
    TableSpec as TableSpec,
    empty_table as empty_table,
    table_spec as table_spec,
)
from .selections import (
    GRPO_TRAJECTORIES as GRPO_TRAJECTORIES,
    OUTSIDE_VAL_SCENARIOS as OUTSIDE_VAL_SCENARIOS,
    PRODUCTION_TRAJECTORIES as PRODUCTION_TRAJECTORIES,
    SFT_TRAJECTORIES as SFT_TRAJECTORIES,
    TRAIN_SCENARIOS as TRAIN_SCENARIOS,
    VAL_SCENARIOS as VAL_SCENARIOS,
    grpo_trajectories_of as grpo_trajectories_of,
    scenarios_since as scenarios_since,
    trajectories_since as trajectories_since,
)
from .user_sql import (
    QueryResult as QueryResult,
    query_lake as query_lake,
)
from .vocabulary import (
    PRODUCTION_SOURCES as PRODUCTION_SOURCES,
    SPAN_SOURCES as SPAN_SOURCES,
    IngestStage as IngestStage,
    IngestStatus as IngestStatus,
    RewardStatus as RewardStatus,
    RunStage as RunStage,
    SpanSource as SpanSource,
    Split as Split,
    TrajectorySource as TrajectorySource,
    TrajectoryStatus as TrajectoryStatus,
    equals as equals,
    one_of as one_of,
)
from .writer import (
    WriteResult as WriteResult,
    write as write,
)
