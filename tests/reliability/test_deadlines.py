"""No client outlasts the collector's deadlines, on any route, nor holds its shutdown.

- A body stalled on any POST route (`/v1/metrics` included, plain or chunked) gets 408
  after `collector.request_timeout_s` and its connection closed.
- Headers that stop half-way get 408 too (a connection that never sent a byte is closed
  without an answer: there is no request to answer).
- A route that answers without reading its body cannot be held by a client trickling it.
- SIGTERM stops the collector at once, however many uploads are stalled: they get 503 +
  Retry-After (nothing of theirs was acknowledged), the process exits 0.

Real `trajlake collect` processes on loopback; socket timeouts bound every wait.
"""

from __future__ import annotations

import signal
import socket
import time

import pytest

from flows.background import free_port
from store.lake import Lake
from tests.reliability.test_durability import start

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

STALLED = {
    "metrics": b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    b"Content-Length: 1000\r\n\r\nabc",
    "metrics chunked": b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    "traces": b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\nabc",
    "logs": b"POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    b"Content-Length: 1000\r\n\r\nabc",
    "langfuse traces": b"POST /api/public/otel/v1/traces HTTP/1.1\r\nHost: x\r\n"
    b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\nabc",
    "scores": b"POST /api/public/scores HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n[{",
}
HALF_HEADERS = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def opened(port: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=20)
    sock.sendall(sent)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket timeout: 20 s)."""
    chunks = []
    with sock:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_stalled_body_gets_408_on_every_route(lake: Lake) -> None:
    port = free_port()
    start(lake, port, args=("--no-assemble", "--request-timeout-s", "1"))
    began = time.monotonic()
    socks = {name: opened(port, sent) for name, sent in STALLED.items()}
    answers = {name: read_all(sock) for name, sock in socks.items()}  # each returns once the server closes
    for name, answer in answers.items():
        assert answer.startswith(b"HTTP/1.1 408"), (name, answer[:200])
        assert b"did not arrive within 1s" in answer, (name, answer)
    assert time.monotonic() - began < 10  # not the 20 s socket timeout: the server ended them


def test_headers_that_stop_half_way_get_408(lake: Lake) -> None:
    port = free_port()
    start(lake, port, args=("--no-assemble", "--request-timeout-s", "1"))
    half, silent = opened(port, HALF_HEADERS), opened(port, b"")
    answer = read_all(half)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
    assert b"connection: close" in answer and b"request headers did not arrive within 1s" in answer
    assert read_all(silent) == b""  # no request began: closed without an answer


def test_a_trickled_body_cannot_hold_a_route_that_does_not_read_it(lake: Lake) -> None:
    port = free_port()
    start(lake, port, args=("--no-assemble", "--request-timeout-s", "1"))
    with opened(port, b"POST /no/such/route HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n") as sock:
        sock.settimeout(0.2)
        began, answer, closed = time.monotonic(), b"", False
        while not closed and time.monotonic() - began < 15:
            try:
                sock.sendall(b"x")  # a byte every 0.2 s: uvicorn's keep-alive timer never fires
                chunk = sock.recv(65536)
                answer += chunk
                closed = chunk == b""
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
    assert answer.startswith(b"HTTP/1.1 404")
    assert closed and time.monotonic() - began < 5, time.monotonic() - began


def test_sigterm_does_not_wait_for_stalled_clients(lake: Lake) -> None:
    port = free_port()
    process = start(lake, port)  # request_timeout_s 30: shutdown must not wait for it
    stalled = [opened(port, STALLED[name]) for name in ("metrics", "metrics chunked", "traces", "scores")]
    half, idle = opened(port, HALF_HEADERS), opened(port, b"")
    time.sleep(0.5)  # every request has reached its route
    began = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert time.monotonic() - began < 10
    for sock in stalled:
        answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"retry-after: 2" in answer.lower() and b"shutting down" in answer
    assert read_all(half) == b"" and read_all(idle) == b""
