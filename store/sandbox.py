"""A thread that cannot write a file: the kernel's word for it, not ours (Linux Landlock).

`trajlake sql` may read local files (`read_csv('notes.csv')`) like any DuckDB shell, and
DuckDB cannot tell a read from a write: its one gate (`enable_external_access` with
`allowed_directories`) lets a path be both read and written, so a `COPY ... TO` could
reach any file the query could read. Landlock (Linux 5.13+, unprivileged) closes the gap
underneath DuckDB: a thread restricts itself, and from then on the kernel refuses it and
every thread it starts (DuckDB's workers are started by the thread that opens the
database) any open for writing, create, truncate, rename, link, mkdir or remove, anywhere.
Files already open (stdout, a pipe) stay writable; nothing new can be. Where the ABI has
network rules (4+), TCP connect and bind are refused too unless the caller needs the
network (a lake on object storage is read through it).

The restriction is per thread and permanent, so `run_without_writes` runs its function on
a fresh thread that restricts itself first and ends with the function: the calling
process (a test runner, a flow worker) keeps its own rights. Where Landlock is missing
(macOS, an older kernel, a container that filters the syscalls), `write_sandbox_problem`
says why and callers fall back to a connection that opens no file at all.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from functools import cache
from typing import TypeVar

T = TypeVar("T")

# Syscall numbers of the generic table, which x86_64 and aarch64 share for these calls.
_CREATE_RULESET, _RESTRICT_SELF = 444, 446
_CREATE_RULESET_VERSION = 1  # flag: return the ABI version instead of a ruleset
_PR_SET_NO_NEW_PRIVS = 38

# Every access right that changes the file system (include/uapi/linux/landlock.h), by the
# ABI version that introduced it. Read, read-dir and execute are left unhandled: allowed.
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_CHAR = 1 << 6
_MAKE_DIR = 1 << 7
_MAKE_REG = 1 << 8
_MAKE_SOCK = 1 << 9
_MAKE_FIFO = 1 << 10
_MAKE_BLOCK = 1 << 11
_MAKE_SYM = 1 << 12
_REFER = 1 << 13  # ABI 2: link or rename a file into another folder
_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_ABI_1_WRITES = (_WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG) | (
    _MAKE_SOCK | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM
)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, too old, filtered)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def write_sandbox_problem() -> str | None:
    """Why this system cannot run a thread that is unable to write files; None when it can."""
    if not sys.platform.startswith("linux"):
        return f"the write sandbox needs Linux's Landlock; this is {sys.platform}"
    if landlock_abi() < 1:
        return "the write sandbox needs Linux's Landlock (kernel 5.13+, not filtered by the container)"
    return None


def forbid_writes_in_this_thread(*, network: bool = False) -> None:
    """Make the calling thread, and every thread it starts from now on, unable to write a
    file, and unless `network` to open a TCP connection, for the rest of its life. Raises
    `OSError` on failure."""
    problem = write_sandbox_problem()
    if problem:
        raise OSError(problem)
    abi = landlock_abi()
    fs = _ABI_1_WRITES | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 and not network else 0
    attr = _RulesetAttr(fs, net)
    size = ctypes.sizeof(attr) if abi >= 4 else ctypes.sizeof(ctypes.c_uint64)
    libc = _libc()
    # No rules are added: every handled right is refused everywhere.
    fd = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_RESTRICT_SELF, fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        libc.close(fd)


def run_without_writes(function: Callable[[], T], *, network: bool = False) -> T:
    """`function()` on a new thread that cannot write any file (nor start threads that can),
    nor reach the network unless `network`; its result or its exception comes back here.
    Raises `OSError` where there is no sandbox."""
    outcome: dict[str, object] = {}

    def body() -> None:
        try:
            forbid_writes_in_this_thread(network=network)
            outcome["value"] = function()
        except BaseException as exc:  # handed to the caller's thread, re-raised there
            outcome["error"] = exc

    thread = threading.Thread(target=body, name="trajlake-no-writes", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
