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

import pyarrow as pa

log = logging.getLogger("trajlake.ingest.otlp.spool")

MAGIC = b"TLS1"
HEADER = struct.Struct("<4sQI")


def frame(payload: bytes) -> bytes:
    """A payload with its header: what is appended to a segment."""
    return HEADER.pack(MAGIC, len(payload), zlib.crc32(payload)) + payload


def encode_table(table: pa.Table) -> bytes:
    """One spool payload: the table as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def record_size(item: bytes | pa.Table) -> int:
    # Not `Table.nbytes`: it walks every buffer slice (100 us for a request's rows), and the
    # spool only needs a back-pressure estimate.
    return len(item) if isinstance(item, bytes) else item.get_total_buffer_size()


def decode_table(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(payload)).read_all()


def read_segment(path: Path) -> tuple[list[bytes], int]:
    """The complete records of a segment and the byte offset where valid data ends."""
    data = path.read_bytes()
    records: list[bytes] = []
    offset = 0
    while offset + HEADER.size <= len(data):
        magic, length, crc = HEADER.unpack_from(data, offset)
        start = offset + HEADER.size
        end = start + length
        if magic != MAGIC or end > len(data) or zlib.crc32(data[start:end]) != crc:
            break  # a torn tail: this request was never acknowledged
        records.append(data[start:end])
        offset = end
    if offset != len(data):
        log.warning("spool segment %s: ignoring %d bytes of torn tail", path, len(data) - offset)
    return records, offset
