"""The OpenAI/vLLM-compatible app on the real tiny model, through the `openai` SDK and raw HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.training.helpers import TOOLS, ScriptedSampler, calculator_script
from training.chat.render import canonical_tools
from training.replay.rollout.episodes import Recorder
from training.replay.rollout.loop import turn_seed
from training.replay.rollout.openai_app import EPISODE_HEADER, create_app
from training.replay.samplers import make_sampler
from training.replay.samplers.base import Sampler, SamplingParams


@pytest.fixture(scope="module")
def tiny_sampler(tiny_model: Path) -> Iterator[Sampler]:
    with make_sampler("transformers", str(tiny_model)) as sampler:
        yield sampler


def _post(app, path: str, body: dict, headers: dict | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            return await client.post(path, json=body, headers=headers or {})

    return asyncio.run(go())


def test_chat_completions_with_sdk_n_logprobs_and_token_ids(tiny_sampler: Sampler) -> None:
    app = create_app(tiny_sampler)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as http:
            client = openai.AsyncOpenAI(
                base_url="http://app/v1", api_key="x", http_client=http, max_retries=0
            )
            return await client.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "What is 2 + 2?"}],
                n=3,
                logprobs=True,
                max_tokens=6,
                tools=TOOLS,
            )

    response = asyncio.run(go())
    assert len(response.choices) == 3
    prompt_ids = response.model_extra["prompt_token_ids"]
    rendered = tiny_sampler.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 2?"}],
        tools=canonical_tools(TOOLS),  # the app renders a client's tools in the lake's key order
        tokenize=False,
        add_generation_prompt=True,
    )
    assert prompt_ids == tiny_sampler.tokenizer.encode(rendered, add_special_tokens=False)
    for choice in response.choices:
        token_ids = choice.model_extra["token_ids"]
        assert len(choice.logprobs.content) == len(token_ids) <= 6
        assert all(t.logprob <= 0 for t in choice.logprobs.content)
        assert choice.finish_reason in ("stop", "length", "tool_calls")
    assert response.usage.prompt_tokens == len(prompt_ids)


def test_chat_parses_tool_calls_and_records_episodes(tiny_model: Path) -> None:
    recorder = Recorder(limit=2)
    app = create_app(ScriptedSampler(str(tiny_model), calculator_script), recorder=recorder)
    messages = [{"role": "user", "content": "What is 12 * 7?"}]
    first = _post(
        app, "/v1/chat/completions", {"messages": messages, "tools": TOOLS}, {EPISODE_HEADER: "e1"}
    ).json()
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "calculator", "arguments": '{"expression": "12 * 7"}'}
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "84"},
    ]
    second = _post(
        app, "/v1/chat/completions", {"messages": messages, "tools": TOOLS}, {EPISODE_HEADER: "e1"}
    ).json()
    assert second["choices"][0]["message"]["content"] == "The answer is 84."
    head = first["prompt_token_ids"] + choice["token_ids"]
    assert second["prompt_token_ids"][: len(head)] == head  # the earlier ids are reused, not re-tokenised
    calls = recorder.calls["e1"]
    assert [c.extends_previous for c in calls] == [True, True]
    third = _post(app, "/v1/chat/completions", {"messages": messages}, {EPISODE_HEADER: "e1"})
    assert third.status_code == 400 and "limit of 2 model calls" in third.json()["error"]["message"]


def test_completions_text_and_batched_prompts(tiny_sampler: Sampler) -> None:
    app = create_app(tiny_sampler)
    body = {"prompt": ["Hello", [5, 6, 7]], "n": 2, "max_tokens": 4, "logprobs": 0, "return_token_ids": True}
    answer = _post(app, "/v1/completions", body).json()
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    assert answer["choices"][2]["prompt_token_ids"] == [5, 6, 7]
    for choice in answer["choices"]:
        assert (
            len(choice["token_ids"])
            == len(choice["logprobs"]["token_logprobs"])
            == len(choice["logprobs"]["tokens"])
        )
    plain = _post(app, "/v1/completions", {"prompt": "Hi", "max_tokens": 2}).json()["choices"][0]
    assert "token_ids" not in plain and plain["logprobs"] is None


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/completions", {"prompt": 5}, 400, "`prompt` must be"),
        ("/v1/completions", {"prompt": "x", "echo": True}, 400, "`echo` is not supported"),
        ("/v1/chat/completions", {"messages": []}, 400, "`messages` must be a non-empty list"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/load_lora_adapter", {"lora_name": "a"}, 400, "both `lora_name` and `lora_path`"),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "a", "lora_path": "/nonexistent"},
            404,
            "adapter_config.json missing",
        ),
        ("/v1/unload_lora_adapter", {"lora_name": "a"}, 404, "cannot be found"),
    ],
)
def test_bad_requests_get_openai_style_errors(
    tiny_sampler: Sampler, path: str, body: dict, status: int, message: str
) -> None:
    response = _post(create_app(tiny_sampler), path, body)
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_adapter_load_list_and_unload(tiny_sampler: Sampler, tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    app = create_app(tiny_sampler)
    assert (
        _post(app, "/v1/load_lora_adapter", {"lora_name": "v1", "lora_path": str(tmp_path)}).status_code
        == 200
    )
    again = _post(app, "/v1/load_lora_adapter", {"lora_name": "v1", "lora_path": str(tmp_path)})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]

    async def models() -> dict:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            return (await client.get("/v1/models")).json()

    assert [m["id"] for m in asyncio.run(models())["data"]] == [tiny_sampler.model, "v1"]
    assert _post(app, "/v1/unload_lora_adapter", {"lora_name": "v1"}).status_code == 200


def test_episodes_sample_with_their_own_seed_unless_the_request_names_one(tiny_model: Path) -> None:
    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    app = create_app(sampler, default_params=SamplingParams(seed=5), recorder=Recorder())
    body = {"model": "tiny", "messages": [{"role": "user", "content": "What is 12 * 7?"}]}
    for episode in ("e1", "e1", "e2"):
        assert _post(app, "/v1/chat/completions", body, {EPISODE_HEADER: episode}).status_code == 200
    assert _post(app, "/v1/chat/completions", {**body, "seed": 9}, {EPISODE_HEADER: "e3"}).status_code == 200
    assert _post(app, "/v1/chat/completions", body).status_code == 200  # no episode: the default seed
    assert [r.params.seed for r in sampler.requests] == [
        turn_seed(5, "e1", 0, 0),
        turn_seed(5, "e1", 0, 1),
        turn_seed(5, "e2", 0, 0),
        9,
        5,
    ]
    assert len({r.params.seed for r in sampler.requests[:3]}) == 3
