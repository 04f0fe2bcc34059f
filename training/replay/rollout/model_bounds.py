"""What a served model can do, and requests held to it: `serve-sampler`'s app refuses a
prompt its model cannot read (longer than its context, token ids outside its vocabulary)
and parameters it would not honour, 400 before anything is computed, and stops sampling
for a client that left.

A 900,049-token prompt to a 4,096-token model was computed for over 5 minutes after its
client disconnected, and every later request waited behind it: the request limits bound a
request's size, not what the model can do with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

from training.models.known import resolve_model
from training.replay.samplers.base import Completion, Sampler, SampleRequest

# How often a request waiting for its completions looks for its client.
DISCONNECT_POLL_S = 0.25
# A tokenizer without a real limit says so with a huge `model_max_length` (1e30).
_NO_LIMIT = 10**9


@dataclass(frozen=True)
class ModelBounds:
    """The most tokens of prompt and completion together the model reads (`context_tokens`,
    None: not known) and the size of its vocabulary (`vocab_size`: a token id must be below it)."""

    context_tokens: int | None = None
    vocab_size: int | None = None


def model_bounds(model: str, tokenizer: Any) -> ModelBounds:
    """The bounds of the model folder (or known name) `model`: the smaller of its
    `max_position_embeddings` and the tokenizer's `model_max_length`, and its embedding's
    vocabulary (its config's `vocab_size`, else the tokenizer's)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(resolve_model(model))
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limits = [getattr(text, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    known = [int(n) for n in limits if isinstance(n, int | float) and 0 < n < _NO_LIMIT]
    vocab = getattr(text, "vocab_size", None) or len(tokenizer)
    return ModelBounds(context_tokens=min(known) if known else None, vocab_size=int(vocab))


def token_ids_problem(ids: list[Any], vocab_size: int) -> str | None:
    """Why a prompt of token ids is refused: every id an integer from 0 below `vocab_size`."""
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            return f"token id {str(token)[:40]} is out of the model's vocabulary (0 to {vocab_size - 1})"
    return None


def context_problem(prompt_tokens: int, completion_tokens: int, context_tokens: int) -> str | None:
    """Why a request does not fit the model: its prompt and the completion it asks for are more
    tokens than the model's context (vLLM's answer to the same request is a 400 too)."""
    if prompt_tokens + completion_tokens <= context_tokens:
        return None
    return (
        f"this model's context is {context_tokens:,} tokens; the request asks for "
        f"{prompt_tokens:,} tokens of prompt and {completion_tokens:,} of completion"
    )


def unhonoured_problem(body: dict[str, Any], *, completions: bool) -> str | None:
    """Why a request asks for something this server would not do (it was accepted and
    ignored): `min_tokens`, `top_logprobs`, `logit_bias`, alternatives per token (`logprobs`
    above 1 in completions). vLLM does them; this server refuses them rather than answer
    as if it had."""
    if body.get("min_tokens"):
        return "`min_tokens` is not applied by this server (transformers backend); leave it out or 0"
    if body.get("top_logprobs"):
        return "`top_logprobs` are not computed by this server (transformers backend); leave them out or 0"
    if body.get("logit_bias"):
        return "`logit_bias` is not applied by this server (transformers backend); leave it out"
    logprobs = body.get("logprobs")
    if completions and not isinstance(logprobs, bool) and isinstance(logprobs, int) and logprobs > 1:
        return "`logprobs` above 1 (alternatives per token) are not computed by this server"
    return None


async def sample_while_connected(
    sampler: Sampler, sample: SampleRequest, is_disconnected: Any
) -> list[Completion] | None:
    """`sampler.agenerate(sample)`, given up when `is_disconnected()` (an async callable, the
    request's) says the client left, or when this task is cancelled (a shutdown): the
    request is then cancelled, so queued it never runs and running it stops at its next
    token. None when the client left."""
    sample = dataclasses.replace(sample, cancel=sample.cancel or threading.Event())
    task = asyncio.ensure_future(sampler.agenerate(sample))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await is_disconnected():
                return None
    finally:
        if not task.done():
            assert sample.cancel is not None
            sample.cancel.set()
            task.cancel()
