"""The shape of what a completion or adapter request's fields may hold, checked before a
server parses them: one field of the wrong type or size was a 500 (`seed: 2**80`
overflowed torch's generator, `prompt: [[[...]]]` reached `int(list)`, an adapter body
that was a list reached `.get`) or was accepted and ignored (`min_tokens: 1e9`,
`top_logprobs: 1e6`). Each check returns why a field is refused, or None; the same checks
run in front of `serve-sampler`'s app and of vLLM (`request_limits.guarded`). What needs
the model (its vocabulary, its context) is checked where the model is known
(`openai_app.create_app`). Nothing heavy is imported: vLLM's process imports this module.
"""

from __future__ import annotations

import math
from typing import Any

from store.sampling import TEMPERATURE_RULE, is_temperature

# The seeds torch's and vLLM's generators take (a signed 64-bit integer; `seed + j` for a
# request's `n` samples stays within the unsigned range torch also accepts).
SEED_RANGE = (-(2**63), 2**63 - 1)
# Token ids are 32-bit in every engine; an id past the model's vocabulary is refused where
# the vocabulary is known.
MAX_TOKEN_ID = 2**31 - 1
# vLLM's default `--max-logprobs`: the most alternatives per token a request may ask for.
MAX_TOP_LOGPROBS = 20
# OpenAI's bounds for `logit_bias`: at most 300 tokens, each biased by -100 to 100.
MAX_LOGIT_BIAS_TOKENS = 300
LOGIT_BIAS_RANGE = (-100.0, 100.0)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite JSON number (Python's JSON reader takes `Infinity` and `NaN` too)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past a float's range
        return False


def _token_ids_problem(ids: list[Any], where: str) -> str | None:
    if not ids:
        return f"`{where}` holds an empty list of token ids"
    for token in ids:
        if not _is_int(token) or not 0 <= token <= MAX_TOKEN_ID:
            return f"`{where}` must hold token ids (integers from 0), got {str(token)[:40]}"
    return None


def prompt_problem(prompt: Any) -> str | None:
    """Why a completion request's `prompt` is refused: it must be text, a list of token ids,
    or a list of those (no deeper nesting, no other types)."""
    shape = "`prompt` must be text, a list of token ids, or a list of those"
    if prompt is None or isinstance(prompt, str):
        return None
    if not isinstance(prompt, list) or not prompt:
        return shape
    if all(_is_int(t) for t in prompt):
        return _token_ids_problem(prompt, "prompt")
    for i, item in enumerate(prompt):  # a batch: texts and lists of token ids
        if isinstance(item, list):
            if problem := _token_ids_problem(item, f"prompt[{i}]"):
                return problem
        elif not isinstance(item, str):
            return shape
    return None


def messages_problem(messages: Any) -> str | None:
    """Why a chat request's `messages` are refused: a list of JSON objects with a string `role`."""
    if messages is None:
        return None
    if not isinstance(messages, list):
        return "`messages` must be a list of message objects"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"`messages[{i}]` must be an object with a `role`"
    return None


def sampling_problem(body: dict[str, Any], max_tokens_limit: int) -> str | None:
    """Why one of a request's sampling fields is refused (wrong type, or out of the range any
    engine takes): `seed`, `temperature`, `top_p`, `top_k`, `min_tokens`, `top_logprobs`,
    `logprobs`, `logit_bias`, `stop_token_ids`."""
    seed = body.get("seed")
    if seed is not None and (not _is_int(seed) or not SEED_RANGE[0] <= seed <= SEED_RANGE[1]):
        return f"`seed` must be an integer from -2**63 to 2**63-1, got {str(seed)[:40]}"
    temperature, top_p = body.get("temperature"), body.get("top_p")
    if temperature is not None and not is_temperature(temperature):
        return f"`temperature` must be a number {TEMPERATURE_RULE}, got {str(temperature)[:40]}"
    if top_p is not None and (not _is_number(top_p) or not 0 < top_p <= 1):
        return f"`top_p` must be a number in (0, 1], got {str(top_p)[:40]}"
    top_k = body.get("top_k")
    if top_k is not None and (not _is_int(top_k) or not -1 <= top_k <= MAX_TOKEN_ID):
        return f"`top_k` must be an integer from -1 (off), got {str(top_k)[:40]}"
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    ceiling = max_tokens if _is_int(max_tokens) else max_tokens_limit
    min_tokens = body.get("min_tokens")
    if min_tokens is not None and (not _is_int(min_tokens) or not 0 <= min_tokens <= ceiling):
        return (
            f"`min_tokens` must be an integer from 0 to `max_tokens` ({ceiling}), got {str(min_tokens)[:40]}"
        )
    top_logprobs = body.get("top_logprobs")
    if top_logprobs is not None and (not _is_int(top_logprobs) or not 0 <= top_logprobs <= MAX_TOP_LOGPROBS):
        return f"`top_logprobs` must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {str(top_logprobs)[:40]}"
    logprobs = body.get("logprobs")  # a flag in chat, a count of alternatives in completions
    if (
        logprobs is not None
        and not isinstance(logprobs, bool)
        and not (_is_int(logprobs) and 0 <= logprobs <= MAX_TOP_LOGPROBS)
    ):
        return f"`logprobs` must be true/false or an integer from 0 to {MAX_TOP_LOGPROBS}, got {str(logprobs)[:40]}"
    if problem := logit_bias_problem(body.get("logit_bias")):
        return problem
    stops = body.get("stop_token_ids")
    if stops is not None and (
        not isinstance(stops, list) or any(not _is_int(t) or not 0 <= t <= MAX_TOKEN_ID for t in stops)
    ):
        return "`stop_token_ids` must be a list of token ids"
    return None


def logit_bias_problem(bias: Any) -> str | None:
    """Why a `logit_bias` is refused: an object of token ids (as strings) to numbers from -100
    to 100, at most 300 of them."""
    if bias is None:
        return None
    if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS_TOKENS:
        return f"`logit_bias` must be an object of at most {MAX_LOGIT_BIAS_TOKENS} token ids to biases"
    low, high = LOGIT_BIAS_RANGE
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit() and len(key) <= 10 and int(key) <= MAX_TOKEN_ID):
            return f"`logit_bias` keys must be token ids, got {key[:40]!r}"
        if not _is_number(value) or not low <= value <= high:
            return f"`logit_bias` values must be numbers from {low:g} to {high:g}, got {str(value)[:40]}"
    return None


def adapter_body_problem(body: Any, load: bool) -> str | None:
    """Why a load (`load`) or unload adapter request's body is refused: a JSON object with a
    string `lora_name` (and, to load, a string `lora_path`)."""
    if not isinstance(body, dict):
        return f"the request body must be a JSON object, got {type(body).__name__}"
    fields = ("lora_name", "lora_path") if load else ("lora_name",)
    if any(not isinstance(body.get(key), str) or not body[key] for key in fields):
        if load:
            return "both `lora_name` and `lora_path` must be provided, as non-empty strings"
        return "`lora_name` must be a non-empty string"
    return None
