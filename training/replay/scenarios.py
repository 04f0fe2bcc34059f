"""Scenarios: replayable prompt prefixes cut from production trajectories (or loaded from JSONL).

A scenario is what a policy is asked to do again: the conversation up to the first
assistant turn (or a chosen one), the tool definitions the agent had, the expected outcome
where someone who knows said it, and the tool results recorded in the source trajectory, so
a replay can answer the same tool calls the same way without the production systems
(`metadata.recorded_tools`).

`expected` comes, in this order, from a label of the conversation (`labels`: a correction
sent with the feedback, a file a person imported), from the source's own metadata (an
imported conversation's `expected`), or from the conversation's answer when its user rated
it right; never from an answer its user rated wrong. A conversation rated wrong without a
label is still a scenario (what production got wrong is what there is to learn), with no
`expected`: a reward that needs none scores it (RULER, a task's verifier). `expected_source`
says which (`label`, `metadata`, `rated_right`, or null), `rated` what the user said.

Ids and splits are deterministic: a scenario id hashes its source trajectory and cut turn
(or, from JSONL, its content), and the train/val split hashes the source trajectory, so
re-creating scenarios is idempotent and every scenario of one trajectory lands on the same
side of the split.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from store.messages import from_openai
from store.rows import utc_now
from training.replay.errors import ScenarioError

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Scenario:
    """One row of the `scenarios` table, with JSON columns parsed."""

    scenario_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    expected: Any = None
    split: str = "train"
    source_trajectory_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    expected_source: str | None = None  # store.vocabulary.ExpectedSource
    rated: str | None = None  # store.vocabulary.Rating: the source conversation's feedback

    @property
    def recorded_tools(self) -> list[dict[str, Any]]:
        """Tool calls and results recorded in the source trajectory: name, arguments, content, is_error."""
        return list(self.metadata.get("recorded_tools") or [])

    def openai_messages(self) -> list[dict[str, Any]]:
        """The prompt prefix as OpenAI chat messages (for user rollout functions)."""
        out = []
        for m in self.messages:
            msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
            if m.get("name") and m["role"] == "tool":
                msg["name"] = m["name"]
            if m.get("tool_call_id"):
                msg["tool_call_id"] = m["tool_call_id"]
            if m.get("tool_calls"):
                msg["tool_calls"] = [
                    {
                        "id": c.get("id"),
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in m["tool_calls"]
                ]
            out.append(msg)
        return out

    def to_row(self) -> dict[str, Any]:
        """The `scenarios` table row."""
        return {
            "scenario_id": self.scenario_id,
            "messages": self.messages,
            "tools": json.dumps(self.tools) if self.tools is not None else None,
            "expected": json.dumps(self.expected) if self.expected is not None else None,
            "split": self.split,
            "source_trajectory_id": self.source_trajectory_id,
            "created_at": utc_now(),
            "metadata": json.dumps(self.metadata),
            "expected_source": self.expected_source if self.expected is not None else None,
            "rated": self.rated,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Scenario:
        """Back from a `scenarios` row (as DuckDB/Arrow return it)."""
        return cls(
            scenario_id=row["scenario_id"],
            messages=[from_openai(m) for m in row["messages"] or []],
            tools=_loads(row.get("tools")),
            expected=_loads(row.get("expected")),
            split=row.get("split") or "train",
            source_trajectory_id=row.get("source_trajectory_id"),
            metadata=_loads(row.get("metadata")) or {},
            expected_source=row.get("expected_source"),
            rated=row.get("rated"),
        )


@dataclass(frozen=True)
class ScenarioResult:
    """What a create/load did: the scenario ids written and the trajectories skipped, with reasons."""

    scenario_ids: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (trajectory_id, reason code)
    splits: dict[str, int] = field(default_factory=dict)  # scenarios written per split


@dataclass(frozen=True)
class ScenarioConfig:
    """How scenarios are cut from trajectories and split."""

    turn: int = field(default=0, metadata={"help": "Cut before this assistant turn (0 = the first)."})
    val_fraction: float = field(
        default=0.1, metadata={"help": "Share of scenarios held out in the `val` split (by hash, stable)."}
    )
    feedback: str = field(
        default="user_feedback",
        metadata={
            "help": "The reward holding users' feedback: a conversation rated right gives its answer as "
            "`expected`; one rated wrong never does (its `expected` comes from a label, or it has none)."
        },
    )
    right_at: float = field(
        default=1.0, metadata={"help": "Feedback at or above this is `right` (thumbs up is 1)."}
    )
    wrong_at: float = field(
        default=0.0, metadata={"help": "Feedback at or below this is `wrong` (thumbs down is 0)."}
    )

    def __post_init__(self) -> None:
        if self.wrong_at >= self.right_at:
            raise ScenarioError(
                f"`wrong_at` ({self.wrong_at}) must be below `right_at` ({self.right_at})",
                item="wrong_at",
                reason="bad_config",
            )
        if self.turn < 0:
            raise ScenarioError(f"`turn` must be >= 0, got {self.turn}", item="turn", reason="bad_config")
        if not 0 <= self.val_fraction < 1:
            raise ScenarioError(
                f"`val_fraction` must be in [0, 1), got {self.val_fraction}",
                item="val_fraction",
                reason="bad_config",
            )


# --- pure functions -----------------------------------------------------------------------


def _loads(text: str | None) -> Any:
    if text is None or text == "":
        return None
    return json.loads(text) if isinstance(text, str) else text


def assign_split(key: str, val_fraction: float, salt: str = "") -> str:
    """`val` for a stable `val_fraction` of keys (by hash), `train` for the rest."""
    digest = hashlib.sha256(f"{salt}{key}".encode()).hexdigest()
    return "val" if int(digest[:8], 16) / 0xFFFFFFFF < val_fraction else "train"


def recorded_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool call in a conversation paired with its result (by `tool_call_id`, else by order)."""
    results_by_id = {
        m.get("tool_call_id"): m for m in messages if m.get("role") == "tool" and m.get("tool_call_id")
    }
    unmatched_results = [m for m in messages if m.get("role") == "tool" and not m.get("tool_call_id")]
    recorded = []
    for message in messages:
        for call in message.get("tool_calls") or []:
            result = results_by_id.get(call.get("id")) if call.get("id") else None
            if result is None and unmatched_results:
                result = unmatched_results.pop(0)
            if result is None:
                continue
            recorded.append(
                {
                    "name": call.get("name"),
                    "arguments": call.get("arguments") or "{}",
                    "content": result.get("content") or "",
                    "is_error": bool(result.get("is_error")),
                }
            )
    return recorded


def prompt_prefix(messages: list[dict[str, Any]], turn: int = 0) -> list[dict[str, Any]] | None:
    """Messages before the `turn`-th assistant message (0 = the first); None if there is no such turn."""
    seen = 0
    for i, message in enumerate(messages):
        if message.get("role") == "assistant":
            if seen == turn:
                return messages[:i]
            seen += 1
    # No assistant turn at all: the whole conversation is the prompt (a trace cut short).
    return list(messages) if turn == 0 and seen == 0 else None


def expected_of(row: dict[str, Any], label: str | None, rated: str | None) -> tuple[Any, str | None]:
    """(`expected`, where it came from) of a conversation: its label's (JSON text), its metadata's,
    or its answer when rated right; never the answer of a conversation rated wrong.

    >>> expected_of({"final_output": "41"}, None, "wrong"), expected_of({"final_output": "41"}, '"42"', "wrong")
    ((None, None), ('42', 'label'))
    >>> expected_of({"final_output": "42"}, None, "right"), expected_of({"final_output": "42"}, None, None)
    (({'final_output': '42'}, 'rated_right'), (None, None))
    """
    if label is not None:
        return json.loads(label), "label"
    metadata = _loads(row.get("metadata")) or {}
    if isinstance(metadata, dict) and metadata.get("expected") is not None:
        return metadata["expected"], "metadata"
    if rated == "right" and row.get("final_output"):
        return {"final_output": row["final_output"]}, "rated_right"
    return None, None


def scenario_from_trajectory(
    row: dict[str, Any],
    *,
    turn: int = 0,
    val_fraction: float = 0.1,
    label: str | None = None,
    rated: str | None = None,
) -> Scenario:
    """Cut a scenario from a trajectory row; raises `ScenarioError` (with a reason code) when it cannot.

    `label`: the `expected` JSON of the conversation's label, if it has one; `rated`: what its
    user said of it (`right`, `wrong`, None): together they decide `expected` (`expected_of`)."""
    trajectory_id = row["trajectory_id"]
    messages = [from_openai(m) for m in row.get("messages") or []]
    if not messages:
        raise ScenarioError(
            f"trajectory `{trajectory_id}` has no messages", item=trajectory_id, reason="no_messages"
        )
    prefix = prompt_prefix(messages, turn)
    if prefix is None:
        assistants = sum(m["role"] == "assistant" for m in messages)
        raise ScenarioError(
            f"trajectory `{trajectory_id}` has {assistants} assistant turns, so there is no turn {turn} to cut at",
            item=trajectory_id,
            reason="no_such_turn",
        )
    if not any(m["role"] in ("user", "tool") for m in prefix):
        raise ScenarioError(
            f"trajectory `{trajectory_id}` has no user message before assistant turn {turn} "
            f"(roles: {[m['role'] for m in messages][:8]})",
            item=trajectory_id,
            reason="no_prompt",
        )
    expected, expected_source = expected_of(row, label, rated)
    scenario_id = "sc-" + hashlib.sha256(f"{trajectory_id}\x00{turn}".encode()).hexdigest()[:16]
    return Scenario(
        scenario_id=scenario_id,
        messages=prefix,
        tools=_loads(row.get("tools")) or None,
        expected=expected,
        split=assign_split(trajectory_id, val_fraction),
        source_trajectory_id=trajectory_id,
        metadata={
            "turn": turn,
            "agent_name": row.get("agent_name"),
            "source_model": row.get("model"),
            "recorded_tools": recorded_tool_results(messages),
        },
        expected_source=expected_source,
        rated=rated,
    )


def scenario_from_json(obj: Any, *, where: str, val_fraction: float = 0.1) -> Scenario:
    """A scenario from one JSONL object: `messages` (required), `tools`, `expected`, `split`, `scenario_id`,
    `metadata`, `recorded_tools`."""
    if not isinstance(obj, dict):
        raise ScenarioError(
            f"{where}: expected a JSON object, got {type(obj).__name__}", item=where, reason="not_an_object"
        )
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ScenarioError(
            f"{where}: `messages` must be a non-empty list (keys present: {sorted(obj)})",
            item=where,
            reason="missing_messages",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else message
            raise ScenarioError(
                f"{where}: message {i} has role `{role}`; roles must be one of {', '.join(ROLES)}",
                item=where,
                reason="bad_role",
            )
    normalized = [from_openai(m) for m in messages]
    tools = obj.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ScenarioError(
            f"{where}: `tools` must be a list of tool definitions", item=where, reason="bad_tools"
        )
    split = obj.get("split")
    if split is not None and split not in ("train", "val"):
        raise ScenarioError(
            f"{where}: `split` is `{split}`; use `train` or `val`", item=where, reason="bad_split"
        )
    content_key = json.dumps({"messages": normalized, "tools": tools}, sort_keys=True)
    scenario_id = obj.get("scenario_id") or "sc-" + hashlib.sha256(content_key.encode()).hexdigest()[:16]
    metadata = dict(obj.get("metadata") or {})
    if obj.get("recorded_tools") is not None:
        metadata["recorded_tools"] = obj["recorded_tools"]
    return Scenario(
        scenario_id=str(scenario_id),
        messages=normalized,
        tools=tools or None,
        expected=obj.get("expected"),
        expected_source="metadata" if obj.get("expected") is not None else None,
        split=split or assign_split(str(scenario_id), val_fraction),
        source_trajectory_id=obj.get("source_trajectory_id"),
        metadata=metadata,
    )


def parse_scenarios_jsonl(
    lines: Iterable[str], *, source: str = "<jsonl>", val_fraction: float = 0.1
) -> list[Scenario]:
    """Parse every line first (all or nothing): the first bad line raises, naming `source:line`."""
    scenarios = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno})", item=where, reason="bad_json"
            ) from exc
        except RecursionError:
            raise ScenarioError(
                f"{where}: JSON nested too deep to read", item=where, reason="bad_json"
            ) from None
        scenarios.append(scenario_from_json(obj, where=where, val_fraction=val_fraction))
    return scenarios
