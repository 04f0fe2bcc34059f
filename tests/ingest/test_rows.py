"""`span_dicts`: a `spans` table as the rows every normaliser reads."""

from __future__ import annotations

import pyarrow as pa

from ingest.assembly import span_dicts
from tests.ingest.test_assemble import get_span, spans_table


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
