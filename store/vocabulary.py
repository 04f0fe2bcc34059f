"""The lake's vocabularies: the values its code columns may hold, declared once.

`source`, `status`, `split` and `stage` are plain strings in Parquet; these `Literal`s are
the one place their values are listed. The writer refuses any other value (a typo in a
library or a user's rows never lands in the lake), type checkers see them in signatures,
and SQL that filters on a set of them is written from them (`one_of`).
"""

from __future__ import annotations

from typing import Literal, get_args

SpanSource = Literal["otel", "langfuse"]
TrajectorySource = Literal["otel", "langfuse", "replay", "import"]
TrajectoryStatus = Literal["ok", "error", "truncated"]
RewardStatus = Literal["ok", "failed"]
Split = Literal["train", "val"]
RunStage = Literal["sft", "grpo", "eval", "pipeline", "publish"]
IngestStage = Literal["assemble"]
IngestStatus = Literal["failed", "resolved"]
ErasureReason = Literal["forget", "retention"]
SelectionKind = Literal["user_id", "session_id", "trace_id", "where", "older_than"]
# Where a scenario's `expected` came from: a label, a conversation its user rated right, the
# source's own metadata (an imported file's `expected`). Never a conversation rated wrong.
ExpectedSource = Literal["label", "rated_right", "metadata"]
Rating = Literal["right", "wrong"]
# Where a label came from: feedback sent with the trace, a file imported, a person in a tool.
LabelSource = Literal["feedback", "file", "person"]

# What the collector and the Langfuse puller write spans as: the sources assembled trajectories have.
SPAN_SOURCES: tuple[SpanSource, ...] = get_args(SpanSource)

# Where production traffic comes from (everything but replay): what `policy_performance` and
# the production rows of an evaluation read.
PRODUCTION_SOURCES: tuple[TrajectorySource, ...] = ("otel", "langfuse", "import")

# table -> column -> allowed values (null is always allowed where the column is nullable)
VOCABULARIES: dict[str, dict[str, tuple[str, ...]]] = {
    "spans": {"source": get_args(SpanSource)},
    "trajectories": {
        "source": get_args(TrajectorySource),
        "status": get_args(TrajectoryStatus),
        "scenario_split": get_args(Split),
    },
    "rewards": {"status": get_args(RewardStatus)},
    "scenarios": {
        "split": get_args(Split),
        "expected_source": get_args(ExpectedSource),
        "rated": get_args(Rating),
    },
    "runs": {"stage": get_args(RunStage)},
    "ingest_errors": {"stage": get_args(IngestStage), "status": get_args(IngestStatus)},
    "labels": {"source": get_args(LabelSource)},
    "erasures": {"reason": get_args(ErasureReason), "selection_kind": get_args(SelectionKind)},
}


def vocabulary(table: str, column: str) -> tuple[str, ...]:
    """The values `table.column` may hold.

    >>> vocabulary("scenarios", "split")
    ('train', 'val')
    """
    if table not in VOCABULARIES:
        raise ValueError(f"`{table}` has no code columns; tables that do: {', '.join(VOCABULARIES)}")
    columns = VOCABULARIES[table]
    if column not in columns:
        raise ValueError(
            f"`{table}.{column}` has no vocabulary; {table}'s code columns: {', '.join(columns)}"
        )
    return columns[column]


def _checked(table: str, column: str, values: tuple[str, ...]) -> None:
    name = column.rsplit(".", 1)[-1]  # `t.source`: the alias the SQL gives the table
    allowed = vocabulary(table, name)
    for value in values:
        if value not in allowed:
            raise ValueError(
                f"`{value}` is not a value of `{table}.{name}`; its vocabulary: {', '.join(allowed)}"
            )


def one_of(column: str, values: tuple[str, ...], *, table: str) -> str:
    """SQL true where `column` (of `table`) holds one of `values`, each a value of its vocabulary.

    >>> one_of("t.source", PRODUCTION_SOURCES, table="trajectories")
    "t.source IN ('otel', 'langfuse', 'import')"
    """
    _checked(table, column, values)
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def equals(column: str, value: str, *, table: str) -> str:
    """SQL true where `column` (of `table`) holds `value`, which must be a value of that column's
    vocabulary: a misspelt value fails where the SQL is written, not as an empty result.

    >>> equals("t.source", "replay", table="trajectories")
    "t.source = 'replay'"
    """
    _checked(table, column, (value,))
    return f"{column} = {value!r}"
