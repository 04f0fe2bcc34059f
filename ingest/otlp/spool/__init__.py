"""A write-ahead spool: what makes an OTLP 200 mean "durable on disk".

Each accepted request's rows are appended, as one Arrow IPC record, to the active
segment file; a single writer thread group-commits whatever requests are queued (one
`write` + one `fsync` for many requests), and only then are the requests answered.
Segments are sealed by size or age and handed to the flusher, which writes them to the
lake as large Parquet files (atomic rename, fsync) and only then deletes them.

Crash safety, case by case:

- killed before the fsync: the request was never answered, the client retries; the
  torn tail record fails its length/CRC check and is ignored on recovery;
- killed after the fsync: the record is in a segment, replayed into Parquet on restart;
- killed between the Parquet commit and the segment delete: the segment is replayed
  again, and the lake's views keep one row per (trace_id, span_id).

Ownership: a spool directory belongs to one process at a time (an exclusive `flock` on
its `LOCK` file, released when the process ends, however it ends). Several collectors
on one lake each claim their own directory under the spool root (`claim_spool`); a
collector that starts after another died adopts the dead one's unflushed segments, so
nothing acknowledged waits for a process that will not come back.

Modules: `records` (the framed record format), `ownership` (locks, claims, adoption),
`writer` (the `Spool`: group commits, sealing, recovery).
"""

from ingest.otlp.spool.ownership import LOCK_FILE, adopt_orphans, claim_spool, lock_directory
from ingest.otlp.spool.records import HEADER, MAGIC, decode_table, encode_table, frame, read_segment
from ingest.otlp.spool.writer import Spool

__all__ = [
    "HEADER",
    "LOCK_FILE",
    "MAGIC",
    "Spool",
    "adopt_orphans",
    "claim_spool",
    "decode_table",
    "encode_table",
    "frame",
    "lock_directory",
    "read_segment",
]
