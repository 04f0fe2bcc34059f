"""One line of a chat-format JSONL file -> a `trajectories` row (and its `user_feedback` reward).

Accepted per line (OpenAI's chat format, what fine-tuning files and TRL's conversational
datasets hold): `messages` (roles `system`, `user`, `assistant`, `tool`; `content` a string
or a list of `{"type": "text", "text": ...}` parts; assistant `tool_calls` as
`{"id", "type": "function", "function": {"name", "arguments"}}`; tool messages'
`tool_call_id` and `name`), and optionally `tools` (tool definitions), `id`, `model`,
`agent_name`, `user_id`, `session_id`, `started_at` (ISO 8601), `metadata` (an object) and
`feedback` (a finite number: the conversation's `user_feedback`). Anything else is an error naming
the field; a line never half-converts.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime
from typing import Any

from store.messages import lake_message, lake_tool_call

ROLES = frozenset({"system", "user", "assistant", "tool"})
KNOWN = frozenset(
    {
        "messages",
        "tools",
        "id",
        "model",
        "agent_name",
        "user_id",
        "session_id",
        "started_at",
        "metadata",
        "feedback",
    }
)
SCORER = "import"  # the scorer of an imported `feedback` value


class LineError(ValueError):
    """What is wrong with one line (the loader adds the file and line number)."""


def _text(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise LineError(f"`{where}.content` must be a string or a list of text parts")


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if calls in (None, []):
        return []
    if not isinstance(calls, list):
        raise LineError(f"`{where}.tool_calls` must be a list")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise LineError(f"`{where}.tool_calls[{k}]` needs `function.name`")
        arguments = function.get("arguments", "")
        out.append(
            lake_tool_call(
                str(call.get("id") or f"call_{k}"),
                function["name"],
                arguments if isinstance(arguments, str) else json.dumps(arguments),
            )
        )
    return out


def message(raw: Any, index: int) -> dict[str, Any]:
    """One chat message in the lake's message struct."""
    where = f"messages[{index}]"
    if not isinstance(raw, dict):
        raise LineError(f"`{where}` must be an object")
    role = raw.get("role")
    if role not in ROLES:
        raise LineError(f"`{where}.role` is {role!r}; expected one of {', '.join(sorted(ROLES))}")
    return lake_message(
        role,
        _text(raw.get("content"), where),
        name=raw.get("name"),
        tool_call_id=raw.get("tool_call_id"),
        tool_calls=_tool_calls(raw.get("tool_calls"), where),
    )


# Longer than any conversation id a system hands out; a 10,000-character id was taken.
MAX_ID_CHARS = 1000


def id_problem(value: Any) -> str | None:
    """Why a line's `id` is refused: it names a trajectory (and, through it, files and report
    links), so it is a string or an integer of at most `MAX_ID_CHARS` characters, with no
    control character (NUL) and no `..` path segment."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"`id` must be a string or an integer, got {type(value).__name__}"
    text = str(value)
    if not text or len(text) > MAX_ID_CHARS:
        return f"`id` must be 1 to {MAX_ID_CHARS} characters, got {len(text):,}"
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "`id` holds a control character (NUL, newline, ...)"
    if ".." in re.split(r"[/\\]", text):
        return f"`id` holds a `..` path segment: {text[:60]!r}"
    return None


def trajectory_id(obj: dict[str, Any]) -> str:
    """The given `id`, else a digest of the conversation (re-importing a file changes nothing)."""
    if obj.get("id") is not None:
        if problem := id_problem(obj["id"]):
            raise LineError(problem)
        return f"import-{obj['id']}"
    blob = json.dumps({"messages": obj["messages"], "tools": obj.get("tools")}, sort_keys=True, default=str)
    return "import-" + hashlib.sha256(blob.encode()).hexdigest()[:24]


def convert(obj: Any, imported_at: datetime) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The trajectory row of one line's object, and its feedback reward row (None without)."""
    if not isinstance(obj, dict):
        raise LineError("a line must be a JSON object")
    unknown = sorted(set(obj) - KNOWN)
    if unknown:
        raise LineError(f"unknown field `{unknown[0]}` (known: {', '.join(sorted(KNOWN))})")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        raise LineError("`messages` must be a non-empty list")
    messages = [message(m, i) for i, m in enumerate(raw)]
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise LineError("`tools` must be a list of tool definitions")
    if obj.get("metadata") is not None and not isinstance(obj["metadata"], dict):
        raise LineError("`metadata` must be an object")
    started = imported_at
    if obj.get("started_at") is not None:
        try:
            started = datetime.fromisoformat(str(obj["started_at"]).replace("Z", "+00:00"))
        except ValueError:
            raise LineError(f"`started_at` {obj['started_at']!r} is not an ISO 8601 time") from None
        started = started if started.tzinfo else started.replace(tzinfo=UTC)
    feedback = obj.get("feedback")
    if feedback is not None and (isinstance(feedback, bool) or not isinstance(feedback, (int, float))):
        raise LineError("`feedback` must be a number")
    if feedback is not None and not math.isfinite(feedback):  # NaN or inf would poison every mean
        raise LineError(f"`feedback` is {feedback!r}; rewards must be finite numbers")
    tid = trajectory_id(obj)
    final = next(
        (m["content"] for m in reversed(messages) if m["role"] == "assistant" and m["content"]), None
    )
    row = {
        "trajectory_id": tid,
        "source": "import",
        "started_at": started,
        "session_id": obj.get("session_id"),
        "user_id": obj.get("user_id"),
        "agent_name": obj.get("agent_name"),
        "model": obj.get("model"),
        "policy": obj.get("model"),
        "messages": messages,
        "tools": json.dumps(tools) if tools is not None else None,
        "final_output": final,
        "metadata": json.dumps(obj.get("metadata") or {}),
        "has_content": True,
        "status": "ok",
    }
    reward = (
        {
            "trajectory_id": tid,
            "name": "user_feedback",
            "scorer": SCORER,
            "value": float(feedback),
            "scored_at": imported_at,
        }
        if feedback is not None
        else None
    )
    return row, reward
