"""What `trajlake serve-sampler` serves: a model behind the OpenAI-compatible app, on CPU or GPU,
optionally through a LoRA adapter that answers under its served name.

The adapter is a folder or a registry reference (`calculator-agent:production`,
`name:3`). A published version is served as `<name>-v<version>`
(`store.rows.served_adapter_name`), the name `trajlake publish --load-into` gives vLLM, so an
agent pointed at this server records that name as its model on every trace, and the
lake's `policy_performance` view attributes its production feedback to that version.
The demo runs this very app for its second production batch.

Every completion request passes `RequestLimits` first (`n`, `max_tokens`, prompt size, body
size, the type and range of every field: 400 past one) and must name a model the server
serves (404 otherwise, as vLLM does); then what the model can do (`ModelBounds`: a prompt
and completion past its context, token ids outside its vocabulary, parameters this server
would not honour: 400 before anything is computed). A client that leaves has its request
cancelled, queued or running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from store.lake import Lake
from store.rows import served_adapter_name
from training.models.adapters import check_adapter_files
from training.replay.rollout.model_bounds import model_bounds
from training.replay.rollout.openai_app import create_app
from training.replay.rollout.request_limits import RequestLimits, guarded, request_problem
from training.replay.samplers import adapter_name, make_sampler

__all__ = ["RequestLimits", "guarded", "request_problem", "sampler_app", "served_adapter"]

if TYPE_CHECKING:
    from training.replay.samplers import SamplingParams


def served_adapter(
    adapter: str | None, *, lake: Lake | str | None = None, served_name: str | None = None
) -> tuple[str | None, str | None]:
    """(adapter folder, served name) of a folder or a registry reference; (None, None) without one.

    A folder that is a published version (its `manifest.json` names it) is served under
    its version's name; any other folder under `served_name`, else a name derived from
    its path.
    """
    if adapter is None:
        return None, served_name
    folder = Path(adapter)
    if (folder / "adapter_config.json").exists():
        manifest = folder / "manifest.json"
        if served_name is None and manifest.exists():
            published = json.loads(manifest.read_text())
            served_name = served_adapter_name(published["name"], int(published["version"]))
        if served_name is None:
            served_name = adapter_name(str(folder))
        return str(folder), served_name
    if lake is None:
        raise FileNotFoundError(
            f"`{adapter}` is not an adapter folder (no adapter_config.json); to serve a published "
            "version by reference (`name:alias`), pass the lake it was published to (--lake)"
        )
    from training.registry import resolve_adapter

    row = resolve_adapter(lake, adapter)
    return str(row["path"]), served_name or served_adapter_name(row["name"], int(row["version"]))


def sampler_app(
    model: str,
    adapter: str | None = None,
    *,
    lake: Lake | str | None = None,
    served_name: str | None = None,
    defaults: SamplingParams | None = None,
    limits: RequestLimits | None = None,
    dtype: str | None = None,
) -> tuple[Any, Any, str]:
    """(ASGI app, its sampler, the served model name): the transformers sampler on `model`,
    through `adapter` when given; `defaults` are the parameters of requests that set none;
    `limits` bound what a request may ask (`RequestLimits`' defaults when None), and a
    request naming a model other than the base model or the served adapter is answered 404;
    `dtype` is the model's precision (None: the sampler's default). Close the sampler when done
    (`with sampler:`)."""
    path, name = served_adapter(adapter, lake=lake, served_name=served_name)
    if path is not None:
        check_adapter_files(path)  # a truncated file is refused now, not on the first request
    sampler = make_sampler("transformers", model, adapter=path, dtype=dtype)
    app = create_app(
        sampler,
        default_params=defaults,
        adapters={name: path} if path and name else None,
        served_name=name if path else None,
        bounds=model_bounds(model, sampler.tokenizer),
    )
    models = {sampler.model, *([name] if path and name else [])}
    return guarded(app, limits or RequestLimits(), models), sampler, name or sampler.model
