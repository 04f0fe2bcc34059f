"""Values of incoming records normalised the same way by every source: ids, times, refusals.

Langfuse ids come in three shapes (OTel hex, UUIDs from older SDKs, anything else); the
lake needs 32-hex trace ids and 16-hex span ids, so they are converted stably here,
for observations and for the scores pointing at them, pulled or pushed alike.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
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
    except ValueError:
        raise BadRecord("bad_timestamp", f"`{what}` = {value!r} is not ISO-8601") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def maybe_time(value: Any, what: str) -> datetime | None:
    return None if value is None or value == "" else parse_time(value, what)
