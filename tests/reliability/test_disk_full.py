"""A full disk, for real: a small tmpfs filled to the last byte (issue 45 item 4).

The collector answers 503 with Retry-After and acknowledges nothing it could not store
(checked by an outside tester); here, that the 503 and /health say *why* (the disk is
full, and where), that /health reports the failure for as long as writes fail, and that
both clear when space comes back, with every acknowledged span in the lake.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingest.otlp.app import create_app
from store.lake import Lake
from tests.ingest.conftest import make_config, sql, wait_for
from tests.ingest.fake_openai import serve_in_thread
from tests.reliability.test_durability import random_request

PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (ENOSPC from the kernel, not a simulated error)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"a tmpfs cannot be mounted here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Fill `disk` to the last byte; the filler file, to delete for space to come back."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (65536, 1):  # then the last partial block
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


def post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/traces", content=body, headers=PROTOBUF, timeout=30)


def test_a_full_spool_disk_is_named_in_the_503_and_health_until_space_returns(
    start_collector,  # type: ignore[no-untyped-def]
    small_disk: Path,
) -> None:
    spool = small_disk / "spool"
    collector = start_collector(spool_dir=str(spool), flush_seconds=3600, retry_after_s=3)
    first, first_ids = random_request(5)
    assert post(collector.url, first).status_code == 200
    filler = fill(small_disk)

    body, ids = random_request(50)
    refused = post(collector.url, body)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "3"
    message = refused.text
    assert "disk is full" in message and str(spool) in message and "ENOSPC" in message, message
    assert "behind" not in message  # the cause, not a queue length of 0 bytes
    health = httpx.get(f"{collector.url}/health")
    assert health.status_code == 503, health.text
    state = health.json()
    assert state["status"] == "failing" and "disk is full" in state["last_error"]
    assert any(str(spool) in failure for failure in state["failing"])
    assert post(collector.url, body).status_code == 503  # still full: still refused, still said

    filler.unlink()
    assert post(collector.url, body).status_code == 200
    health = httpx.get(f"{collector.url}/health")
    assert health.status_code == 200
    state = health.json()
    assert state["status"] == "ok" and state["last_error"] is None and state["failing"] == []

    collector.runtime.flush()
    stored = {r["span_id"] for r in sql(collector.lake, "SELECT span_id FROM spans")}
    assert stored == set(first_ids) | set(ids)  # everything acknowledged, once


def test_a_full_lake_disk_is_named_in_health_and_in_the_backlog_503_until_space_returns(
    small_disk: Path, tmp_path: Path
) -> None:
    # The spool on an ordinary disk, the lake on the small one: requests are acknowledged
    # (spooled), writing them to the lake fails.
    lake = Lake(str(small_disk / "lake"))
    config = make_config(lake, spool_dir=str(tmp_path / "spool"), flush_seconds=0.2, max_pending_mb=0.05)
    with serve_in_thread(create_app(config)) as url:
        check_full_lake_disk(url, lake, small_disk)


def check_full_lake_disk(url: str, lake: Lake, small_disk: Path) -> None:
    first, first_ids = random_request(3)
    assert post(url, first).status_code == 200
    wait_for(lambda: lake.has_table("spans") and len(sql(lake, "SELECT span_id FROM spans")) == 3)
    filler = fill(small_disk)

    body, ids = random_request(40)  # ~80 KB spooled: over the 50 KB backlog limit once unwritten
    assert post(url, body).status_code == 200
    state = wait_for(lambda: (h := httpx.get(f"{url}/health").json())["status"] == "failing" and h)
    assert "writing the spool to the lake fails: the disk is full" in state["last_error"]
    assert lake.root in state["last_error"]
    behind = post(url, random_request(1)[0])
    assert behind.status_code == 503 and "because writing the spool to the lake fails" in behind.text
    assert "disk is full" in behind.text

    os.unlink(filler)
    state = wait_for(lambda: (h := httpx.get(f"{url}/health").json())["status"] == "ok" and h)
    assert state["last_error"] is None and state["failing"] == []
    wait_for(lambda: len(sql(lake, "SELECT span_id FROM spans")) == 43)
    assert {r["span_id"] for r in sql(lake, "SELECT span_id FROM spans")} == set(first_ids) | set(ids)
