"""One judge call with retries: the OpenAI chat-completions request, error mapping, backoff.

Every failure becomes a `JudgeCallError` with a reason code. Retried (with exponential
backoff and jitter; a 429's `Retry-After` is honoured): `judge_timeout`,
`judge_rate_limited`, `judge_server_error`, `judge_unreachable`, and every invalid
answer from `parse.py`. Not retried: `judge_bad_request` (a 400 the same request would
get again) and `context_overflow`. Credentials or model rejected (401/403/404) raise
`JudgeConfigError` and stop the run: every other group would fail the same way.

Structured output: `json_schema` sends the strict schema as `response_format`;
`json_object` asks for any JSON object; `none` relies on the prompt and the tolerant
parser. `auto` starts with `json_schema` and, the first time the endpoint answers 400
about `response_format`, switches to `none` for the rest of the run.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from judging.config import JudgeConfig
from judging.errors import JudgeCallError, JudgeConfigError
from judging.ruler.parse import parse_verdicts
from judging.ruler.prompt import JudgePrompt, scores_schema


@dataclass
class JudgeAnswer:
    """A validated answer: label -> (score, explanation), plus what it cost to get."""

    verdicts: dict[str, tuple[float, str]]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    attempts: int = 1
    retry_reasons: list[str] = field(default_factory=list)


@dataclass
class CallCost:
    """Tokens spent across attempts (failed attempts cost tokens too)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


def response_format(mode: str, labels: list[str]) -> dict[str, Any] | None:
    """The `response_format` request field for a structured-output mode and a group's labels."""
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": "ruler_scores", "strict": True, "schema": scores_schema(labels)},
        }
    if mode == "json_object":
        return {"type": "json_object"}
    return None


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _is_response_format_rejection(exc: openai.APIStatusError) -> bool:
    text = str(exc).lower()
    return exc.status_code in (400, 422) and ("response_format" in text or "json_schema" in text)


def map_error(exc: Exception, config: JudgeConfig) -> JudgeCallError:
    """Turn an `openai` exception into a reason-coded `JudgeCallError` (or raise `JudgeConfigError`)."""
    if isinstance(exc, openai.APITimeoutError):
        return JudgeCallError("judge_timeout", f"no answer within {config.timeout_s:g}s", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return JudgeCallError("judge_unreachable", str(exc), retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status in (401, 403, 404):
            raise JudgeConfigError(config.model, config.base_url, status, str(exc)) from None
        if status == 429:
            return JudgeCallError(
                "judge_rate_limited", str(exc), retryable=True, retry_after=_retry_after(exc)
            )
        if status >= 500:
            return JudgeCallError("judge_server_error", f"HTTP {status}: {exc}", retryable=True)
        if status in (408, 409):
            return JudgeCallError("judge_http_error", f"HTTP {status}: {exc}", retryable=True)
        return JudgeCallError("judge_bad_request", f"HTTP {status}: {exc}", retryable=False)
    return JudgeCallError("judge_error", f"{type(exc).__name__}: {exc}", retryable=True)


class JudgeClient:
    """Sends prompts to one OpenAI-compatible endpoint, retrying as the module docstring says."""

    def __init__(self, config: JudgeConfig, client: openai.AsyncOpenAI | None = None) -> None:
        self.config = config
        self.client = client or openai.AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "not-needed",  # local servers (vLLM) accept any key
            max_retries=0,  # retries are ours: they must also cover invalid answers
            timeout=config.timeout_s,
        )
        self.mode = "json_schema" if config.structured_output == "auto" else config.structured_output
        self.fell_back = False
        self._rng = random.Random(config.seed)

    async def close(self) -> None:
        await self.client.close()

    def backoff(self, attempt: int, error: JudgeCallError) -> float:
        delay = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (attempt - 1))
        delay *= 0.5 + self._rng.random()  # jitter: concurrent groups do not retry in lockstep
        if error.retry_after is not None:
            delay = max(delay, min(error.retry_after, self.config.max_backoff_s))
        return delay

    async def _once(self, prompt: JudgePrompt, cost: CallCost) -> dict[str, tuple[float, str]]:
        request: dict[str, Any] = {"model": self.config.model, "messages": prompt.messages}
        sent_mode = self.mode
        fmt = response_format(sent_mode, list(prompt.labels))
        if fmt is not None:
            request["response_format"] = fmt
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if self.config.max_output_tokens is not None:
            request["max_tokens"] = self.config.max_output_tokens
        try:
            # `post` with the typed response instead of `chat.completions.create`: the same request,
            # errors and response model, without the SDK's recursive transform of the request body,
            # which cost more CPU per call than everything else here (it caps throughput at high
            # concurrency; see bench/judging.py). The body is plain JSON already.
            completion = await self.client.post("/chat/completions", cast_to=ChatCompletion, body=request)
        except openai.APIStatusError as exc:
            # Concurrent calls may all be rejected before the first switches modes: check what was sent.
            if (
                self.config.structured_output == "auto"
                and sent_mode != "none"
                and _is_response_format_rejection(exc)
            ):
                self.mode, self.fell_back = "none", True
                return await self._once(prompt, cost)
            raise map_error(exc, self.config) from None
        except openai.OpenAIError as exc:
            raise map_error(exc, self.config) from None
        if completion.usage is not None:
            cost.prompt_tokens += completion.usage.prompt_tokens or 0
            cost.completion_tokens += completion.usage.completion_tokens or 0
        if not completion.choices:
            raise JudgeCallError("empty_answer", "the judge returned no choices", retryable=True)
        choice = completion.choices[0]
        content = choice.message.content if choice.message is not None else None
        if choice.finish_reason == "length" and content:
            # Cut off mid-JSON: parse anyway (a complete list may precede the cut), else retry.
            try:
                return parse_verdicts(content, list(prompt.labels))
            except JudgeCallError:
                raise JudgeCallError(
                    "truncated_answer", "the answer hit max_tokens", retryable=True
                ) from None
        return parse_verdicts(content, list(prompt.labels))

    async def judge(self, prompt: JudgePrompt) -> JudgeAnswer:
        """Ask until a valid answer comes back or attempts run out (then raise the last error)."""
        cost = CallCost()
        reasons: list[str] = []
        attempt = 0
        while True:
            attempt += 1
            try:
                verdicts = await self._once(prompt, cost)
            except JudgeCallError as error:
                reasons.append(error.reason)
                if not error.retryable or attempt == self.config.max_attempts:
                    error.attempts = attempt
                    error.prompt_tokens, error.completion_tokens = cost.prompt_tokens, cost.completion_tokens
                    error.retry_reasons = reasons
                    raise
                await asyncio.sleep(self.backoff(attempt, error))
                continue
            return JudgeAnswer(verdicts, cost.prompt_tokens, cost.completion_tokens, attempt, reasons)
