"""Which span attributes say whose a trace is: the identity keys, declared once.

Assembly (`ingest.assembly.trajectory`) takes a trajectory's `user_id` and `session_id` from
these keys, in this order of precedence (Langfuse's, then OpenInference's and OTel's, then
OpenLLMetry's association properties), on a span's attributes, its events' attributes, or
inside an OpenInference `metadata` JSON object. `forget --user-id X` erases the traces whose
spans carry X under one of them: a trace that only *mentions* X (an `app.target_user`, a
`gen_ai.operation.name` of `chat`, a message quoting it) is someone else's and stays.

Values are compared decoded (JSON text parsed, never searched as bytes), so an id stored as
raw UTF-8 by one writer and as `\\u00fc` escapes by another is the same id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

SESSION_KEYS = (
    "langfuse.session.id",
    "session.id",
    "gen_ai.conversation.id",
    "traceloop.association.properties.session_id",
    "langfuse.observation.metadata.langfuse_session_id",
)
USER_KEYS = ("langfuse.user.id", "user.id", "traceloop.association.properties.user_id", "enduser.id")
# Keys of an OpenInference `metadata` attribute (a JSON object: LangChain's run config metadata).
SESSION_METADATA_KEYS = ("session_id", "sessionId", "thread_id", "conversation_id")
USER_METADATA_KEYS = ("user_id", "userId")
METADATA_ATTRIBUTE = "metadata"

# The span columns (JSON text) identity keys are looked for in: `events` is a list of
# `{name, time, attributes}`, the others objects.
IDENTITY_COLUMNS = ("attributes", "resource", "events")


def identity_keys(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The attribute keys and `metadata` keys naming a `user_id` or a `session_id`."""
    if kind == "user_id":
        return USER_KEYS, USER_METADATA_KEYS
    if kind == "session_id":
        return SESSION_KEYS, SESSION_METADATA_KEYS
    raise ValueError(f"no identity keys for `{kind}`: use user_id or session_id")


def _text(value: Any) -> str | None:
    """An attribute value as the id text assembly makes of it (`str(value)`), None for none."""
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return str(value).lower()  # JSON's spelling, as DuckDB's json_extract_string gives it
    return str(value)


def _in_object(attrs: Mapping[str, Any], kind: str, value: str, column: str) -> list[str]:
    keys, metadata_keys = identity_keys(kind)
    found = [f'{column}."{k}"' for k in keys if _text(attrs.get(k)) == value]
    metadata = attrs.get(METADATA_ATTRIBUTE)
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    if isinstance(metadata, dict):
        found += [f'{column}.metadata."{k}"' for k in metadata_keys if _text(metadata.get(k)) == value]
    return found


def identity_matches(row: Mapping[str, Any], kind: str, value: str) -> list[str]:
    """Where a span row (its JSON text columns) names `value` as its `kind`: labels such as
    `attributes."user.id"` (empty: the row is not that user's or session's)."""
    found: list[str] = []
    for column in IDENTITY_COLUMNS:
        text = row.get(column)
        if not text:
            continue
        try:
            parsed = json.loads(text) if isinstance(text, (str, bytes)) else text
        except ValueError:
            continue
        if isinstance(parsed, dict):
            found += _in_object(parsed, kind, value, column)
        elif isinstance(parsed, list):  # events
            for event in parsed:
                attrs = event.get("attributes") if isinstance(event, dict) else None
                if isinstance(attrs, dict):
                    found += _in_object(attrs, kind, value, f"{column}[].attributes")
    return sorted(set(found))


def identity_sql(kind: str) -> list[tuple[str, str]]:
    """`(label, DuckDB condition)` per place a span names its `kind`, compared with `$v`
    (decoded by DuckDB's JSON functions). The `contains` guard is exact, not a heuristic: every
    key of a kind holds its word (`user`; `session`, `conversation` or `thread`) in ASCII,
    which no JSON writer escapes, and it spares parsing the spans that hold none."""
    keys, metadata_keys = identity_keys(kind)
    words = ("user",) if kind == "user_id" else ("session", "conversation", "thread")
    out = []
    for column in IDENTITY_COLUMNS:
        guard = "(" + " OR ".join(f"contains({column}, '{w}')" for w in words) + f") AND json_valid({column})"

        def when(condition: str, value: str, guard: str = guard) -> str:
            # CASE, not AND: DuckDB may evaluate both sides of an AND, and a JSON function
            # raises on text that is not JSON.
            return f"coalesce(CASE WHEN {guard} THEN (CASE WHEN {condition} THEN {value} END) END, false)"

        if column == "events":
            for k in keys:
                path = f'$[*].attributes."{k}"'
                extract = f"list_contains(json_extract_string({column}, '{path}'), $v)"
                out.append((f'{column}[].attributes."{k}"', when("true", extract)))
            continue
        for k in keys:
            extract = f"json_extract_string({column}, '$.\"{k}\"') = $v"
            out.append((f'{column}."{k}"', when("true", extract)))
        metadata = f"json_extract_string({column}, '$.{METADATA_ATTRIBUTE}')"
        for k in metadata_keys:
            extract = f"json_extract_string({metadata}, '$.\"{k}\"') = $v"
            out.append((f'{column}.metadata."{k}"', when(f"json_valid({metadata})", extract)))
    return out
