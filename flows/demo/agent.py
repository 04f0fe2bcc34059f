"""The demo's production agent: a tool-calling loop written with the plain `openai` SDK.

Nothing in it knows about trajlake. Its LLM calls are traced by the OpenTelemetry
OpenAI instrumentation (content captured on span attributes, GenAI conventions); the
agent adds the `invoke_agent` and `execute_tool` spans the GenAI conventions describe.
Pointing the exporter at `trajlake collect` is the only change trajlake asks for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

import ingest
from flows.demo.task import SYSTEM_PROMPT, TOOL_DEFINITIONS, TOOLS

AGENT_NAME = "calculator"


@dataclass
class AgentRun:
    question: str
    answer: str | None
    trace_id: str
    tool_calls: int
    span_context: trace.SpanContext | None = None


def run_agent(
    client: Any,
    model: str,
    question: str,
    tracer: trace.Tracer,
    max_steps: int = 4,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int | None = None,
) -> AgentRun:
    """Answer `question` with the tools, under `system_prompt`; returns the answer and the run's trace id.

    `seed`: the LLM's sampling seed, `seed + step` for the run's `step`-th call (the OpenAI `seed`
    parameter, which vLLM and `trajlake serve-sampler` honour per request), so the run's answer
    does not depend on what else the server was batching; None leaves the seeds to the server."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": question},
    ]
    calls = 0
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT_NAME}",
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            # opt-in in the GenAI conventions; it is what lets replay show the model its tools
            "gen_ai.tool.definitions": json.dumps(TOOL_DEFINITIONS),
        },
    ) as root:
        context = root.get_span_context()
        trace_id = format(context.trace_id, "032x")
        for step in range(max_steps):
            seeded = {} if seed is None else {"seed": seed + step}
            response = client.chat.completions.create(
                model=model, messages=messages, tools=TOOL_DEFINITIONS, **seeded
            )
            message = response.choices[0].message
            if not message.tool_calls:
                return AgentRun(question, message.content, trace_id, calls, context)
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                calls += 1
                messages.append(_execute_tool(tracer, call.id, call.function.name, call.function.arguments))
        return AgentRun(question, None, trace_id, calls, context)


def _execute_tool(tracer: trace.Tracer, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    with tracer.start_as_current_span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.arguments": arguments,
        },
    ) as span:
        try:
            result = str(TOOLS[name](**json.loads(arguments)))
        except Exception as exc:  # a tool failure is the model's to see, not the agent's to crash on
            result = f"error: {exc}"
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
            span.set_attribute("error.type", type(exc).__name__)
        span.set_attribute("gen_ai.tool.call.result", result)
    return {"role": "tool", "tool_call_id": call_id, "content": result}


def record_feedback(provider: Any, run: AgentRun, correct: bool, correction: str | None = None) -> None:
    """The user's verdict on an answer, sent with `ingest.feedback` (the documented call any
    agent makes): a thumbs-up or -down on the run's trace, and with a thumbs-down, when the
    user gives it, the right answer (`correction`), which the lake keeps as a label of the
    conversation. `provider`: what `ingest.instrument` returned.
    """
    if run.span_context is None:
        return

    ingest.feedback(
        correct,
        comment="thumbs up" if correct else "thumbs down: wrong number",
        correct_answer=correction if not correct else None,
        trace_id=run.trace_id,
        span_id=format(run.span_context.span_id, "016x"),
        provider=provider,
    )
