"""`trajlake serve-sampler` with a published adapter: it answers under the version's served name, so the
production traces of an agent using it are attributed to that version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from flows.sampler_server import RequestLimits, request_problem, sampler_app, served_adapter
from store.lake import Lake
from training.publish import PublishConfig, publish
from training.replay.samplers import SamplingParams
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)


@pytest.fixture
def published(tiny_model: Path, lake: Lake, tmp_path: Path) -> str:
    """A fresh (untrained) LoRA on the tiny model, published twice as `calc` v1 and v2."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    lora = TrajlakeSFTConfig(output_dir=str(tmp_path / "unused")).lora_config()
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), lora)
    model.save_pretrained(tmp_path / "adapter")
    for _ in range(2):
        publish(lake, tmp_path / "adapter", PublishConfig(name="calc"), base_model=str(tiny_model))
    return str(tmp_path / "adapter")


def test_published_versions_answer_under_their_served_name(
    tiny_model: Path, lake: Lake, published: str
) -> None:
    path, name = served_adapter("calc:1", lake=lake)
    assert name == "calc-v1" and path.endswith("/calc/v1")
    assert served_adapter(path) == (path, "calc-v1")  # a version folder names itself (manifest.json)
    assert served_adapter(published, served_name="mine") == (published, "mine")
    assert served_adapter("calc:latest", lake=lake)[1] == "calc-v2"
    with pytest.raises(FileNotFoundError, match="--lake"):
        served_adapter("calc:1")

    app, sampler, name = sampler_app(
        str(tiny_model), "calc:latest", lake=lake, defaults=SamplingParams(max_tokens=4)
    )
    assert name == "calc-v2"
    with sampler, TestClient(app) as client:
        body = {"messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 4}
        reply = client.post("/v1/chat/completions", json={**body, "model": "calc-v2"}).json()
        assert reply["model"] == "calc-v2"
        # A name the server does not serve is 404, as vLLM answers it: a trace must not name a
        # policy that never served it (issue 45).
        for asked in ("whatever-the-agent-says", "no-such-adapter", "../../etc"):
            refused = client.post("/v1/chat/completions", json={**body, "model": asked})
            assert refused.status_code == 404 and asked in refused.json()["error"]["message"]
        models = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert models == [str(tiny_model), "calc-v2"]


def test_base_model_alone_answers_to_its_own_name(tiny_model: Path) -> None:
    app, sampler, name = sampler_app(str(tiny_model), defaults=SamplingParams(max_tokens=2))
    assert name == str(tiny_model)
    with sampler, TestClient(app) as client:
        body = {"model": str(tiny_model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert client.post("/v1/chat/completions", json=body).json()["model"] == str(tiny_model)
        assert client.post("/v1/chat/completions", json={**body, "model": "base"}).status_code == 404


def test_requests_past_a_limit_are_refused_before_the_model_runs() -> None:
    limits = RequestLimits(max_n=8, max_tokens=64, max_prompt_chars=100)
    models = {"base", "calc-v1"}
    chat = {"model": "base", "messages": [{"role": "user", "content": "hi"}]}
    assert request_problem(chat, limits, models) is None
    assert request_problem({**chat, "model": None, "n": 8, "max_tokens": 64}, limits, models) is None
    for body, status, words in (
        ({**chat, "n": 1_000_000}, 400, "`n` must be an integer from 1 to 8"),
        ({**chat, "n": 0}, 400, "`n`"),
        ({**chat, "n": True}, 400, "`n`"),
        ({**chat, "max_tokens": 1_000_000_000}, 400, "`max_tokens` must be an integer from 1 to 64"),
        ({**chat, "max_completion_tokens": 65}, 400, "`max_completion_tokens`"),
        (
            {**chat, "messages": [{"role": "user", "content": "x" * 101}]},
            400,
            "105 characters",
        ),  # role and content
        ({"model": "base", "prompt": list(range(101))}, 400, "the limit is 100"),
        ({**chat, "model": "no-such-adapter"}, 404, "`no-such-adapter` does not exist"),
    ):
        problem = request_problem(body, limits, models)
        assert problem is not None and problem[0] == status and words in problem[1], (body, problem)
    with pytest.raises(ValueError, match="max_n"):
        RequestLimits(max_n=0)


def test_the_served_app_answers_400_and_404_at_once(tiny_model: Path) -> None:
    import time

    limits = RequestLimits(max_n=4, max_tokens=16, max_prompt_chars=1000, max_body_bytes=10_000)
    app, sampler, name = sampler_app(str(tiny_model), defaults=SamplingParams(max_tokens=2), limits=limits)
    with sampler, TestClient(app) as client:
        body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        start = time.perf_counter()
        for bad, status in (
            ({**body, "n": 1_000_000}, 400),
            ({**body, "max_tokens": 1_000_000_000}, 400),
            ({**body, "messages": [{"role": "user", "content": "x" * 5000}]}, 400),
            ({**body, "messages": [{"role": "user", "content": "x" * 20_000}]}, 400),  # the body itself
            ({**body, "model": "no-such-adapter"}, 404),
        ):
            reply = client.post("/v1/chat/completions", json=bad)
            assert reply.status_code == status and reply.json()["error"]["code"] == status, reply.text
        completions = client.post("/v1/completions", json={"model": name, "prompt": "hi", "n": 5})
        assert completions.status_code == 400
        assert time.perf_counter() - start < 5  # refused before any generation
        assert client.post("/v1/chat/completions", json=body).status_code == 200
        assert client.get("/v1/models").status_code == 200


def test_sigterm_stops_the_server_within_seconds_while_it_generates(tiny_model: Path) -> None:
    """A request in flight kept `serve-sampler` up after SIGTERM (uvicorn waited for it)."""
    import signal
    import socket
    import subprocess
    import sys
    import threading
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve-sampler", "--model", str(tiny_model), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        # As long as the model's context allows (4,096 tokens): minutes of work on a CPU.
        body = {"model": str(tiny_model), "prompt": "hi", "n": 64, "max_tokens": 4000}
        answers: list[int] = []
        threading.Thread(
            target=lambda: answers.append(
                httpx.post(f"{url}/v1/completions", json=body, timeout=120).status_code
            ),
            daemon=True,
        ).start()
        time.sleep(2)  # generating now
        assert server.poll() is None and not answers, answers  # not refused: it runs
        start = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
        # The request gets the 3 s grace, then its sampling stops at the next token.
        assert time.monotonic() - start < 10
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_serve_sampler_loads_the_model_in_the_configured_dtype(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[sampler] dtype` reaches `trajlake serve-sampler`'s model (the server itself not started)."""
    import uvicorn
    from typer.testing import CliRunner

    from flows.cli import app
    from flows.commands import replay_cmds

    made = []

    def made_app(*args: Any, **kwargs: Any) -> tuple[Any, Any, str]:
        served = sampler_app(*args, **kwargs)
        made.append(served[1])
        return served

    monkeypatch.setattr(replay_cmds, "sampler_app", made_app)
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRAJLAKE_SAMPLER__DTYPE", "bfloat16")
    result = CliRunner().invoke(app, ["serve-sampler", "--model", str(tiny_model)])
    assert result.exit_code == 0, result.output
    assert made[0].dtype == "bfloat16"
