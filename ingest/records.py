"""Values of incoming records normalised the same way by every source: ids, times, refusals.

Langfuse ids come in three shapes (OTel hex, UUIDs from older SDKs, anything else); the
lake needs 32-hex trace ids and 16-hex span ids, so they are converted stably here,
for observations and for the scores pointing at them, pulled or pushed alike.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Any

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class BadRecord(ValueError):
    """One input record (an observation, a score) cannot be stored; `reason` is a snake_case code."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


# The times a record may carry. Outside them a time is a sender's bug (an unset clock, a
# nanosecond value read as seconds, a placeholder like 9999-12-31), and storing it would
# create a `dt` partition nobody asked for (`dt=0001-01-01`) or a value Python's datetime
# cannot read back. Senders' clocks drift, so the future is allowed a day past arrival.
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)
MAX_CLOCK_AHEAD = timedelta(days=1)
EARLIEST_NS = int(EARLIEST_TIME.timestamp()) * 10**9


def latest_time(received_at: datetime) -> datetime:
    """The latest time a record received at `received_at` may carry."""
    return received_at + MAX_CLOCK_AHEAD


def time_problem(value: datetime, received_at: datetime) -> str | None:
    """Why `value` cannot be stored (outside [`EARLIEST_TIME`, arrival + a day]), or None.

    >>> time_problem(datetime(1970, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    '1970-01-01T00:00:00+00:00 is before 2000-01-01'
    """
    if value < EARLIEST_TIME:
        return f"{value.isoformat()} is before {EARLIEST_TIME:%Y-%m-%d}"
    if value > latest_time(received_at):
        return (
            f"{value.isoformat()} is more than a day after it was received ({received_at:%Y-%m-%dT%H:%M:%SZ})"
        )
    return None


def check_time(value: datetime, what: str, received_at: datetime) -> datetime:
    """`value`, or `BadRecord('bad_timestamp')` naming `what` when it is out of range."""
    problem = time_problem(value, received_at)
    if problem is not None:
        raise BadRecord("bad_timestamp", f"`{what}` = {problem}")
    return value


def to_trace_id(langfuse_id: str) -> str:
    """A Langfuse trace id as the lake's 32 lowercase hex chars (stable, never random).

    >>> to_trace_id("5B8EFFF798038103D269B633813FC60C")
    '5b8efff798038103d269b633813fc60c'
    >>> to_trace_id("0f8fad5b-d9cb-469f-a165-70867728950e")
    '0f8fad5bd9cb469fa16570867728950e'
    """
    low = langfuse_id.lower()
    if _HEX32.match(low):
        return low
    if _UUID.match(langfuse_id):
        return low.replace("-", "")
    return hashlib.sha256(b"langfuse-trace:" + langfuse_id.encode()).hexdigest()[:32]


def to_span_id(langfuse_id: str) -> str:
    """A Langfuse observation id as 16 lowercase hex chars (itself when it already is)."""
    low = langfuse_id.lower()
    if _HEX16.match(low):
        return low
    return hashlib.sha256(b"langfuse-observation:" + langfuse_id.encode()).hexdigest()[:16]


def parse_time(value: Any, what: str) -> datetime:
    """An ISO-8601 string (or datetime) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        raise BadRecord("bad_timestamp", f"`{what}` is {value!r}, expected an ISO-8601 string")
    try:
        parsed = datetime.fromisoformat(value)
        parsed.astimezone(UTC)  # an offset near year 1 or 9999 overflows here, not later
    except (ValueError, OverflowError):
        raise BadRecord("bad_timestamp", f"`{what}` = {value!r} is not ISO-8601") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def maybe_time(value: Any, what: str) -> datetime | None:
    return None if value is None or value == "" else parse_time(value, what)
