"""The `vllm-server` backend: an OpenAI-compatible `vllm serve` reached over HTTP.

Prompts go as token ids to `/v1/completions` (`prompt: [ids]`), with `n`, `logprobs` and
vLLM's `return_token_ids`, so nothing is re-tokenised on either side. The server batches
and shares the prompt's prefill across the `n` samples (prefix caching). Adapters are
loaded once per path with `/v1/load_lora_adapter` (the server must run with
`--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`) and then addressed by name.
Start the server with `--logprobs-mode processed_logprobs`, as the in-process `vllm`
backend sets it: vLLM's default returns logprobs before temperature/top-k/top-p, which
are not the sampling policy's (GRPO's `old_per_token_logps`) when temperature != 1.

The client keeps one pooled `httpx.AsyncClient` per event loop and endpoint and bounds the
*samples* in flight there (a request of `n` holds `n`; requests are admitted in arrival order),
so a round of many groups queues at the client, not at a server that runs a few hundred
sequences at a time. A request gets its answer late when the server is busy, and that is not
a failure: after each `timeout_s` without an answer the client asks the server's `/health`,
and keeps waiting while it answers. Only a server that does not answer (or a dropped
connection, a 429, a 5xx) costs an attempt: those are retried with exponential backoff; a
4xx is a caller error and is raised at once with the server's message. A request abandoned
for a dead server was answered by nothing, so nothing of it reaches the lake.

Several endpoints (`base_url` a list: several `vllm serve` of the same model): each request
goes whole to the healthy endpoint with the fewest requests outstanding, so a group's `n`
samples share one prefill there. An endpoint that stays unreachable through its retries is
taken out for `cooldown_s` and the request is sent, whole, to the next one; nothing of a
failed request was returned, so nothing is sampled twice into the lake. Adapters are
loaded on each endpoint the first time that endpoint serves them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import httpx

from training.replay.errors import SamplerError
from training.replay.samplers.base import (
    Completion,
    Sampler,
    SampleRequest,
    adapter_name,
    asked_samples,
    check_completions,
    repeat_greedy,
)

RETRYABLE_STATUS = {408, 429, 500, 502, 503, 504}


class SampleBudget:
    """At most `limit` samples in flight, admitted in arrival order (a request of more than
    `limit` samples runs alone): a queue at the client, where waiting costs nothing."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._admission = asyncio.Lock()  # FIFO: a big request is not overtaken forever
        self._freed = asyncio.Condition()

    @asynccontextmanager
    async def hold(self, samples: int) -> AsyncIterator[None]:
        if samples <= 0:  # an adapter load, say: nothing to sample
            yield
            return
        samples = min(samples, self.limit)
        async with self._admission, self._freed:
            await self._freed.wait_for(lambda: self.in_flight + samples <= self.limit)
            self.in_flight += samples
        try:
            yield
        finally:
            async with self._freed:
                self.in_flight -= samples
                self._freed.notify_all()


@dataclass
class Endpoint:
    """One server: its URL, the requests in flight there, when it may be tried again."""

    url: str
    outstanding: int = 0
    down_until: float = 0.0
    failures: int = 0
    served: int = 0
    loaded: set[str] = field(default_factory=set)


class VLLMServerSampler(Sampler):
    """Sample from a running `vllm serve` (or anything speaking its completions protocol)."""

    backend = "vllm-server"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | Sequence[str] = "http://127.0.0.1:8000",
        adapter: str | None = None,
        tokenizer: str | None = None,
        api_key: str | None = None,
        served_model: str | None = None,
        max_samples_in_flight: int = 1024,
        timeout_s: float = 300.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        cooldown_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(model, adapter=adapter, tokenizer=tokenizer)
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise SamplerError("no server URL given (`base_url`)", backend=self.backend, reason="bad_params")
        self.endpoints = [Endpoint(u.rstrip("/").removesuffix("/v1")) for u in urls]
        self.base_url = self.endpoints[0].url
        self.cooldown_s = cooldown_s
        self._lock = threading.Lock()
        self.served_model = served_model or model
        self.api_key = api_key
        if max_samples_in_flight < 1:
            raise SamplerError(
                f"`max_samples_in_flight` must be >= 1, got {max_samples_in_flight}",
                backend=self.backend,
                reason="bad_params",
            )
        self.max_samples_in_flight = max_samples_in_flight
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._transport = transport
        # Pools and budgets belong to one event loop; sync callers run a fresh loop each time.
        self._clients: dict[tuple[int, str], tuple[httpx.AsyncClient, SampleBudget]] = {}

    # --- HTTP plumbing ------------------------------------------------------------------

    def _client(self, endpoint: Endpoint) -> tuple[httpx.AsyncClient, SampleBudget]:
        key = (id(asyncio.get_running_loop()), endpoint.url)
        if key not in self._clients:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            connect = min(10.0, self.timeout_s)
            client = httpx.AsyncClient(
                base_url=endpoint.url,
                headers=headers,
                # No read timeout: `_answer` watches a slow answer through `/health` instead.
                timeout=httpx.Timeout(None, connect=connect, write=self.timeout_s),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
                transport=self._transport,
            )
            self._clients[key] = (client, SampleBudget(self.max_samples_in_flight))
        return self._clients[key]

    async def _alive(self, client: httpx.AsyncClient) -> bool:
        """Whether the server answers `GET /health` (any status below 500: one without that
        route answers 404, and is alive; vLLM answers 503 once its engine is dead)."""
        try:
            response = await client.get("/health", timeout=min(10.0, self.timeout_s))
        except (httpx.TransportError, httpx.TimeoutException):
            return False
        return response.status_code < 500

    async def _answer(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST `body` and wait for the answer as long as the server stays alive: after each
        `timeout_s` without one, a `/health` probe decides (a busy server answers it at once)."""
        posted = asyncio.ensure_future(client.post(path, json=body))
        try:
            while True:
                done, _ = await asyncio.wait({posted}, timeout=self.timeout_s)
                if done:
                    return posted.result()
                if not await self._alive(client):
                    raise httpx.ReadTimeout(
                        f"no answer in {self.timeout_s:g} s and `/health` does not answer"
                    )
        finally:
            if not posted.done():
                posted.cancel()
                with suppress(asyncio.CancelledError):
                    await posted

    async def _post(
        self, endpoint: Endpoint, path: str, body: dict[str, Any], *, samples: int = 0
    ) -> dict[str, Any] | str:
        client, budget = self._client(endpoint)
        last: str = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                async with budget.hold(samples):
                    response = await self._answer(client, path, body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if response.status_code in RETRYABLE_STATUS:
                last = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                raise SamplerError(
                    f"`{endpoint.url}{path}` refused the request: HTTP {response.status_code}: "
                    f"{response.text[:500]}",
                    backend=self.backend,
                    reason="http_error",
                )
            content_type = response.headers.get("content-type", "")
            return response.json() if "json" in content_type else response.text
        raise SamplerError(
            f"`{endpoint.url}{path}` failed after {self.retries + 1} attempts (last: {last}); "
            "is `vllm serve` running there?",
            backend=self.backend,
            reason="unreachable",
        )

    async def _ensure_adapter(self, endpoint: Endpoint, path: str) -> str:
        name = adapter_name(path)
        if name not in endpoint.loaded:
            # Concurrent first uses may both ask; vLLM answers the second "already loaded" (HTTP 400).
            try:
                await self._post(endpoint, "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
            except SamplerError as exc:
                if "already" not in str(exc).lower():
                    raise
            endpoint.loaded.add(name)
        return name

    def _pick(self, tried: set[str]) -> Endpoint | None:
        """The untried endpoint with the fewest requests outstanding, healthy ones first (an
        endpoint in its cool-down is tried only when no healthy one is left)."""
        now = time.monotonic()
        with self._lock:
            left = [e for e in self.endpoints if e.url not in tried]
            if not left:
                return None
            chosen = min(left, key=lambda e: (e.down_until > now, e.outstanding, e.served))
            chosen.outstanding += 1
            return chosen

    def _release(self, endpoint: Endpoint, failed: bool) -> None:
        with self._lock:
            endpoint.outstanding -= 1
            if failed:
                endpoint.failures += 1
                endpoint.down_until = time.monotonic() + self.cooldown_s
            else:
                endpoint.served += 1
                endpoint.down_until = 0.0

    # --- sampling -----------------------------------------------------------------------

    async def agenerate(self, request: SampleRequest) -> list[Completion]:
        request = self._with_default_adapter(request)
        p = request.params
        body: dict[str, Any] = {
            "prompt": list(request.prompt_ids),
            "n": asked_samples(request),
            "max_tokens": p.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if p.top_k:
            body["top_k"] = p.top_k
        if p.seed is not None:
            body["seed"] = p.seed
        if p.stop_token_ids:
            body["stop_token_ids"] = list(p.stop_token_ids)
        tried: set[str] = set()
        while (endpoint := self._pick(tried)) is not None:
            tried.add(endpoint.url)
            try:
                body["model"] = (
                    await self._ensure_adapter(endpoint, request.adapter)
                    if request.adapter
                    else self.served_model
                )
                payload = await self._post(endpoint, "/v1/completions", body, samples=body["n"])
            except SamplerError as exc:
                unreachable = exc.reason == "unreachable"
                self._release(endpoint, failed=unreachable)
                if unreachable and len(tried) < len(self.endpoints):
                    continue  # the whole request, elsewhere
                raise
            self._release(endpoint, failed=False)
            break
        else:  # pragma: no cover - `_pick` returns an endpoint while one is untried
            raise SamplerError("no endpoint left", backend=self.backend, reason="unreachable")
        completions = repeat_greedy(
            request, parse_completions_response(payload, asked_samples(request), backend=self.backend)
        )
        check_completions(self.backend, request, completions)
        return completions

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        async def run() -> list[list[Completion]]:
            try:
                return list(await asyncio.gather(*(self.agenerate(r) for r in requests)))
            finally:
                await self._aclose_current()

        return asyncio.run(run())

    async def _aclose_current(self) -> None:
        loop = id(asyncio.get_running_loop())
        for key in [k for k in self._clients if k[0] == loop]:
            await self._clients.pop(key)[0].aclose()

    async def aclose(self) -> None:
        """Close the pooled client of the running loop."""
        await self._aclose_current()


def parse_completions_response(payload: Any, n: int, *, backend: str = "vllm-server") -> list[Completion]:
    """Turn a vLLM `/v1/completions` response (with `return_token_ids`) into `Completion`s, by choice index."""
    try:
        choices = sorted(payload["choices"], key=lambda c: c.get("index", 0))
        completions = []
        for choice in choices:
            token_ids = choice.get("token_ids")
            if token_ids is None:
                raise KeyError("token_ids")
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if logprobs is None:
                raise KeyError("logprobs.token_logprobs")
            reason = choice.get("finish_reason") or "length"
            completions.append(
                Completion(
                    tuple(int(t) for t in token_ids),
                    tuple(float(x) for x in logprobs),
                    "stop" if reason == "stop" else "length",
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise SamplerError(
            f"the server's /v1/completions answer lacks `{exc}`: is it vLLM with `return_token_ids` "
            f"support? (answer starts {str(payload)[:200]!r})",
            backend=backend,
            reason="bad_response",
        ) from exc
    if len(completions) != n:
        raise SamplerError(
            f"asked for n={n} completions, the server returned {len(completions)}",
            backend=backend,
            reason="wrong_count",
        )
    return completions
