"""Data offered to a table, conformed to its schema: any accepted input -> record batches in the
table's exact schema, or a `SchemaViolation` naming the table, column and row (pure functions).

Accepted inputs: pyarrow Tables and RecordBatches, polars DataFrames, lists of dicts, and
iterables of those (consumed lazily, so a generator of batches streams).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from store.errors import SchemaViolation
from store.schema import PARTITION_COLUMN, TableSpec
from store.vocabulary import VOCABULARIES

# What a value Arrow cannot convert or cast raises (pa.ArrowInvalid is a ValueError,
# pa.ArrowTypeError a TypeError; an impossible cast is pa.ArrowNotImplementedError).
_CONVERSION_ERRORS = (ValueError, TypeError, OverflowError, pa.ArrowNotImplementedError)
WriteInput = Any  # pa.Table | pa.RecordBatch | polars.DataFrame | list[dict] | Iterable of those


def iter_batches(data: WriteInput, spec: TableSpec, chunk_rows: int) -> Iterator[pa.RecordBatch]:
    """Turn any accepted input into record batches, lazily for iterables."""
    if isinstance(data, pa.Table):
        if data.num_columns and data.column(0).num_chunks > 1 + data.num_rows // chunk_rows:
            data = data.combine_chunks()  # many small chunks: conform a few large batches instead
        yield from data.to_batches(max_chunksize=chunk_rows)
    elif isinstance(data, pa.RecordBatch):
        yield data
    elif _is_polars(data):
        yield from data.to_arrow().to_batches(max_chunksize=chunk_rows)
    elif isinstance(data, list) and (not data or isinstance(data[0], Mapping)):
        for start in range(0, len(data), chunk_rows):
            yield rows_to_batch(spec, data[start : start + chunk_rows], row_offset=start)
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        for part in data:
            yield from iter_batches(part, spec, chunk_rows)
    else:
        raise TypeError(
            f"cannot write a {type(data).__name__} to `{spec.name}`: pass a pyarrow Table or "
            "RecordBatch, a polars DataFrame, a list of dicts, or an iterable of those"
        )


def _is_polars(data: object) -> bool:
    return type(data).__module__.startswith("polars") and hasattr(data, "to_arrow")


def rows_to_batch(spec: TableSpec, rows: list[Mapping[str, Any]], row_offset: int = 0) -> pa.RecordBatch:
    """Build a batch from dicts, naming the first row whose value has the wrong type."""
    names = list(dict.fromkeys(k for row in rows for k in row))
    _check_unknown(spec, names)
    arrays = []
    for name in names:
        target = spec.schema.field(name).type
        values = [row.get(name) for row in rows]
        try:
            arrays.append(pa.array(values, type=target))
        except _CONVERSION_ERRORS as exc:
            bad = _first_failing(values, partial(pa.array, type=target))
            raise SchemaViolation(
                spec.name,
                name,
                row_offset + bad if bad is not None else None,
                "wrong_type",
                f"expected {target}, got {values[bad]!r} ({exc})" if bad is not None else str(exc),
            ) from None
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _first_failing(values: Any, convert: Callable[[Any], Any]) -> int | None:
    """The index of the first value `convert` cannot take (one at a time), to name its row."""
    for i in range(len(values)):
        try:
            convert(values[i : i + 1])
        except _CONVERSION_ERRORS:
            return i
    return None


# --- validation --------------------------------------------------------------------------


def _check_unknown(spec: TableSpec, names: Iterable[str]) -> None:
    unknown = [n for n in names if n not in spec.schema.names]
    if unknown:
        raise SchemaViolation(
            spec.name,
            unknown[0],
            None,
            "unknown_column",
            f"unknown column(s) {', '.join(f'`{u}`' for u in unknown)}; "
            f"the table has: {', '.join(spec.schema.names)}",
        )


# Number columns every door must keep finite: a reward of NaN or inf, from a score over HTTP,
# a Langfuse pull, an imported file or a scorer, is refused here whoever wrote it.
FINITE: dict[str, tuple[str, ...]] = {"rewards": ("value",)}


def conform_batch(spec: TableSpec, batch: pa.RecordBatch, row_offset: int = 0) -> pa.RecordBatch:
    """Validate `batch` against `spec` and return it in the table's exact schema.

    Missing nullable columns become nulls; types are cast safely (int32 -> int64, large
    strings -> strings, ISO date strings -> dates); `_written_at` is left null for the
    writer to stamp. Raises `SchemaViolation` with the offending column and row.
    """
    names = batch.schema.names
    _check_unknown(spec, names)
    n = batch.num_rows
    derive_dt = spec.partitioned and PARTITION_COLUMN not in names
    missing = [c for c in spec.not_null if c not in names and not (c == PARTITION_COLUMN and derive_dt)]
    if missing:
        raise SchemaViolation(
            spec.name,
            missing[0],
            None,
            "missing_column",
            f"required column(s) {', '.join(f'`{m}`' for m in missing)} missing; "
            f"got: {', '.join(names) or 'no columns'}",
        )
    columns: list[pa.Array] = []
    for target in spec.schema:
        if target.name in names:
            column = _cast_column(spec, target, batch.column(target.name), row_offset)
        elif target.name == PARTITION_COLUMN and derive_dt:
            column = _dates_of(columns[spec.schema.get_field_index(spec.partition_from)])
        else:
            column = pa.nulls(n, type=target.type)
        allowed = VOCABULARIES.get(spec.name, {}).get(target.name)
        if allowed is not None and target.name in names:
            # nulls stay allowed (a nullable column); only values outside the vocabulary are refused
            outside = pc.and_(pc.is_valid(column), pc.invert(pc.is_in(column, value_set=pa.array(allowed))))
            if pc.any(outside).as_py():
                row = pc.index(outside, True).as_py()
                raise SchemaViolation(
                    spec.name,
                    target.name,
                    row_offset + row,
                    "unknown_value",
                    f"`{target.name}` = {column[row].as_py()!r} is not one of {', '.join(allowed)}",
                )
        if target.name in FINITE.get(spec.name, ()) and target.name in names:
            bad = pc.invert(pc.is_finite(column.fill_null(0.0)))
            if pc.any(bad).as_py():
                row = pc.index(bad, True).as_py()
                raise SchemaViolation(
                    spec.name,
                    target.name,
                    row_offset + row,
                    "not_finite",
                    f"`{target.name}` = {column[row].as_py()!r}; it must be a finite number (NaN and "
                    "infinity would poison every mean over it)",
                )
        if target.name in spec.not_null and column.null_count:
            row = pc.index(pc.is_null(column), True).as_py()
            reason = "null_key" if target.name in spec.key else "null_value"
            what = "primary key" if target.name in spec.key else "required column"
            raise SchemaViolation(
                spec.name, target.name, row_offset + row, reason, f"null in {what} `{target.name}`"
            )
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=spec.schema)


def _cast_column(spec: TableSpec, target: pa.Field, column: pa.Array, row_offset: int) -> pa.Array:
    if column.type == target.type:
        return column
    try:
        if target.type == pa.date32() and pa.types.is_timestamp(column.type):
            return _dates_of(column)
        return pc.cast(column, target.type, safe=True)
    except _CONVERSION_ERRORS as exc:
        bad = _first_failing(column, partial(pc.cast, target_type=target.type, safe=True))
        detail = f"expected {target.type}, got {column.type}"
        if bad is not None:
            detail += f" (value {column[bad].as_py()!r})"
        raise SchemaViolation(
            spec.name,
            target.name,
            row_offset + bad if bad is not None else None,
            "wrong_type",
            f"{detail}: {exc}",
        ) from None


def _dates_of(timestamps: pa.Array) -> pa.Array:
    if pa.types.is_timestamp(timestamps.type) and timestamps.type.tz is None:
        timestamps = pc.assume_timezone(timestamps, "UTC")
    if pa.types.is_timestamp(timestamps.type):
        timestamps = pc.cast(timestamps, pa.timestamp(timestamps.type.unit, tz="UTC"))
    return pc.cast(timestamps, pa.date32())
