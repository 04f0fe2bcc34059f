"""Serving checks and hand-offs: what vLLM accepts, hot-loading into a running server, the Hub.

vLLM refuses LoRA ranks outside its `--max-lora-rank` set, `modules_to_save`, DoRA,
biases and PiSSA-style inits; `check_vllm_compatible` says so before anything is
published. `load_into_vllm` uses vLLM's runtime LoRA endpoint; `upload_to_hub` pushes a
published version folder to a Hugging Face model repo.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from training.errors import AdapterNotServable, BadHyperparameter, PublishError
from training.lora import VLLM_LORA_RANKS
from training.models.adapters import ADAPTER_FILES

UNSERVABLE_INITS = ("pissa", "olora", "loftq", "corda", "eva")


def vllm_problems(adapter_config: dict[str, Any], *, max_lora_rank: int = 16) -> list[str]:
    """Reasons vLLM would refuse an adapter with this `adapter_config.json` (empty when it would load it).

    >>> vllm_problems({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj"], "bias": "none"})
    []
    >>> vllm_problems({"peft_type": "LORA", "r": 12, "target_modules": ["q_proj"], "use_dora": True})
    ['rank 12 is not one of vLLM ranks (1, 8, 16, 32, 64, 128, 256, 320, 512)', 'DoRA (use_dora) is not supported']
    """
    problems = []
    if adapter_config.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type `{adapter_config.get('peft_type')}` is not LORA")
    r = adapter_config.get("r")
    if r not in VLLM_LORA_RANKS:
        problems.append(f"rank {r} is not one of vLLM ranks {VLLM_LORA_RANKS}")
    elif r > max_lora_rank:
        problems.append(f"rank {r} exceeds the server's --max-lora-rank {max_lora_rank}")
    if adapter_config.get("use_dora"):
        problems.append("DoRA (use_dora) is not supported")
    if adapter_config.get("modules_to_save"):
        problems.append(f"modules_to_save {adapter_config['modules_to_save']} is not supported")
    if adapter_config.get("bias", "none") != "none":
        problems.append(f"bias `{adapter_config.get('bias')}` is not supported (must be `none`)")
    init = adapter_config.get("init_lora_weights")
    if isinstance(init, str) and init.lower().split("_")[0] in UNSERVABLE_INITS:
        problems.append(f"init_lora_weights `{init}` changes the base weights; vLLM cannot serve it")
    if not adapter_config.get("target_modules"):
        problems.append("no target_modules")
    return problems


def check_vllm_compatible(adapter_dir: str | os.PathLike[str], *, max_lora_rank: int = 16) -> dict[str, Any]:
    """Raise `AdapterNotServable` unless vLLM would load the adapter; returns its config."""
    folder = Path(adapter_dir)
    config_path = folder / "adapter_config.json"
    if not config_path.exists():
        raise AdapterNotServable(
            f"`{folder}` has no adapter_config.json; pass the `adapter/` folder of a training run",
            path=str(folder),
            problems=["missing adapter_config.json"],
        )
    config = json.loads(config_path.read_text())
    problems = vllm_problems(config, max_lora_rank=max_lora_rank)
    if not any((folder / f).exists() for f in ADAPTER_FILES[1:]):
        problems.append("no adapter weights (adapter_model.safetensors)")
    if problems:
        raise AdapterNotServable(
            f"vLLM would refuse the adapter `{folder}`: "
            + "; ".join(problems)
            + ". Retrain with a LoRA config vLLM accepts (rank in its set, no DoRA/modules_to_save/bias)",
            path=str(folder),
            problems=problems,
        )
    return config


def load_into_vllm(
    url: str, lora_name: str, lora_path: str, *, replaces: str | None = None, timeout: float = 60.0
) -> list[str]:
    """Hot-load an adapter into a running vLLM server (`POST /v1/load_lora_adapter`) under `lora_name`.

    With `replaces` (an adapter name), every other version of it that the server has loaded
    (`<replaces>-v<N>`, from `GET /v1/models`) is unloaded once the new one answers, so a new
    version takes the old one's place without a restart. Returns the names unloaded. The
    server must run with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 ... --enable-lora` and see
    `lora_path` on its filesystem. Requests then use `"model": lora_name`.
    """
    import httpx

    base = url.rstrip("/").removesuffix("/v1")
    _post_adapter(base, "/v1/load_lora_adapter", {"lora_name": lora_name, "lora_path": lora_path}, timeout)
    if replaces is None:
        return []
    older = re.compile(re.escape(replaces) + r"-v\d+")
    try:
        models = httpx.get(base + "/v1/models", timeout=timeout).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        raise PublishError(
            f"`{lora_name}` is loaded, but `{base}/v1/models` did not list the others: {exc}"
        ) from exc
    unloaded = []
    for model in models:
        name = str(model.get("id"))
        if name != lora_name and older.fullmatch(name):
            _post_adapter(base, "/v1/unload_lora_adapter", {"lora_name": name}, timeout)
            unloaded.append(name)
    return unloaded


def _post_adapter(base: str, path: str, body: dict[str, str], timeout: float) -> None:
    import httpx

    endpoint = base + path
    try:
        response = httpx.post(endpoint, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise PublishError(
            f"could not reach vLLM at `{endpoint}`: {exc}; the adapter is published, load it later with "
            f"`trajlake publish --load-into URL` or POST the same request"
        ) from exc
    if response.status_code >= 400:
        raise PublishError(
            f"vLLM at `{endpoint}` refused adapter `{body['lora_name']}` ({response.status_code}): "
            f"{response.text[:300]}; is the server started with --enable-lora and "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1?"
        )


HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_hub_arguments(repo: str, token: str | None) -> None:
    """Refuse a hub upload that cannot work before anything is published."""
    if not HUB_REPO.match(repo):
        raise BadHyperparameter(
            f"hub repo `{repo}` must look like `owner/name`", field="push_to_hub", value=repo
        )
    if not token:
        raise BadHyperparameter(
            f"pushing to `{repo}` needs a Hugging Face token; set HF_TOKEN (the CLI reads it) or pass `hub_token`",
            field="hub_token",
            value=None,
        )


def upload_to_hub(path: str, repo: str, token: str | None) -> str:
    """Upload a published version folder to a (private by default) Hub model repo; returns its URL."""
    from huggingface_hub import HfApi

    check_hub_arguments(repo, token)
    api = HfApi(token=token)
    api.create_repo(repo, private=True, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=path, repo_id=repo, repo_type="model", commit_message="trajlake publish")
    return f"https://huggingface.co/{repo}"
