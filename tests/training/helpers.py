"""Test helpers for the replay tests: a scripted sampler on the tiny tokenizer, row builders, tools."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from store.rows import utc_now
from training.replay.samplers.base import Completion, Sampler, SampleRequest

Script = Callable[[str], str]  # decoded prompt text -> completion text


class ScriptedSampler(Sampler):
    """A deterministic backend: the completion text is chosen by a script from the prompt text.

    It tokenises the scripted text with the real tiny tokenizer and ends it with the real EOS,
    so everything downstream (parsing, suffixes, decoding, storage) runs on genuine token ids.
    """

    backend = "scripted"

    def __init__(self, model: str, script: Script, *, delay_s: float = 0.0) -> None:
        super().__init__(model)
        self.script = script
        self.delay_s = delay_s
        self.requests: list[SampleRequest] = []

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        out = []
        for request in requests:
            self.requests.append(request)
            if self.delay_s:
                time.sleep(self.delay_s)
            prompt_text = self.tokenizer.decode(list(request.prompt_ids), skip_special_tokens=False)
            completions = []
            for i in range(request.n):
                text = self.script(prompt_text + f"\x00{i}")
                ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
                reason = "stop"
                if len(ids) > request.params.max_tokens:
                    ids, reason = ids[: request.params.max_tokens], "length"
                completions.append(Completion(tuple(ids), tuple(-0.5 for _ in ids), reason))
            out.append(completions)
        return out


class FailingSampler(ScriptedSampler):
    """A scripted backend whose server drops every request whose prompt contains `marker`."""

    def __init__(self, model: str, script: Script, marker: str, error: str = "backend went away") -> None:
        super().__init__(model, script)
        self.marker, self.error = marker, error

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        if any(self.marker in self.tokenizer.decode(list(r.prompt_ids)) for r in requests):
            raise ConnectionError(self.error)
        return super()._generate(requests)


def calculator_script(prompt: str) -> str:
    """Call the calculator once, then answer with its result."""
    text, _, _ = prompt.partition("\x00")
    if "<tool_response>" not in text:
        return '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 7"}}\n</tool_call>'
    result = text.rsplit("<tool_response>\n", 1)[1].split("\n</tool_response>", 1)[0]
    return f"The answer is {result}."


def calculator(expression: str) -> dict[str, Any]:
    """A tool: evaluates `a op b` for the tests."""
    a, op, b = expression.split()
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    return {"result": value}


async def async_calculator(expression: str) -> dict[str, Any]:
    await asyncio.sleep(0)
    return calculator(expression)


def broken_tool(expression: str) -> str:
    raise RuntimeError(f"cannot evaluate {expression}")


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


def make_trajectory(trajectory_id: str, **overrides: Any) -> dict[str, Any]:
    """A production trajectory row: system, user, a calculator call and its result, the answer."""

    def msg(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
        return {
            "role": role,
            "content": content,
            "name": extra.get("name"),
            "tool_call_id": extra.get("tool_call_id"),
            "tool_calls": extra.get("tool_calls") or [],
            "is_error": extra.get("is_error"),
        }

    row = {
        "trajectory_id": trajectory_id,
        "source": "otel",
        "started_at": utc_now(),
        "agent_name": "calc-agent",
        "model": "prod-model",
        "messages": [
            msg("system", "You are a careful math assistant."),
            msg("user", "What is 12 * 7?"),
            msg(
                "assistant",
                "",
                tool_calls=[
                    {"id": "c1", "name": "calculator", "arguments": json.dumps({"expression": "12 * 7"})}
                ],
            ),
            msg("tool", '{"result": 84}', name="calculator", tool_call_id="c1", is_error=False),
            msg("assistant", "The answer is 84."),
        ],
        "tools": json.dumps(TOOLS),
        "final_output": "The answer is 84.",
        "metadata": json.dumps({}),
    }
    row.update(overrides)
    return row


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A lake message as an OpenAI client sends it (tool-call arguments as JSON text)."""
    out: dict[str, Any] = {"role": message["role"], "content": message["content"] or ""}
    if message["tool_call_id"]:
        out["tool_call_id"] = message["tool_call_id"]
    if message["tool_calls"]:
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in message["tool_calls"]
        ]
    return out
