"""`trajlake serve-sampler` with a published adapter: it answers under the version's served name, so the
production traces of an agent using it are attributed to that version."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

import store
from flows.sampler_server import sampler_app, served_adapter
from training.publish import PublishConfig, publish
from training.replay.samplers import SamplingParams
from training.sft_config import TrajlakeSFTConfig


@pytest.fixture
def published(tiny_model: Path, lake: store.Lake, tmp_path: Path) -> str:
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
    tiny_model: Path, lake: store.Lake, published: str
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
        for asked in ("calc-v2", "whatever-the-agent-says"):
            reply = client.post("/v1/chat/completions", json={**body, "model": asked}).json()
            assert reply["model"] == "calc-v2"  # the adapter answered both
        models = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert models == [str(tiny_model), "calc-v2"]


def test_base_model_alone_reports_what_was_asked(tiny_model: Path) -> None:
    app, sampler, name = sampler_app(str(tiny_model), defaults=SamplingParams(max_tokens=2))
    assert name == str(tiny_model)
    with sampler, TestClient(app) as client:
        body = {"model": "base", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert client.post("/v1/chat/completions", json=body).json()["model"] == "base"
