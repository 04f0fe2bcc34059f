"""The collector's memory: bounded allocators, so RSS comes back after a burst of requests.

A long-running collector sees bursts: every request's body, its decoded protobuf and its
Arrow rows are freed once spooled, but the allocators keep freed pages for reuse. With
their defaults that is hundreds of MB held by an idle process:

- glibc gives each allocating thread an arena (up to 8 per core) and each keeps what it
  once held: on many cores (uvicorn's, `asyncio.to_thread`'s, deltalake's tokio, DuckDB's
  and Polars' threads) RSS climbs round after round before it levels off;
- glibc raises its mmap threshold whenever a large block is freed, so later request
  bodies come from a heap that is not given back;
- Arrow's mimalloc pool keeps a reserved GiB-sized arena's pages resident after
  `release_unused()`.

`trajlake collect` caps glibc at two arenas, fixes the mmap threshold (bodies are mapped
and unmapped) and moves Arrow to the system allocator (`BOUNDED_ENV`): it starts itself
again with them in its environment (`reexec_bounded`), because by the time a command
runs, pyarrow's and Polars' imports have started threads that hold arenas of their own;
`bound_allocators()` applies what it can in a running process. `release_memory()` hands
freed pages back once a load is over. Each setting the user gave in the environment
wins over ours. `bench/collector_memory.py` measures it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from typing import Any

import pyarrow as pa

log = logging.getLogger("trajlake.ingest.otlp.memory")

ARENA_MAX = 2  # main arena + one for every other thread (the GIL serialises most allocation anyway)
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value, kept fixed instead of rising to 32 MiB
# What glibc reads when a process starts, and Arrow when it is imported.
BOUNDED_ENV = {
    "MALLOC_ARENA_MAX": str(ARENA_MAX),
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "ARROW_DEFAULT_MEMORY_POOL": "system",
}
_M_MMAP_THRESHOLD = -3  # mallopt parameters, from glibc's malloc.h
_M_ARENA_MAX = -8


def _load_libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # glibc only: musl and others have neither mallopt's arena knobs nor malloc_trim.
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


_libc = _load_libc()
_set: dict[str, Any] = {}  # what `bound_allocators` set in this process


def reexec_bounded(command: str) -> None:
    """Start this program again, same pid and arguments, with `BOUNDED_ENV` added to its
    environment where the user set nothing; returns at once when there is nothing to add.

    Only when `command` is on this process's own command line: a test runner invoking the
    CLI in-process must not be replaced.
    """
    missing = {k: v for k, v in BOUNDED_ENV.items() if k not in os.environ}
    if not missing or command not in sys.argv[1:]:
        return
    log.debug("restarting with %s", missing)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, **missing})


def bound_allocators() -> dict[str, Any]:
    """Cap glibc's arenas, fix its mmap threshold and put Arrow on the system allocator.

    Process-wide, and late: arenas that threads made before it stay (after
    `reexec_bounded` there are none beyond the cap). Library users of `create_app` keep
    their process's allocators; `trajlake collect` calls this. Returns what is in effect.
    """
    _set["bounded"] = True
    if _libc is not None:
        for variable, option, value in (
            ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX),
            ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        ):
            if variable not in os.environ and _libc.mallopt(option, value) == 1:
                _set[variable] = value
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        # Arrow's buffers here are few and large (a request's columns, a flush's batch): the
        # system allocator serves them as well, and gives them back with malloc_trim.
        pa.set_memory_pool(pa.system_memory_pool())
    state = allocators()
    log.debug("allocators: %s", state)
    return state


def allocators() -> dict[str, Any]:
    """The allocator settings in effect in this process (for `/health`)."""

    def setting(variable: str) -> int | str:
        given = os.environ.get(variable)
        if given is not None:
            return int(given) if given.isdigit() else given
        return _set.get(variable, "glibc default")

    return {
        "bounded": bool(_set.get("bounded")),
        "malloc_arena_max": setting("MALLOC_ARENA_MAX"),
        "malloc_mmap_threshold": setting("MALLOC_MMAP_THRESHOLD_"),
        "arrow_pool": pa.default_memory_pool().backend_name,
    }


def release_memory() -> None:
    """Return freed memory to the operating system, so RSS falls back after a burst.

    Arrow's pool and glibc's malloc (every arena) both keep freed pages for reuse; after a
    load peak that is memory an idle collector holds for nothing.
    """
    pa.default_memory_pool().release_unused()
    if _libc is not None:
        _libc.malloc_trim(0)


def rss_mb() -> float:
    """This process's resident set size in MiB (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm") as handle:
            resident_pages = int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
