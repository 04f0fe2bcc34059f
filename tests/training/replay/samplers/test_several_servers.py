"""The `vllm-server` backend over several real servers: two `trajlake serve-sampler` processes.

Requests spread over both (fewest in flight first), a group's `n` samples come from one
server, and when one server is killed mid-run every request still completes, whole, on the
other, with the samples the survivor alone gives (greedy, so they are exact).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from training.replay.errors import SamplerError
from training.replay.samplers import SamplerConfig, SampleRequest, SamplingParams
from training.replay.samplers.vllm_launch import free_port
from training.replay.samplers.vllm_server import VLLMServerSampler

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


def wait_until_up(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve-sampler exited with {process.returncode}: {process.stderr.read()}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/v1/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"serve-sampler at {url} did not come up")


@pytest.fixture
def two_servers(tiny_model: Path) -> Iterator[list[tuple[str, subprocess.Popen]]]:
    servers = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    for _ in range(2):
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flows.cli",
                "serve-sampler",
                "--model",
                str(tiny_model),
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        servers.append((f"http://127.0.0.1:{port}", process))
    try:
        for url, process in servers:
            wait_until_up(url, process)
        yield servers
    finally:
        for _, process in servers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def prompts(sampler: VLLMServerSampler, count: int) -> list[tuple[int, ...]]:
    out = []
    for i in range(count):
        text = sampler.tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {i} + {i * 3}?"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        out.append(tuple(sampler.tokenizer.encode(text, add_special_tokens=False)))
    return out


def tokens(results: list[list]) -> list[list[tuple[int, ...]]]:
    return [[c.token_ids for c in group] for group in results]


def test_requests_spread_over_servers_and_survive_one_dying(
    tiny_model: Path, two_servers: list[tuple[str, subprocess.Popen]]
) -> None:
    urls = [url for url, _ in two_servers]
    sampler = SamplerConfig(backend="vllm-server", model=str(tiny_model), base_url=urls).build()
    assert isinstance(sampler, VLLMServerSampler) and [e.url for e in sampler.endpoints] == urls
    sampler.retries, sampler.backoff_s = 1, 0.05
    greedy = SamplingParams(max_tokens=32, temperature=0.0)
    asked = [SampleRequest(p, 4, greedy) for p in prompts(sampler, 24)]

    # 1. both servers answer, the same way: greedy samples equal whichever server served them
    first = sampler.generate(asked[:8])
    assert all(e.served > 0 for e in sampler.endpoints), [e.served for e in sampler.endpoints]
    assert all(len(group) == 4 and len(set(group)) == 1 for group in first)  # a group: one server, n copies

    # 2. kill the first server once requests are in flight: every request completes on the other
    async def run_and_kill() -> list[list]:
        tasks = [asyncio.ensure_future(sampler.agenerate(r)) for r in asked]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        os.killpg(two_servers[0][1].pid, signal.SIGKILL)
        try:
            done = list(await asyncio.gather(*tasks))
            # one at a time afterwards: the dead server, with fewer served, is picked, fails, is taken out
            return done + [await sampler.agenerate(r) for r in asked[:4]]
        finally:
            await sampler.aclose()

    results = asyncio.run(run_and_kill())
    dead, alive = sampler.endpoints
    assert dead.failures >= 1 and dead.down_until > time.monotonic()  # taken out for its cool-down
    assert alive.failures == 0

    # the reference: the survivor alone
    with VLLMServerSampler(str(tiny_model), base_url=urls[1]) as reference:
        expected = reference.generate(asked + asked[:4])
    # nothing lost, nothing half-done, nothing different (logprobs to the batch's last bits)
    assert tokens(results) == tokens(expected) and tokens(results[:8]) == tokens(first)
    for got, want in zip(results, expected, strict=True):
        for a, b in zip(got, want, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)

    # 3. with both gone, a clear error naming the servers
    os.killpg(two_servers[1][1].pid, signal.SIGKILL)
    two_servers[1][1].wait(timeout=30)
    sampler.endpoints[0].down_until = sampler.endpoints[1].down_until = 0.0
    with pytest.raises(SamplerError, match="failed after 2 attempts") as info:
        sampler.generate(asked[:1])
    assert info.value.reason == "unreachable"


def test_a_list_of_servers_in_the_config(tiny_model: Path, tmp_path: Path) -> None:
    from flows.config.checks import load_config

    path = tmp_path / "trajlake.toml"
    for value, expected in (
        ('["http://a:1", "http://b:2/v1"]', ["http://a:1", "http://b:2"]),
        ('"http://c:3"', ["http://c:3"]),
    ):
        path.write_text(f'[sampler]\nbackend = "vllm-server"\nmodel = "{tiny_model}"\nbase_url = {value}\n')
        sampler = load_config(str(path)).sampler.build()
        assert [e.url for e in sampler.endpoints] == expected  # type: ignore[attr-defined]
