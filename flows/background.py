"""Run an ASGI app with uvicorn on a loopback port in a background thread (demo and tests)."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from training.replay.samplers.vllm_launch import free_port

__all__ = ["BackgroundServer", "free_port"]


class BackgroundServer:
    """`with BackgroundServer(app) as server: httpx.get(server.url + "/health")`."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int | None = None, startup_timeout: float = 20.0
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout = startup_timeout
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="auto")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn:{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start within {self.startup_timeout:.0f}s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
