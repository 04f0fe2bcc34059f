"""The shop's agent: a tool-calling loop on the plain `openai` SDK, traced into trajlake.

`ingest.instrument()` is the only change trajlake asks of it: the OpenAI calls are traced
inside an `invoke_agent` span (one run, one trajectory), with the tool definitions and the
user's id on it, and `ingest.feedback` sends what the customer thought of the answer (a
thumbs-down often with the right answer, which becomes a label). Run a batch of customers:

    python -m shop.agent --llm http://127.0.0.1:8001/v1 --model shop-llm-prod \
        --collector http://127.0.0.1:4318 --runs 200 --seed 0 --out production.jsonl

Each line of `--out` is one run: question, answer, right answer, correct, trace id.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
from opentelemetry import trace

import ingest
from shop.catalog import SYSTEM_PROMPT, TOOL_DEFINITIONS, TOOLS, Question, make_questions, normalize_answer

AGENT_NAME = "shop"


def execute_tool(tracer: trace.Tracer, call: Any) -> dict[str, Any]:
    """Run one tool call in an `execute_tool` span; a failing tool is the model's to see."""
    name, arguments = call.function.name, call.function.arguments
    with tracer.start_as_current_span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.call.arguments": arguments,
        },
    ) as span:
        try:
            result = str(TOOLS[name](**json.loads(arguments)))
        except Exception as exc:  # a bad call is an answer the model gets, as in production
            result = f"error: {exc}"
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
        span.set_attribute("gen_ai.tool.call.result", result)
    return {"role": "tool", "tool_call_id": call.id, "content": result}


def answer(
    client: openai.OpenAI, model: str, tracer: trace.Tracer, question: Question, user: str
) -> dict[str, Any]:
    """One customer's question answered: the agent's run, in one `invoke_agent` span."""
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question.text},
    ]
    reply: str | None = None
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT_NAME}",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,  # the trajectory's agent_name
            "gen_ai.tool.definitions": json.dumps(TOOL_DEFINITIONS),  # what replay shows the model
            "user.id": user,
        },
    ) as span:
        trace_id = format(span.get_span_context().trace_id, "032x")
        for _ in range(4):  # find, check, answer; one step to spare
            message = client.chat.completions.create(model=model, messages=messages, tools=TOOL_DEFINITIONS)
            choice = message.choices[0].message
            if not choice.tool_calls:
                reply = choice.content
                break
            messages.append(choice.model_dump(exclude_none=True))
            messages.extend(execute_tool(tracer, call) for call in choice.tool_calls)
    return {
        "question": question.text,
        "answer": reply,
        "expected": question.answer,
        "correct": normalize_answer(reply) == question.answer,
        "trace_id": trace_id,
    }


def send_feedback(run: dict[str, Any], corrects: bool) -> None:
    """The customer's verdict: thumbs up or down; `corrects`: a thumbs-down also says what the
    right answer was (the lake keeps it as the conversation's label)."""
    if run["correct"]:
        ingest.feedback(True, comment="thumbs up", trace_id=run["trace_id"])
    else:
        ingest.feedback(
            False,
            comment="thumbs down",
            correct_answer=run["expected"] if corrects else None,
            trace_id=run["trace_id"],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the shop agent on a batch of customers' questions.")
    parser.add_argument("--llm", required=True, help="the LLM's OpenAI base URL (…/v1)")
    parser.add_argument("--model", required=True, help="the model name to ask for")
    parser.add_argument("--collector", default="http://127.0.0.1:4318", help="`trajlake collect`'s URL")
    parser.add_argument("--runs", type=int, default=200, help="customers (agent runs)")
    parser.add_argument("--seed", type=int, default=0, help="which questions (the same seed: the same ones)")
    parser.add_argument("--concurrency", type=int, default=1, help="customers at once")
    parser.add_argument(
        "--correction-share", type=float, default=0.5, help="thumbs-down that give the answer"
    )
    parser.add_argument("--out", required=True, help="JSONL of the runs")
    args = parser.parse_args()

    provider = ingest.instrument(endpoint=args.collector, service_name="shop-agent")
    tracer = provider.get_tracer("shop-agent")
    client = openai.OpenAI(base_url=args.llm, api_key="unused", max_retries=2, timeout=600)
    questions = make_questions(args.runs, seed=args.seed)

    def one(item: tuple[int, Question]) -> dict[str, Any]:
        i, question = item
        run = answer(client, args.model, tracer, question, user=f"customer-{args.seed}-{i}")
        send_feedback(run, corrects=(i % 100) < 100 * args.correction_share)
        return run

    with ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool:
        runs = list(pool.map(one, enumerate(questions)))
    provider.force_flush()
    provider.shutdown()
    with open(args.out, "w") as out:
        out.writelines(json.dumps(run) + "\n" for run in runs)
    right = sum(run["correct"] for run in runs)
    print(f"{args.model}: {right}/{len(runs)} right ({right / max(1, len(runs)):.3f}) -> {args.out}")


if __name__ == "__main__":
    main()
