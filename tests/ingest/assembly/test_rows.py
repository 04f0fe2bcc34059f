"""`span_dicts`: a `spans` table as the rows every normaliser reads."""

from __future__ import annotations

import pyarrow as pa

from ingest.assembly import assemble, span_dicts
from tests.ingest.span_rows import get_span, spans_table


def test_span_rows_are_the_same_from_a_whole_table_and_from_some_of_its_columns() -> None:
    table = spans_table(
        [get_span("a" * 16, None, {"k": "v"}, 0, name="root"), get_span("b" * 16, "a" * 16, {}, 1)]
    )
    whole = span_dicts(table)  # every column assembly reads
    some = span_dicts(table.drop_columns(["status_message"]))  # only the columns present
    assert list(whole[0])[:3] == ["trace_id", "span_id", "parent_span_id"]
    assert some == [{k: v for k, v in row.items() if k != "status_message"} for row in whole]
    assert [list(row) for row in some] == [[k for k in row if k != "status_message"] for row in whole]
    assert whole[0]["attributes"] == {"k": "v"} and whole[1]["parent_span_id"] == "a" * 16


def test_span_rows_read_attributes_from_sliced_chunks_and_nulls() -> None:
    # Attributes are read where Arrow keeps them (views into its buffers): chunks that start
    # part-way into their buffers, and missing values, must give each row its own attributes.
    spans = [get_span(f"{i:016x}", None, {"i": i, "pad": "x" * i}, i) for i in range(6)]
    table = spans_table(spans)
    column = table.column("attributes")
    missing = pa.chunked_array(
        [*column.slice(1, 2).chunks, pa.array([None], pa.string()), *column.slice(4).chunks]
    )
    sliced = pa.concat_tables([table.slice(1, 2), table.slice(3, 1), table.slice(4)]).set_column(
        table.schema.get_field_index("attributes"), "attributes", missing
    )
    rows = span_dicts(sliced)
    assert [row["span_id"] for row in rows] == [f"{i:016x}" for i in range(1, 6)]
    assert [row["attributes"] for row in rows] == [
        {"i": 1, "pad": "x"},
        {"i": 2, "pad": "xx"},
        {},
        {"i": 4, "pad": "xxxx"},
        {"i": 5, "pad": "xxxxx"},
    ]


def test_span_rows_share_repeated_strings_and_keep_nulls_across_chunks() -> None:
    # Repeated values (trace ids, names, services) come out as one object each, from a column in
    # several chunks, sliced and with nulls, and each row still gets its own value.
    spans = [
        get_span(f"{i:016x}", None if i % 3 == 0 else "p" * 16, {}, i, name=f"n{i % 2}") for i in range(7)
    ]
    table = spans_table(spans)
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3, 1), table.slice(4)])
    rows = span_dicts(chunked)
    assert [row["name"] for row in rows] == [f"n{i % 2}" for i in range(7)]
    assert [row["parent_span_id"] for row in rows] == [None if i % 3 == 0 else "p" * 16 for i in range(7)]
    assert rows[0]["name"] is rows[2]["name"] and rows[1]["parent_span_id"] is rows[5]["parent_span_id"]
    assert len({id(row["trace_id"]) for row in rows}) == 1


def test_span_rows_read_large_string_attributes() -> None:
    # A table written by another engine may hold the JSON as large_string (64-bit offsets).
    table = spans_table([get_span(f"{i:016x}", None, {"i": i, "pad": "y" * i}, i) for i in range(3)])
    index = table.schema.get_field_index("attributes")
    large = table.set_column(index, "attributes", table.column("attributes").cast(pa.large_string()))
    assert [row["attributes"] for row in span_dicts(large.slice(1))] == [
        {"i": 1, "pad": "y"},
        {"i": 2, "pad": "yy"},
    ]


def test_a_table_of_empty_chunks_has_no_rows_and_assembles_to_nothing() -> None:
    # A filtered lake read with no match: zero rows, in chunks of zero length.
    schema = spans_table([get_span("a" * 16, None, {}, 0)]).schema
    empty = pa.Table.from_batches([pa.RecordBatch.from_pylist([], schema=schema)] * 2)
    assert empty.num_rows == 0 and empty.column("name").num_chunks >= 1
    assert span_dicts(empty) == []
    assert assemble(empty).trajectories.num_rows == 0
