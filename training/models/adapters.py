"""What a LoRA adapter folder holds, the check that it reads in full, and PEFT's wrapping without its probe warning.

Samplers load adapters (replay, `serve-sampler`, the vLLM server trajlake starts) and the
trainers write and publish them, so both sides read these names from here:

- `ADAPTER_FILES`: PEFT's files, which make an adapter what it is (tokenizer files do not);
- `RUN_RECORD`: the run record a trajlake training run writes beside them (`training.run`),
  which names the adapter (`training.models.policies`) and carries its lineage;
- `check_adapter_files`: a truncated or corrupt adapter refused at load, in one line;
- `peft_wrapping`: PEFT 0.21 (the newest) reads the deprecated `is_gradient_checkpointing`
  property whenever it wraps a model, which warns from transformers on every training run
  and every adapter a sampler loads. There is no newer PEFT to move to, and nothing on
  trajlake's side to rename, so `peft_wrapping()` hides exactly that message, only while
  PEFT wraps.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from training.errors import AdapterNotServable

# The files that make an adapter what it is (PEFT's names); tokenizer files do not change it.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")

# The file an adapter folder's run record (with its lineage) is written to (`training.run`);
# declared here so that naming an adapter (samplers) and finding records (`training.erasure`)
# do not import the trainers.
RUN_RECORD = "trajlake_run.json"

# The one warning `peft_wrapping` hides (a regex matched at the start of the message).
PEFT_PROBE = r"`is_gradient_checkpointing` is deprecated"


def check_adapter_files(adapter_dir: str | os.PathLike[str]) -> None:
    """Raise `AdapterNotServable` unless the adapter's files read in full: its
    `adapter_config.json` is a JSON object and every tensor of `adapter_model.safetensors`
    reads and is finite. A truncated or corrupt file (a copy cut short, a disk that filled
    during publish) is refused at load, in one line naming the file, rather than failing
    the first request or serving garbage weights."""
    folder = Path(adapter_dir)
    config_path, weights = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    problems = []
    try:
        config = json.loads(config_path.read_text())
        if not isinstance(config, dict):
            problems.append(f"`{config_path}` is not a JSON object")
    except FileNotFoundError:
        problems.append(f"`{config_path}` is missing")
    except (OSError, ValueError) as exc:
        problems.append(f"`{config_path}` is not valid JSON ({exc})")
    if weights.exists():
        problems += _safetensors_problems(weights)
    elif not (folder / "adapter_model.bin").exists():
        problems.append(f"`{weights}` is missing")
    if problems:
        raise AdapterNotServable(
            f"the adapter `{folder}` cannot be loaded: {'; '.join(problems)}; publish or copy it again",
            path=str(folder),
            problems=problems,
        )


def _safetensors_problems(weights: Path) -> list[str]:
    import torch
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (a safe_open handle is not a dict)
                tensor = handle.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    return [f"`{weights}` holds non-finite values in `{key}`"]
    except (SafetensorError, OSError, RuntimeError, ValueError) as exc:
        detail = " ".join(str(exc).split())[:200]
        return [f"`{weights}` is not a complete safetensors file ({detail})"]
    return []


@contextmanager
def peft_wrapping() -> Iterator[None]:
    """While PEFT wraps a model: its probe of the deprecated property does not reach the terminal."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PEFT_PROBE, category=FutureWarning)
        yield
