"""Installs by role: which extra brings a library that a command needs and this install lacks.

The core install (`pip install trajlake`, no extras) runs the collector, the Langfuse
import, `sql`, `forget` and the report; `trajlake[train]` adds torch, transformers, TRL and PEFT,
`trajlake[flows]` Prefect. A command of a missing extra fails where it imports the library,
wherever that is (its options are TRL's fields, its sampler loads torch at run time); the CLI's
entry point turns that one error into a line naming the extra (`flows.cli.main`).
"""

from __future__ import annotations

import importlib.util

# Top-level module -> the extra whose requirements install it (pyproject.toml's
# `[project.optional-dependencies]`; tests/flows/commands/test_extras.py holds the two together).
EXTRA_OF = {
    "torch": "train",
    "transformers": "train",
    "tokenizers": "train",
    "trl": "train",
    "peft": "train",
    "accelerate": "train",
    "datasets": "train",
    "gguf": "train",
    # installed with transformers; our code imports them directly
    "safetensors": "train",
    "huggingface_hub": "train",
    "prefect": "flows",
    "fastapi": "flows",
    "prefect_dask": "dask",
}


def missing_extra(error: ImportError) -> str | None:
    """The extra to install when `error` says one of its libraries is not installed, else None.

    A library that is installed but fails to import (a broken build, a missing submodule)
    is not a missing extra: its traceback is what the user needs then.

    >>> missing_extra(ModuleNotFoundError("No module named 'orjson_not_ours'", name="orjson_not_ours"))
    """
    root = (error.name or "").partition(".")[0]
    extra = EXTRA_OF.get(root)
    if extra is None or importlib.util.find_spec(root) is not None:
        return None
    return extra


# Commands that need more than one extra: the hint names every one that is missing at once.
NEEDS = {"pipeline": ("train", "flows"), "serve": ("train", "flows"), "demo": ("train", "flows")}
# The library that tells whether an extra is installed.
PROBE = {"train": "trl", "flows": "prefect", "dask": "prefect_dask"}


def install_hint(extra: str, error: ImportError, command: str | None = None) -> str:
    """The one line that says which extras `trajlake <command>` needs that this install lacks:
    `extra`, whose library `error` names, and the others the command needs (`NEEDS`).

    >>> install_hint("train", ModuleNotFoundError("No module named 'trl'", name="trl"), "agreement")
    "`trajlake agreement` needs the `train` extra (`trl` is not installed): pip install 'trajlake[train]' (in a checkout: pip install -e '.[train]')"
    """
    extras = [extra] + [
        other
        for other in NEEDS.get(command or "", ())
        if other != extra and importlib.util.find_spec(PROBE[other]) is None
    ]
    what = f"`trajlake {command}` needs" if command else "this needs"
    names = " and ".join(f"`{e}`" for e in extras)
    spec = ",".join(extras)
    return (
        f"{what} the {names} extra{'s' if len(extras) > 1 else ''} (`{error.name}` is not installed): "
        f"pip install 'trajlake[{spec}]' (in a checkout: pip install -e '.[{spec}]')"
    )
