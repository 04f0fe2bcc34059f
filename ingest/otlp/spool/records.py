"""The spool's record format: one Arrow IPC stream per record, framed for torn-write detection.

Record layout: magic `TLS1`, little-endian u64 payload length, u32 CRC32 of the
payload, payload. A record whose frame does not check out is a torn tail (its request
was never acknowledged) and ends the segment.
"""

from __future__ import annotations

import logging
import struct
import zlib
from pathlib import Path
from typing import TypeAlias

import pyarrow as pa

log = logging.getLogger("trajlake.ingest.otlp.spool")

MAGIC = b"TLS1"
HEADER = struct.Struct("<4sQI")


# A payload is any bytes-like object: the spool writes Arrow buffers and reads records back as
# views of the segment's bytes, so a record's megabytes are never copied on either side.
Payload: TypeAlias = bytes | memoryview | pa.Buffer


def header(payload: Payload) -> bytes:
    """The frame header written before `payload`."""
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload))


def frame(payload: Payload) -> bytes:
    """A payload with its header: what is appended to a segment."""
    return header(payload) + bytes(payload)


def encode_table(table: pa.Table) -> pa.Buffer:
    """One spool payload: the table as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def record_size(item: Payload | pa.Table) -> int:
    # Not `Table.nbytes`: it walks every buffer slice (100 us for a request's rows), and the
    # spool only needs a back-pressure estimate.
    return item.get_total_buffer_size() if isinstance(item, pa.Table) else len(item)


def decode_table(payload: Payload) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


def read_segment(path: Path) -> tuple[list[memoryview], int]:
    """The complete records of a segment (views of its bytes) and the byte offset where valid
    data ends."""
    records, offset, size = split_records(memoryview(path.read_bytes()))
    if offset != size:
        log.warning("spool segment %s: ignoring %d bytes of torn tail", path, size - offset)
    return records, offset


def split_records(data: memoryview) -> tuple[list[memoryview], int, int]:
    """The complete records in a segment's bytes, where valid data ends, and the bytes' length."""
    records: list[memoryview] = []
    offset = 0
    while offset + HEADER.size <= len(data):
        magic, length, crc = HEADER.unpack_from(data, offset)
        start = offset + HEADER.size
        end = start + length
        if magic != MAGIC or end > len(data) or zlib.crc32(data[start:end]) != crc:
            break  # a torn tail: this request was never acknowledged
        records.append(data[start:end])
        offset = end
    return records, offset, len(data)
