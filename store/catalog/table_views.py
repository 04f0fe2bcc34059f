"""How one table version reads as a view: an Arrow dataset, or DuckDB's own Parquet reader
inside the write sandbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from store.lake import Lake
from store.schema import PARTITION_COLUMN, TableSpec

if TYPE_CHECKING:  # the dataset module imports pandas where installed: loaded by the views that use it
    import pyarrow.dataset as ds


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scan_type(arrow_type: pa.DataType) -> pa.DataType:
    """`arrow_type` with every text type, nested ones too, as `string_view`: how a view reads it.

    Files that delta-rs's MERGE wrote carry `string_view` columns, the others `string`, and
    pyarrow's dataset scan casts each file's columns to the dataset's types but cannot compare
    a `string` filter value with a `string_view` column (`equal(string, string_view)` has no
    kernel). Declared as `string_view`, every file reads (a `string` column casts to it), and
    DuckDB, seeing view columns, evaluates its text filters itself rather than pushing them
    into the scan; filters on numbers and times, where every file agrees, are pushed down.

    >>> scan_type(pa.list_(pa.struct([("role", pa.string()), ("n", pa.int64())])))
    ListType(list<item: struct<role: string_view, n: int64>>)
    """
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.string_view()
    if pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(scan_type(arrow_type.value_type)))
    if pa.types.is_struct(arrow_type):
        return pa.struct([field.with_type(scan_type(field.type)) for field in arrow_type.fields])
    return arrow_type


def scan_schema(spec: TableSpec) -> pa.Schema:
    """A table's schema as its view scans it: text as `string_view` (`scan_type`), except the
    partition column, which comes from the hive path and never from a file."""
    return pa.schema(
        [
            field if field.name == PARTITION_COLUMN else field.with_type(scan_type(field.type))
            for field in spec.schema
        ]
    )


def table_dataset(lake: Lake, spec: TableSpec, files: tuple[str, ...]) -> ds.Dataset:
    """One table version as an Arrow dataset in the schema's columns: what its view reads.

    A plain pyarrow dataset, scanned by Arrow's C++ reader and handed to DuckDB through the
    Arrow C stream interface: no Python runs on pyarrow's or DuckDB's threads while a query
    reads it, so a query that stops early (LIMIT) or fails leaves no thread inside Python.
    The files are read (a remote lake's through `Lake.arrow_fs`) when a query scans them,
    not listed or opened here; the partition column comes from the hive path
    (`dt=2026-01-31/part-0.parquet`), a column a file lacks reads as null, and text reads as
    `string_view` (`scan_type`).
    """
    import pyarrow.dataset as ds

    schema = scan_schema(spec)
    if not files:
        return ds.dataset(schema.empty_table())
    filesystem, base = lake.arrow_fs, lake.fs_path(spec.name)
    paths = [f.removeprefix("file://") if lake.is_local else f.split("://", 1)[-1] for f in files]
    hive = (
        ds.partitioning(pa.schema([spec.schema.field(PARTITION_COLUMN)]), flavor="hive")
        if spec.partitioned
        else None
    )
    fmt = ds.ParquetFileFormat()
    fragments = [
        fmt.make_fragment(
            path, filesystem, partition_expression=hive.parse(path.removeprefix(base)) if hive else None
        )
        for path in paths
    ]
    return ds.FileSystemDataset(fragments, schema, fmt, filesystem)


def parquet_view_sql(spec: TableSpec, files: tuple[str, ...], con: duckdb.DuckDBPyConnection) -> str:
    """One table's files read by DuckDB's own Parquet reader, in the schema's columns, order
    and types (a column no file has yet reads as null): the view of a connection whose file
    access is on anyway (`open_connection(local_files=True)`, inside the write sandbox).

    DuckDB reads every text column as VARCHAR whether a file wrote `string` or `string_view`,
    pushes every filter into the scan (row-group statistics, text included), and runs no
    Python and no pyarrow thread while it reads.
    """
    # `pa.nulls`, not `empty_table()`: building arrays from Python objects imports pandas (0.2 s)
    empty = con.from_arrow(
        pa.Table.from_arrays([pa.nulls(0, f.type) for f in spec.schema], schema=spec.schema)
    )
    types = list(zip(empty.columns, map(str, empty.types), strict=True))
    typed = "SELECT " + ", ".join(f"CAST(NULL AS {t}) AS {_quote(c)}" for c, t in types) + " WHERE false"
    if not files:
        return typed
    cols = ", ".join(f"CAST({_quote(c)} AS {t}) AS {_quote(c)}" for c, t in types)
    urls = ", ".join(_literal(path) for path in files)
    # The typed empty row set keeps columns no file has yet (additive evolution) in the schema's types.
    return (
        f"SELECT {cols} FROM ({typed} UNION ALL BY NAME SELECT * FROM read_parquet([{urls}], "
        f"hive_partitioning={str(spec.partitioned).lower()}, union_by_name=true))"
    )
