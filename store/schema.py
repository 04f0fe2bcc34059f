"""The lake's tables: one explicit Arrow schema per table, its primary key and partitioning.

This module is the single source of truth for column names and types. Every table is a
Delta Lake table created with this schema; writers validate against it (never an
inferred schema), the DuckDB views are generated from it, and other packages import the
names from here.

Evolution is additive only: a new column is added to the Delta table as nullable when a
writer first meets it, so files written before it existed stay readable (readers see
nulls).

Keys: every table has a primary key, and every commit leaves one row per key for any
Delta reader. How a write treats a key the table already holds is declared here:
`upsert` tables replace the row (a re-assembled trajectory, a re-scored reward, an
alias move); `spans` keeps the first row (a retried OTLP delivery is the same span).
Every row carries ``_written_at``, the time its write was committed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# `spans.kind` of a row that is an OTLP log record (a GenAI event, feedback), not a span:
# log records share the table so the assembler folds them into their trace.
LOG_KIND = "LOG"

TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's timestamp: microseconds, UTC
WRITTEN_AT = "_written_at"
PARTITION_COLUMN = "dt"

# String columns that hold ids or enum codes (hex ids the ingest path validated, `kind`,
# `status`), never free text. Ingest's redaction skips them; they are the only string
# columns whose min/max values the Delta log keeps as file statistics
# (`store.writer.stats_columns`): the log is never cleaned up, so statistics of a free-text
# column would keep a copy of whatever redaction missed after its data files are gone.
ID_COLUMNS = frozenset(
    {
        "trace_id",
        "span_id",
        "parent_span_id",
        "trajectory_id",
        "source_trajectory_id",
        "scenario_id",
        "group_id",
        "run_id",
        "source",
        "kind",
        "status_code",
        "status",
        "split",
        "expected_source",
        "rated",
    }
)

# --- shared nested types ----------------------------------------------------------------

TOOL_CALL = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("arguments", pa.string()),  # JSON text, exactly as the model produced it
    ]
)

MESSAGE = pa.struct(
    [
        pa.field("role", pa.string()),
        pa.field("content", pa.string()),
        pa.field("name", pa.string()),
        pa.field("tool_call_id", pa.string()),
        pa.field("tool_calls", pa.list_(TOOL_CALL)),
        # On tool results: whether the tool failed (span status ERROR, an error result).
        pa.field("is_error", pa.bool_()),
    ]
)
MESSAGES = pa.list_(MESSAGE)

TURN = pa.struct(
    [
        pa.field("prompt_token_ids", pa.list_(pa.int32())),
        pa.field("completion_token_ids", pa.list_(pa.int32())),
        pa.field("logprobs", pa.list_(pa.float32())),
        pa.field("finish_reason", pa.string()),
    ]
)
TURNS = pa.list_(TURN)

# How a replayed trajectory was sampled (`trajectories.sampling`; `store.sampling.SamplingRecord`):
# GRPO divides the policy's logits by `temperature`, the stored logprobs were taken at it.
SAMPLING = pa.struct(
    [
        pa.field("temperature", pa.float64()),  # 0 = greedy
        pa.field("top_p", pa.float64()),
        pa.field("top_k", pa.int64()),  # 0 = off
        pa.field("max_tokens", pa.int64()),
        pa.field("seed", pa.int64()),  # null: unseeded
        pa.field("stop_token_ids", pa.list_(pa.int64())),
    ]
)

# A `runs` row's numbers by name (TRL's logged metrics, an evaluation's means and intervals):
# open-ended names, so a map, not a struct; non-finite values are kept as they are (NaN, inf).
SCALARS = pa.map_(pa.string(), pa.float64())
# The same row's text values by name (an evaluation row's `role`, `stage`, `policy`, `reward`).
TAGS = pa.map_(pa.string(), pa.string())

# One pipeline run (`runs.pipeline`, stage `pipeline`): `store.pipeline_runs.PipelineRun`, field
# for field (tests/store/test_typed_columns.py holds them equal).
PIPELINE_RUN = pa.struct(
    [
        pa.field("started_at", TIMESTAMP),
        pa.field("status", pa.string()),  # store.pipeline_runs.PipelineStatus
        pa.field("flow_run_id", pa.string()),
        pa.field("start_from", pa.string()),  # store.pipeline_runs.StartFrom
        pa.field("start_adapter", pa.string()),
        pa.field("start_adapter_path", pa.string()),
        pa.field("sft", pa.bool_()),
        pa.field("since", TIMESTAMP),
        pa.field("new_since", TIMESTAMP),
        pa.field("data_until", TIMESTAMP),
        pa.field("previous_run", pa.string()),
        pa.field("table_versions", pa.map_(pa.string(), pa.int64())),
        pa.field("finished_at", TIMESTAMP),
        pa.field("training_runs", pa.list_(pa.string())),
        pa.field("training_steps", pa.int64()),
        pa.field("adapter", pa.string()),
        pa.field("published", pa.string()),
        pa.field("promoted", pa.bool_()),
        pa.field("decision", pa.string()),
        pa.field("eval_run_id", pa.string()),
        pa.field("learned_from", pa.map_(pa.string(), pa.int64())),
        pa.field("error", pa.string()),
    ]
)

# A publish gate's decision taken outside a pipeline run (`runs.gate`, stage `publish`):
# `store.pipeline_runs.GateDecision`, field for field.
GATE_DECISION = pa.struct(
    [
        pa.field("at", TIMESTAMP),
        pa.field("candidate", pa.string()),
        pa.field("decision", pa.string()),
        pa.field("promoted", pa.bool_()),
        pa.field("published", pa.string()),
        pa.field("eval_run_id", pa.string()),
        pa.field("command", pa.string()),
    ]
)


@dataclass(frozen=True)
class TableSpec:
    """What the lake knows about one table."""

    name: str
    schema: pa.Schema
    key: tuple[str, ...]
    # Column whose UTC date fills `dt` when the caller gives none; None = not partitioned.
    partition_from: str | None = None
    # Columns that must be present and non-null besides the key.
    required: tuple[str, ...] = ()
    # A key already in the table: replace its row (True) or keep the first one (False).
    upsert: bool = True
    # Whether a key's partition never changes (`dt` from an immutable column), so a write
    # only has to look for its keys in the partitions it writes to.
    stable_partition: bool = False
    # Columns `compact` clusters files by (Z-order), for the lookups queries and writes do.
    cluster_by: tuple[str, ...] = ()
    # The column dating a row's delivery, for tables where a repeated key is a redelivery
    # (`store.keys.REDELIVERY_WINDOW` bounds where a write looks for it); None = anywhere.
    arrival: str | None = None

    @property
    def partitioned(self) -> bool:
        return self.partition_from is not None

    @property
    def not_null(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.key, *self.required)))


def _schema(*fields: pa.Field, partitioned: bool = False, added: tuple[pa.Field, ...] = ()) -> pa.Schema:
    """`fields`, then `_written_at` (and `dt`), then the columns `added` since, oldest first.

    A column added to a table goes after `_written_at`: where `alter.add_columns` puts it on a
    table an older trajlake created, so a new table and an upgraded one have one layout. And
    delta-rs reads file statistics back for the first 32 leaf columns only (whatever
    `delta.dataSkippingStatsColumns` names), so a column added before `_written_at` would lose
    its statistics, which `trajlake tables`, the writer's file pruning (`store.keys`) and the
    orphan check read (tests/store/test_schema_layout.py holds both).
    """
    tail = [pa.field(WRITTEN_AT, TIMESTAMP)]
    if partitioned:
        tail.append(pa.field(PARTITION_COLUMN, pa.date32()))
    return pa.schema([*fields, *tail, *added])


SPANS = TableSpec(
    name="spans",
    key=("trace_id", "span_id"),
    partition_from="start_time",
    required=("source", "start_time"),
    upsert=False,  # a retried delivery is the same span: the first row stays
    stable_partition=True,  # a span's start time never changes
    cluster_by=("trace_id",),
    arrival="received_at",
    schema=_schema(
        pa.field("trace_id", pa.string()),  # 32 lowercase hex chars
        pa.field("span_id", pa.string()),  # 16 lowercase hex chars
        pa.field("source", pa.string()),  # store.vocabulary.SpanSource
        pa.field("name", pa.string()),
        pa.field("kind", pa.string()),  # INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER, UNSPECIFIED
        pa.field("parent_span_id", pa.string()),
        pa.field("start_time", TIMESTAMP),
        pa.field("end_time", TIMESTAMP),
        pa.field("status_code", pa.string()),  # UNSET, OK, ERROR
        pa.field("status_message", pa.string()),
        pa.field("service_name", pa.string()),
        pa.field("scope_name", pa.string()),
        pa.field("attributes", pa.string()),  # JSON object
        pa.field("events", pa.string()),  # JSON array
        pa.field("resource", pa.string()),  # JSON object
        pa.field("received_at", TIMESTAMP),
        partitioned=True,
    ),
)

TRAJECTORIES = TableSpec(
    name="trajectories",
    key=("trajectory_id",),
    partition_from="started_at",
    required=("source", "started_at"),
    cluster_by=("trajectory_id",),
    schema=_schema(
        pa.field("trajectory_id", pa.string()),
        pa.field("source", pa.string()),  # store.vocabulary.TrajectorySource
        pa.field("trace_id", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("user_id", pa.string()),
        pa.field("agent_name", pa.string()),
        pa.field("model", pa.string()),
        pa.field("started_at", TIMESTAMP),
        pa.field("ended_at", TIMESTAMP),
        pa.field("messages", MESSAGES),
        pa.field("tools", pa.string()),  # JSON array of OpenAI-style tool definitions
        pa.field("final_output", pa.string()),
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("scenario_id", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("policy", pa.string()),  # model or adapter version that produced it
        pa.field("turns", TURNS),  # token data; empty for text-only production traces
        pa.field("metadata", pa.string()),  # JSON object
        pa.field("has_content", pa.bool_()),  # false when content capture was off
        pa.field("status", pa.string()),  # store.vocabulary.TrajectoryStatus
        partitioned=True,
        # Replayed trajectories only (null on production traffic): the replay run's name (part of
        # the group id; the pipeline's are `round-<n>`), the split of the scenario it replayed
        # (evaluation replays say `val`), and how it was sampled.
        added=(
            pa.field("replay_run", pa.string()),
            pa.field("scenario_split", pa.string()),  # store.vocabulary.Split
            pa.field("sampling", SAMPLING),
        ),
    ),
)

REWARDS = TableSpec(
    name="rewards",
    key=("trajectory_id", "name", "scorer"),
    partition_from="scored_at",
    required=("scored_at",),
    cluster_by=("trajectory_id",),
    schema=_schema(
        pa.field("trajectory_id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("scorer", pa.string()),  # judge model + rubric hash, or function path + version
        pa.field("value", pa.float64()),  # null when status = 'failed': never a silent zero
        pa.field("explanation", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("scored_at", TIMESTAMP),
        pa.field("run_id", pa.string()),
        pa.field("status", pa.string()),  # store.vocabulary.RewardStatus
        pa.field("error", pa.string()),  # snake_case reason code when failed
        pa.field("metadata", pa.string()),  # JSON: seed, tokens, cost, ...
        partitioned=True,
    ),
)

SCENARIOS = TableSpec(
    name="scenarios",
    key=("scenario_id",),
    required=("messages",),
    schema=_schema(
        pa.field("scenario_id", pa.string()),
        pa.field("messages", MESSAGES),  # the prompt prefix
        pa.field("tools", pa.string()),  # JSON
        pa.field("expected", pa.string()),  # JSON, optional
        pa.field("split", pa.string()),  # store.vocabulary.Split
        pa.field("source_trajectory_id", pa.string()),
        pa.field("created_at", TIMESTAMP),
        pa.field("metadata", pa.string()),  # JSON
        # Where `expected` came from (store.vocabulary.ExpectedSource); null: no expected.
        pa.field("expected_source", pa.string()),
        # The source conversation's feedback: `right`, `wrong`, or null (unrated, or between).
        pa.field("rated", pa.string()),
    ),
)

RUNS = TableSpec(
    name="runs",
    key=("run_id", "step"),
    required=("stage",),
    schema=_schema(
        pa.field("run_id", pa.string()),
        pa.field("step", pa.int64()),
        pa.field("stage", pa.string()),  # store.vocabulary.RunStage
        # JSON object: what of the row's record has no typed column below (nested or null
        # values); a row of an older release holds its whole record here (`trajlake migrate`)
        pa.field("metrics", pa.string()),
        pa.field("at", TIMESTAMP),
        # What trajlake reads (`store.rows.runs_row` writes them from the row's record): numbers
        # and text by name, and the record of a pipeline run (stage `pipeline`) or of a gate
        # decision taken outside one (stage `publish`).
        added=(
            pa.field("scalars", SCALARS),
            pa.field("tags", TAGS),
            pa.field("pipeline", PIPELINE_RUN),
            pa.field("gate", GATE_DECISION),
        ),
    ),
)

ADAPTERS = TableSpec(
    name="adapters",
    key=("name", "version"),
    required=("path",),
    schema=_schema(
        pa.field("name", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("path", pa.string()),
        pa.field("base_model", pa.string()),
        pa.field("stages", pa.list_(pa.string())),
        pa.field("parent", pa.string()),  # "name:version" of the adapter it continued from
        pa.field("run_id", pa.string()),
        pa.field("data", pa.string()),  # lineage JSON: query, trajectory-id digest, lake files
        pa.field("metrics", pa.string()),  # JSON
        pa.field("published_at", TIMESTAMP),
        pa.field("aliases", pa.list_(pa.string())),
        # Set by `trajlake forget` / retention when rows this adapter was trained on were
        # erased (its weights still encode them); `erasures` names the `erasures` rows.
        pa.field("trained_on_erased_data", pa.bool_()),
        pa.field("erasures", pa.list_(pa.string())),
    ),
)

WATERMARKS = TableSpec(
    name="watermarks",
    key=("source", "scope"),
    required=("updated_at",),
    schema=_schema(
        pa.field("source", pa.string()),  # e.g. "langfuse"
        pa.field("scope", pa.string()),  # what the watermark covers: host + filters digest
        pa.field("watermark", TIMESTAMP),  # everything up to here has been ingested
        pa.field("cursor", pa.string()),  # resume point of an interrupted pull, if any
        pa.field("state", pa.string()),  # JSON: whatever else the puller needs to resume
        pa.field("updated_at", TIMESTAMP),
    ),
)

INGEST_ERRORS = TableSpec(
    name="ingest_errors",
    key=("trace_id", "stage"),
    required=("status", "occurred_at"),
    schema=_schema(
        pa.field("trace_id", pa.string()),
        pa.field("stage", pa.string()),  # where it failed: assemble
        pa.field("status", pa.string()),  # "failed", or "resolved" once the trace went through
        pa.field("reason", pa.string()),  # a short code (`type_error`, `key_error`, ...)
        pa.field("error_class", pa.string()),
        pa.field("detail", pa.string()),  # the message, then the innermost frames of the traceback
        pa.field("span_count", pa.int64()),  # spans of the trace (they stay in `spans`)
        pa.field("occurred_at", TIMESTAMP),
    ),
)

# What a conversation's right outcome is, as someone who knows said it: a correction sent with
# a thumbs-down, a labels file a person imported. `expected` is the right answer (the shape a
# scenario's `expected` has: `{"final_output": ...}` or the task's own JSON); `verdict` a score in
# [0, 1] of the conversation's own answer. Scenarios take their `expected` from here before they
# would take a conversation's answer (`training.replay.scenarios`); forgetting a user erases theirs.
LABELS = TableSpec(
    name="labels",
    key=("trajectory_id", "name"),
    required=("source", "labeled_at"),
    cluster_by=("trajectory_id",),
    schema=_schema(
        pa.field("trajectory_id", pa.string()),  # the conversation labelled (a trace's run)
        pa.field("name", pa.string()),  # what the label is of: `expected` unless told
        pa.field("trace_id", pa.string()),
        pa.field("expected", pa.string()),  # JSON: the right answer; null for a verdict alone
        pa.field("verdict", pa.float64()),  # the conversation's answer scored in [0, 1]; optional
        pa.field("source", pa.string()),  # store.vocabulary.LabelSource
        pa.field("user_id", pa.string()),  # whose conversation it is (what `forget --user` erases)
        pa.field("labeled_by", pa.string()),  # who said so: a person, a file, a feedback scorer
        pa.field("comment", pa.string()),
        pa.field("labeled_at", TIMESTAMP),
        pa.field("metadata", pa.string()),  # JSON
    ),
)

# The audit of `trajlake forget` and retention: who erased what selection when, and how much.
# Never the erased values: a selection is kept as its kind and a sha256 digest of its value.
ERASURES = TableSpec(
    name="erasures",
    key=("erasure_id",),
    required=("reason", "requested_at"),
    schema=_schema(
        pa.field("erasure_id", pa.string()),
        pa.field("reason", pa.string()),  # store.vocabulary.ErasureReason
        pa.field("requested_by", pa.string()),
        pa.field("requested_at", TIMESTAMP),
        pa.field("finished_at", TIMESTAMP),
        pa.field("selection_kind", pa.string()),  # user_id, session_id, trace_id, where, older_than
        pa.field("selection_digest", pa.string()),  # sha256:<hex> of the selection's value
        pa.field("rows", pa.string()),  # JSON: table -> rows erased
        pa.field("files_rewritten", pa.int64()),
        pa.field("bytes_written", pa.int64()),
        pa.field("derived", pa.string()),  # JSON: spool records, judge cache entries, ...
        pa.field("adapters", pa.list_(pa.string())),  # `name:version` marked trained_on_erased_data
        pa.field("verified", pa.bool_()),  # every file under the lake was checked afterwards
    ),
)

TABLES: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        SPANS,
        TRAJECTORIES,
        REWARDS,
        SCENARIOS,
        RUNS,
        ADAPTERS,
        WATERMARKS,
        INGEST_ERRORS,
        ERASURES,
        LABELS,
    )
}


def table_spec(name: str) -> TableSpec:
    """Look a table up by name, listing the known tables when it does not exist."""
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"unknown table `{name}`; the lake has: {', '.join(TABLES)}") from None


def empty_table(name: str) -> pa.Table:
    """A zero-row table with the full schema of `name` (useful for tests and empty views)."""
    return table_spec(name).schema.empty_table()
