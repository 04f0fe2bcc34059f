"""`trajlake serve-sampler` bounded by what its model can do (issue 55 item 4): a prompt past
the model's context, token ids outside its vocabulary, fields of the wrong type or range,
and parameters it would not honour are 400 at once (they were 500s, or computed for minutes,
or accepted and ignored); a client that leaves has its request cancelled; a slow client is
answered 408 and let go."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from flows.sampler_server import sampler_app
from training.replay.rollout.openai_app import LoopbackServer
from training.replay.rollout.request_limits import RequestLimits, guarded
from training.replay.samplers import SamplingParams

DEEP = json.loads("[" * 500 + "5" + "]" * 500)
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION = {"prompt": [5, 6], "max_tokens": 2}

# (path, body, words of the 400's message): every one was a 500, or ran, before.
REFUSED: list[tuple[str, Any, str]] = [
    ("/v1/completions", {**COMPLETION, "prompt": [5] * 4095, "max_tokens": 8}, "context is 4,096 tokens"),
    ("/v1/completions", {**COMPLETION, "prompt": [5] * 20_000}, "20,000 tokens of prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": "hello " * 5000}, "context is 4,096 tokens"),
    (
        "/v1/chat/completions",
        {**CHAT, "messages": [{"role": "user", "content": "hello " * 5000}]},
        "context is 4,096 tokens",
    ),
    ("/v1/completions", {**COMPLETION, "seed": 2**80}, "`seed` must be an integer"),
    ("/v1/completions", {**COMPLETION, "prompt": [999999999]}, "out of the model's vocabulary"),
    ("/v1/completions", {**COMPLETION, "prompt": [700]}, "out of the model's vocabulary"),
    ("/v1/completions", {**COMPLETION, "prompt": [-5]}, "must hold token ids"),
    ("/v1/completions", {**COMPLETION, "prompt": DEEP}, "must hold token ids"),
    ("/v1/completions", {**COMPLETION, "prompt": [5, "x"]}, "`prompt` must be text"),
    ("/v1/chat/completions", {**CHAT, "messages": [5]}, "`messages[0]` must be an object"),
    ("/v1/chat/completions", {**CHAT, "temperature": "hot"}, "`temperature` must be a number"),
    ("/v1/load_lora_adapter", [1, 2], "must be a JSON object"),
    ("/v1/load_lora_adapter", "adapter", "must be a JSON object"),
    ("/v1/unload_lora_adapter", [1], "must be a JSON object"),
    ("/v1/unload_lora_adapter", "adapter", "must be a JSON object"),
    ("/v1/load_lora_adapter", {"lora_name": "a", "lora_path": 5}, "both `lora_name` and `lora_path`"),
    ("/v1/unload_lora_adapter", {"lora_name": 5}, "`lora_name` must be"),
    ("/v1/completions", {**COMPLETION, "min_tokens": 1e9}, "`min_tokens` must be an integer"),
    ("/v1/completions", {**COMPLETION, "min_tokens": 1}, "`min_tokens` is not applied"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 1e6}, "`top_logprobs` must be an integer"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 3}, "`top_logprobs` are not computed"),
    ("/v1/completions", {**COMPLETION, "logprobs": 5}, "`logprobs` above 1"),
    ("/v1/completions", {**COMPLETION, "logit_bias": {"99999999999999": 5}}, "keys must be token ids"),
    ("/v1/completions", {**COMPLETION, "logit_bias": {"5": 500}}, "values must be numbers"),
    ("/v1/completions", {**COMPLETION, "logit_bias": {"5": 5}}, "`logit_bias` is not applied"),
]


@pytest.fixture(scope="module")
def served(tiny_model: Path) -> Iterator[tuple[Any, str]]:
    app, sampler, name = sampler_app(str(tiny_model), defaults=SamplingParams(max_tokens=2))
    with sampler:
        yield app, name


@pytest.mark.parametrize(("path", "body", "words"), REFUSED, ids=[f"{i}" for i in range(len(REFUSED))])
def test_what_the_model_cannot_do_is_refused_at_once(
    served: tuple[Any, str], path: str, body: Any, words: str
) -> None:
    app, name = served
    if isinstance(body, dict) and "lora_name" not in body:
        body = {**body, "model": name}
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post(path, json=body)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == 400, answer.text
    assert words in answer.json()["error"]["message"], answer.text


def test_what_the_model_can_do_still_runs(served: tuple[Any, str]) -> None:
    app, name = served
    with TestClient(app) as client:
        for body in (
            {**COMPLETION, "temperature": None, "top_k": -1, "seed": 2**63 - 1, "min_tokens": 0},
            {**COMPLETION, "prompt": [5] * 4000, "max_tokens": None},  # the default fits the room left
            {**COMPLETION, "prompt": [5] * 4094, "max_tokens": 2},  # exactly the context
            {**COMPLETION, "logprobs": 1, "logit_bias": {}, "top_logprobs": 0},
        ):
            answer = client.post("/v1/completions", json={**body, "model": name})
            assert answer.status_code == 200, answer.text
        chat = client.post("/v1/chat/completions", json={**CHAT, "model": name, "logprobs": True})
        assert chat.status_code == 200, chat.text


def test_a_client_that_leaves_is_not_computed_for(tiny_model: Path) -> None:
    """A long request whose client left ran on (5 minutes seen) and every later request
    waited behind it; a request queued behind it ran too, for nobody."""
    app, sampler, name = sampler_app(str(tiny_model))
    ran: list[int] = []  # the `n` of each request a batch started with or took in while it ran
    stream = sampler._stream

    def recording(requests: Any, more: Any, deliver: Any) -> None:
        ran.extend(r.n for _, r in requests)

        def recording_more(select: Any) -> Any:
            taken = more(select)
            ran.extend(r.n for _, r in taken)
            return taken

        stream(requests, recording_more, deliver)

    sampler._stream = recording  # type: ignore[method-assign]
    long = {"model": name, "prompt": "hi", "n": 60, "max_tokens": 4000, "temperature": 1.0}
    queued = {**long, "n": 59}
    with sampler, LoopbackServer(app) as url:

        def leave_after(body: dict[str, Any], seconds: float) -> None:
            with pytest.raises(httpx.TimeoutException):
                httpx.post(f"{url}/v1/completions", json=body, timeout=seconds)

        first = threading.Thread(target=leave_after, args=(long, 3.0))
        first.start()
        time.sleep(1.0)  # the long one runs now; the next one queues behind it
        second = threading.Thread(target=leave_after, args=(queued, 1.0))
        second.start()
        first.join()
        second.join()
        start = time.monotonic()
        answer = httpx.post(
            f"{url}/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 2}, timeout=120
        )
        waited = time.monotonic() - start
    assert answer.status_code == 200
    # 60 x 4000 tokens take this model tens of minutes on a CPU: the next request was
    # answered in seconds because the abandoned one stopped, and the queued one never ran.
    assert waited < 30, f"the next request waited {waited:.0f}s behind an abandoned one"
    assert 59 not in ran, ran
    assert ran[0] == 60 and ran[-1] == 1, ran


def test_a_slow_client_is_answered_408_and_let_go(tiny_model: Path) -> None:
    """A client trickling its body held a connection 65 s; now it has `read_timeout_s`."""
    limits = RequestLimits(read_timeout_s=1.0)
    app, sampler, _ = sampler_app(str(tiny_model), limits=limits)
    with sampler, LoopbackServer(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b'content-length: 1000\r\n\r\n{"prompt": '
            )
            start = time.monotonic()
            answer = sock.recv(4096)
            waited = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"did not arrive within 1s" in answer
        assert waited < 10


def test_the_guard_reads_no_further_than_the_body_limit() -> None:
    """Where the memory bound is decided: a body past `max_body_bytes` is read no further
    than the chunk that crossed it (the RSS tests measure the same end to end)."""
    import asyncio

    limits = RequestLimits(max_body_bytes=1 << 20)
    chunk, pulled, sent = b"x" * 65536, [0], []

    async def endless() -> dict[str, Any]:
        pulled[0] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def never(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app saw a body past the limit")

    scope = {"type": "http", "method": "POST", "path": "/v1/completions"}
    asyncio.run(guarded(never, limits, None)(scope, endless, send))
    assert sent[0]["status"] == 400
    assert pulled[0] <= limits.max_body_bytes + len(chunk)
