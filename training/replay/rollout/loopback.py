"""An ASGI app served by uvicorn on loopback in a background thread (tests, user rollouts)."""

from __future__ import annotations

import threading
import time
from typing import Any

from training.replay.errors import SamplerError


class LoopbackServer:
    """Serve an ASGI app with uvicorn on 127.0.0.1 in a background thread (port 0 = any free port)."""

    def __init__(self, app: Any, port: int = 0) -> None:
        import uvicorn

        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, name="trajlake-loopback", daemon=True)

    def start(self, timeout_s: float = 10.0) -> str:
        """Start and return the base URL (`http://127.0.0.1:PORT`)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise SamplerError(
                    "the loopback server did not start", backend="openai-app", reason="server_start"
                )
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
