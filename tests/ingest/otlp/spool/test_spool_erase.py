"""Erasing traces from spools: dead collectors' segments rewritten, live ones waited for."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa

from ingest.otlp.spool import decode_table, encode_table, frame, lock_directory, read_segment
from ingest.otlp.spool.erase import count_in_spools, erase_from_spools

ERASED, KEPT = "a" * 32, "b" * 32


def _segment(directory: Path, *records: list[dict[str, str]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "seg-000001.wal"
    path.write_bytes(b"".join(frame(encode_table(pa.Table.from_pylist(rows))) for rows in records))
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    records, _ = read_segment(path)
    return [row for record in records for row in decode_table(record).to_pylist()]


def test_a_dead_spool_loses_the_erased_rows_and_keeps_the_others(tmp_path: Path) -> None:
    mention = {"trace_id": "c" * 32, "attributes": json.dumps({"user.id": "u-9"})}
    path = _segment(
        tmp_path / "c-0000",
        [{"trace_id": ERASED, "attributes": "{}"}, {"trace_id": KEPT, "attributes": "{}"}],
        [{"trace_id": ERASED, "attributes": "{}"}],  # a record of erased rows only disappears
        [mention],
    )
    assert count_in_spools(tmp_path, [ERASED], ("user_id", "u-9")) == 3
    outcome = erase_from_spools(tmp_path, [ERASED], ("user_id", "u-9"))
    assert outcome.rows_removed == 3 and outcome.segments_rewritten == 1 and not outcome.waiting
    assert _rows(path) == [{"trace_id": KEPT, "attributes": "{}"}]
    assert ERASED.encode() not in path.read_bytes() and b"u-9" not in path.read_bytes()


def test_a_live_spool_is_never_rewritten_and_is_reported_when_it_does_not_flush(tmp_path: Path) -> None:
    path = _segment(tmp_path / "c-0001", [{"trace_id": ERASED, "attributes": "{}"}])
    fd = lock_directory(tmp_path / "c-0001")  # a live collector holds it
    try:
        before = path.read_bytes()
        outcome = erase_from_spools(tmp_path, [ERASED], wait_s=0.3, poll_s=0.1)
        assert outcome.waiting == {str(tmp_path / "c-0001"): 1} and outcome.rows_removed == 0
        assert path.read_bytes() == before
    finally:
        os.close(fd)
