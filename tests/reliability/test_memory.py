"""Collector memory comes back after load, with the allocators' settings `trajlake collect` picks itself.

An outside test saw RSS go 154 -> 637 MB over 10,000 fuzzed requests and stay at 552 MB
idle: glibc gave each of the collector's many threads an arena that keeps what it once
held, and Arrow's mimalloc pool kept its pages. `trajlake collect` now starts with two
glibc arenas, a fixed mmap threshold and Arrow on the system allocator
(`ingest.otlp.memory`), with no variable for the user to set.

The first round of load brings DuckDB's, deltalake's and Polars' code and pools into
memory (~150 MB over a fresh process: ~60 MB of code, ~90 MB anonymous); after it, each
further round must leave the idle collector within `MARGIN_MB` of its RSS before it.
"""

from __future__ import annotations

import platform
import threading
import time

import httpx
import pytest

from bench.collector_memory import ALLOCATOR_ENV, load, stalled_client, wait_idle
from bench.ingest import rss_mb
from bench.otlp_workload import make_bodies
from flows.background import free_port
from store.lake import Lake
from tests.reliability.test_durability import start

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc; glibc's arenas"),
    pytest.mark.slow,
]

MARGIN_MB = 15  # measured on 2 cores: within 1-3 MB; with glibc's and Arrow's defaults +14 to +23
HEAP_MAX = 64 * 1024 * 1024  # a glibc thread arena's reserved, aligned mapping (64-bit)


def thread_arenas(pid: int) -> int:
    """glibc arenas other than the main one: 64 MiB-aligned anonymous mappings of exactly
    64 MiB (the part in use read-write, the rest PROT_NONE), as glibc reserves them."""
    regions = []
    with open(f"/proc/{pid}/maps") as handle:
        for line in handle:
            fields = line.split()
            low, high = (int(x, 16) for x in fields[0].split("-"))
            regions.append((low, high, fields[1], len(fields) > 5))
    count = 0
    for i, (low, high, perms, named) in enumerate(regions):
        if named or low % HEAP_MAX or not perms.startswith("rw"):
            continue
        if i + 1 < len(regions) and regions[i + 1][0] == high and regions[i + 1][2].startswith("---"):
            high = regions[i + 1][1]
        count += high - low == HEAP_MAX
    return count


def round_of_load(url: str, port: int, pid: int, bodies: list[bytes], seed: int) -> float:
    """Valid traces and fuzzed bodies from 6 threads, 5 stalled uploads; RSS once idle."""
    stalled: list[bool] = []
    stallers = [threading.Thread(target=stalled_client, args=(port, stalled)) for _ in range(5)]
    for thread in stallers:
        thread.start()
    statuses = load(url, bodies, requests=80, fuzz=800, concurrency=6, seed=seed)
    for thread in stallers:
        thread.join()
    assert all(status < 500 for status in statuses) and statuses[200] >= 80, statuses
    assert sum(stalled) == 5
    wait_idle(url)
    time.sleep(2)  # the flusher's idle pass returns freed pages (`release_memory`)
    return rss_mb(pid)


def test_memory_comes_back_after_load_with_bounded_allocators(lake: Lake, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for variable in ALLOCATOR_ENV:
        monkeypatch.delenv(variable, raising=False)  # the collector's own defaults, nothing set
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(lake, port, args=("--assemble", "--idle-timeout", "1", "--request-timeout-s", "1"))
    bodies = make_bodies(10)  # 100 realistic spans each, ~140 KiB
    fresh = rss_mb(process.pid)
    before = round_of_load(url, port, process.pid, bodies, seed=0)  # warm-up: code pages, pools
    after = [round_of_load(url, port, process.pid, bodies, seed=n) for n in (1, 2, 3)]
    assert max(after) <= before + MARGIN_MB, (fresh, before, after)
    assert httpx.get(f"{url}/health").json()["allocators"] == {
        "bounded": True,
        "malloc_arena_max": 2,
        "malloc_mmap_threshold": 131072,
        "arrow_pool": "system",
    }
    # Two arenas in all: the main one and one shared by every other thread (with glibc's
    # default, 8 per core: a dozen on 2 cores after this load, one per busy thread).
    assert thread_arenas(process.pid) <= 1
