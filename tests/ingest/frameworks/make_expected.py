"""Write `expected/<config>.json`: what the ONE trajectory of each recorded run must contain.

    python -m tests.ingest.frameworks.make_expected [NAME ...]

Derived from what the scripted run DID, never from trajlake's output:

- the conversation is the one the scripted model saw (`llm_exchanges.json`: the last request's
  messages or Responses input, plus the answer the server gave) — so the system prompt is the
  framework's real one (ADK, CrewAI, smolagents add their own text), the tool result is the
  text the model received (ADK wraps it as `{"result": ...}`), the tool definitions are the
  `tools` the framework sent to the model;
- token sums add the scripted usage of every answered call whose answer carried usage
  (a chat stream without `stream_options.include_usage` carries none);
- model / session / user: what the telemetry can know. The answering model name
  (`gpt-4o-mini-2024-07-18`) when the recording carries it as a value (not only inside the
  Python repr of a response object), else the requested name as the recording spells it; session and user ids only when the agent's ids
  (`conv-42`, `user-7`) occur in the recording at all (`null` otherwise: the framework
  did not send them, see `notes`);
- agent names: how each framework named the agent (table below).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tests.ingest.frameworks import weather_script as s
from tests.ingest.frameworks.dump import decode

HERE = Path(__file__).resolve().parent

# How each framework names the agent of agents/<config>.py (None: the framework has no agent name).
AGENT_NAMES = {
    "openai-agents": "weather-agent",
    "pydantic-ai": "weather-agent",
    "langgraph": "weather-agent",
    "langfuse (Python SDK v5)": "weather-agent",
    "smolagents": "weather_agent",
    "strands-agents": "weather-agent",
    "google-adk": "weather_agent",
    "llama-index": "weather-agent",
    "crewai": "weather-agent",
    "vercel-ai-sdk (TypeScript)": "weather-agent",
}


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text") or part.get("content") or "" for part in content if isinstance(part, dict)
        )
    return json.dumps(content)


def _chat_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in request.get("messages") or []:
        message: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"))}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            message["tool_call_id"] = m["tool_call_id"]
        out.append(message)
    return out


def _responses_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.get("instructions"):
        out.append({"role": "system", "content": request["instructions"]})
    items = request.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "message" or ("role" in item and kind not in ("function_call", "function_call_output")):
            out.append({"role": item["role"], "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item["call_id"], "name": item["name"], "arguments": item["arguments"]}
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls") is not None:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append(
                {"role": "tool", "content": _text(item.get("output")), "tool_call_id": item["call_id"]}
            )
    return out


def _tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for t in request.get("tools") or []:
        f = t.get("function") or t
        tools.append(
            {"name": f.get("name"), "description": f.get("description"), "parameters": f.get("parameters")}
        )
    return tools


def _usage_sent(exchange: dict[str, Any]) -> bool:
    if exchange["status"] != 200:
        return False
    request = exchange["request"]
    if exchange["path"].endswith("/responses") or not request.get("stream"):
        return True
    return bool((request.get("stream_options") or {}).get("include_usage"))


# The tool's parameter schema as JSON text, at any depth of escaping: `"city": {` or `\\"city\\": {`.
_PARAMETER_SCHEMA = re.compile(r'\\*"city\\*"\s*:\s*\{')
_CONVERSATION_ID = re.compile(r'"gen_ai\.conversation\.id",\s*"value":\s*\{"stringValue":\s*"([^"]+)"')


def _conversation_id(text: str) -> str | None:
    """The GenAI conversation id the telemetry carries (a framework may make its own)."""
    found = _CONVERSATION_ID.search(text)
    return found.group(1) if found else None


def _recording_text(folder: Path, manifest: dict[str, Any]) -> str:
    parts = []
    for entry in manifest["requests"]:
        if entry["path"].endswith("/metrics"):  # a trajectory is built from traces and logs only
            continue
        try:
            document = decode(entry, folder)
        except Exception:
            continue
        if document is not None:
            parts.append(json.dumps(document))
    return "\n".join(parts)


def expected_for(name: str) -> dict[str, Any]:
    folder = HERE / "recordings" / name
    manifest = json.loads((folder / "manifest.json").read_text())
    exchanges = json.loads((folder / "llm_exchanges.json").read_text())
    last = exchanges[-1]
    request = last["request"]
    responses_api = last["path"].endswith("/responses")
    messages = _responses_messages(request) if responses_api else _chat_messages(request)
    answered = last["status"] == 200
    if answered:
        if last["turn"] == 2 and any(t["name"] == s.FINAL_TOOL for t in _tools(request)):
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": s.FINAL_CALL_ID,
                            "name": s.FINAL_TOOL,
                            "arguments": json.dumps({"answer": s.FINAL_ANSWER}),
                        }
                    ],
                }
            )
        elif last["turn"] == 2:
            messages.append({"role": "assistant", "content": s.FINAL_ANSWER})
        else:  # the run stopped after the tool call (the failing run: the tool raised)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": s.TOOL_CALL_ID, "name": s.TOOL_NAME, "arguments": s.TOOL_ARGUMENTS}
                    ],
                }
            )
    error = manifest["agent_result"].get("error")
    if error and s.TOOL_ERROR_TEXT in error:  # the tool raised: its call ends the run as an error result
        messages.append({"role": "tool", "content": None, "tool_call_id": s.TOOL_CALL_ID, "is_error": True})
    usage = [s.USAGE[e["turn"] - 1] for e in exchanges if _usage_sent(e)]
    text = _recording_text(folder, manifest)
    requested = request.get("model")
    # The answering model counts when the telemetry has it as a value (JSON: double quotes, escaped
    # or not), not when it only occurs inside a Python repr of a response object.
    if re.search(r'\\*"' + re.escape(s.MODEL) + r'\\*"', text):
        model = s.MODEL
    elif f"openai/{requested}" in text:
        model = f"openai/{requested}"
    else:
        model = requested
    failed = bool(manifest["agent_result"].get("error")) or not answered
    has_content = s.TOOL_RESULT in text or s.QUESTION in text
    if not has_content:
        # A content-free run: the structure is all there is. The model's turns and the tool's
        # execution are spans; what the model was sent (system, user) is content.
        messages = [{**m, "content": None} for m in messages if m["role"] in ("assistant", "tool")]
    tool_message = next(
        (
            m
            for m in messages
            if m["role"] == "tool"
            or (m["role"] == "user" and (m.get("content") or "").startswith("Observation:"))
        ),
        None,
    )
    notes = []
    session = "conv-42" if "conv-42" in text else _conversation_id(text)
    if "conv-42" not in text:
        notes.append(
            "the session id the agent set (conv-42) is not in the telemetry"
            + (f"; the framework's own conversation id ({session}) is" if session else "")
        )
    tools = _tools(request)
    if not _PARAMETER_SCHEMA.search(text):
        notes.append("the tool parameters are not in the telemetry (sent as null or not at all)")
        tools = [{**t, "parameters": None} for t in tools]
    if "user-7" not in text:
        notes.append("the user id the agent set (user-7) is not in the telemetry")
    if not usage or len(usage) < len([e for e in exchanges if e["status"] == 200]):
        notes.append("some model answers carried no usage (stream without include_usage)")
    if any(m["role"] == "user" and "Observation:" in (m.get("content") or "") for m in messages):
        notes.append(
            "the framework sends tool calls and results to the model as text (assistant "
            "'Calling tools:' / user 'Observation:'); the roles here are what the model saw"
        )
    return {
        "config": name,
        "framework": manifest["framework"],
        "trajectories": 1,
        "source": "langfuse"
        if any("/api/public/otel/" in r["path"] for r in manifest["requests"])
        else "otel",
        "roles": [m["role"] for m in messages],
        "messages": messages,
        "tool_call": {
            "id": s.TOOL_CALL_ID,
            "name": s.TOOL_NAME,
            "arguments": json.loads(s.TOOL_ARGUMENTS) if has_content else None,
        },
        "tool_result": None
        if tool_message is None
        else {
            "content": tool_message.get("content"),
            "tool_call_id": tool_message.get("tool_call_id"),
            "is_error": bool(tool_message.get("is_error")),
        },
        "final_output": None if failed or not has_content else s.FINAL_ANSWER,
        "input_tokens": sum(u[0] for u in usage) if usage else None,
        "output_tokens": sum(u[1] for u in usage) if usage else None,
        "model": model,
        "agent_name": AGENT_NAMES.get(manifest["framework"]),
        "tools": tools,
        "session_id": session,
        "user_id": "user-7" if "user-7" in text else None,
        "status": "error" if failed else "ok",
        "error": manifest["agent_result"].get("error"),
        "has_content": has_content,
        "scores": ["user_feedback", "tone"]
        if any(r["path"] == "/api/public/scores" for r in manifest["requests"])
        else [],
        "notes": notes,
    }


def main() -> None:
    names = sys.argv[1:] or sorted(
        p.name for p in (HERE / "recordings").iterdir() if (p / "manifest.json").exists()
    )
    (HERE / "expected").mkdir(exist_ok=True)
    for name in names:
        expected = expected_for(name)
        (HERE / "expected" / f"{name}.json").write_text(json.dumps(expected, indent=1) + "\n")
        print(
            f"{name}: roles={expected['roles']} tokens={expected['input_tokens']}/{expected['output_tokens']} "
            f"model={expected['model']} session={expected['session_id']} user={expected['user_id']}"
        )


if __name__ == "__main__":
    main()
