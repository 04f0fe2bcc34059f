"""How `trajlake collect` serves the collector: uvicorn, with deadlines no client can outlast.

- Request headers have `collector.request_timeout_s` from a request's first byte (and a
  fresh connection as long to send one): a late request gets 408 and is disconnected, a
  connection that never sent a byte is closed without an answer (there is no request to
  answer). uvicorn itself has no deadline for either.
- A body has the same time again (`BodyReader`, 408 from the route); a route that never
  reads its body cannot keep a trickling client either: the protocol closes a request
  whose body is still incomplete a second after that.
- Shutdown (SIGTERM, SIGINT) is bounded: listeners close, bodies still arriving end with
  503 + Retry-After, and requests still running get `GRACEFUL_SHUTDOWN_S` before they are
  cancelled; then the spool is flushed. No client can hold the process.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
import time
from asyncio import TimerHandle, Transport
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette

from ingest.otlp.app import create_app
from ingest.otlp.config import CollectorConfig
from ingest.otlp.http import BodyReader
from ingest.otlp.memory import bound_allocators

log = logging.getLogger("trajlake.ingest.otlp.server")

GRACEFUL_SHUTDOWN_S = 10.0  # what requests already being spooled get before they are cancelled
BODY_GRACE_S = 1.0  # the route's own 408 comes first; the protocol's cut is the backstop


def serve(
    config: CollectorConfig, *, log_level: str = "warning", ready: Callable[[], None] | None = None
) -> None:
    """Run the collector in the foreground until SIGINT/SIGTERM (then flush and stop, bounded)."""
    if config.bounded_memory:
        bound_allocators()  # first: before any thread has an arena of its own
    app = create_app(config)
    server = CollectorServer(server_config(config, app, log_level=log_level), app.state.bodies)
    if ready is not None:
        threading.Thread(target=_announce, args=(server, ready), daemon=True).start()
    server.run()


def server_config(config: CollectorConfig, app: Starlette, *, log_level: str = "warning") -> uvicorn.Config:
    """How uvicorn runs the collector: its address, the header and body deadlines
    (`collector.request_timeout_s`) and a bounded graceful shutdown."""
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        http=guarded_protocol(config.request_timeout_s),
        timeout_graceful_shutdown=int(GRACEFUL_SHUTDOWN_S),
    )


class CollectorServer(uvicorn.Server):
    """uvicorn, with a shutdown that waits on no client, and a clean exit (status 0) on
    SIGTERM, as service managers expect (uvicorn re-raises the signal after stopping)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals = [s for s in self._captured_signals if s != signal.SIGTERM]

    def __init__(self, config: uvicorn.Config, bodies: BodyReader | None = None) -> None:
        super().__init__(config)
        self.bodies = bodies

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.bodies is not None:
            self.bodies.stop()  # uploads in progress answer 503 now instead of holding the shutdown
        await super().shutdown(sockets)


def _announce(server: uvicorn.Server, ready: Callable[[], None]) -> None:
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        ready()


def header_timeout_response(timeout_s: float) -> bytes:
    """The raw 408 for a request whose headers did not all arrive (there is no route yet to
    answer it, nor a content type to follow: `google.rpc.Status` as JSON)."""
    body = (
        b'{"code":4,"message":"request headers did not arrive within %gs; nothing was written"}' % timeout_s
    )
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )


def guarded_protocol(timeout_s: float) -> type[Any]:
    """uvicorn's httptools protocol with a deadline for each request's headers and body.

    The header deadline starts when the connection opens and when each request begins,
    and ends when the request's headers are complete; the body deadline starts then and
    ends when the body is complete (its 408 comes from the route, `BodyReader`).
    """
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _deadline: TimerHandle | None = None
        _request_begun = False  # a byte of a request arrived: late headers get their 408

        def _arm(self, seconds: float, expire: Callable[[], None]) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(seconds, expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_too_slow(self) -> None:
            self._deadline = None
            if self.transport.is_closing():
                return
            # A 408 only where nothing else is being written (a pipelined request's answer could be).
            if self._request_begun and (self.cycle is None or self.cycle.response_complete):
                log.info("408 to %s: no complete request headers in %gs", self.client, timeout_s)
                self.transport.write(header_timeout_response(timeout_s))
            else:
                log.info("closing a connection from %s: no request in %gs", self.client, timeout_s)
            self.transport.close()

        def _body_too_slow(self) -> None:
            # Only reached when the route did not read the body (its own deadline answers 408
            # first) and the client still trickles it, which would keep the connection forever.
            self._deadline = None
            if not self.transport.is_closing():
                log.info(
                    "closing a connection from %s: its request body took over %gs", self.client, timeout_s
                )
                self.transport.close()

        def connection_made(self, transport: Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm(timeout_s, self._headers_too_slow)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            self._request_begun = True
            self._arm(timeout_s, self._headers_too_slow)
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._request_begun = False
            self._arm(timeout_s + BODY_GRACE_S, self._body_too_slow)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._disarm()
            super().on_message_complete()

    return GuardedHttpToolsProtocol
