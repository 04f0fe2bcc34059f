r"""Every secret format of the corpus in every encoding real clients produce (issue 55 #3):
hex, every character as a JSON `\u00XX` escape, base64 wrapped at 76 columns with a
short last line (`\n` and `\r\n`), Go's `encoding/json` escapes (`\u0026`, `\u003c`),
and JSON nested in strings by an encoder that escapes quotes as `\u0022` (.NET).

The variants are generated over `test_redact_corpus.SECRETS` (all formats x all
encodings) and counted per encoding: tried, and stored (found after redaction by a leak
check that decodes every encoding itself rather than trusting the redactor's decoders).
Through `redact_text`, and through a running collector: OTLP span attributes, span
events and `/v1/logs` bodies, read back from every table of the lake.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from urllib.parse import quote, unquote

import httpx
import pytest

from ingest.redact import redact_text
from tests.ingest.conftest import wait_for
from tests.reliability.test_redact_corpus import SECRETS, every_string, log_leaks, placed, secrets_in

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def _u_escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _mime(text: str, last: int, newline: str) -> str:
    """`text` padded in front so that its base64, wrapped at 76 columns, ends with a line
    of `last` characters (a multiple of 4: padded base64)."""
    for filler in range(0, 200):
        encoded = base64.b64encode(f"{'x' * filler} conf {text}".encode()).decode()
        if len(encoded) > 76 and len(encoded) % 76 == last:
            return newline.join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    raise AssertionError(f"no padding gives a last line of {last}")


def go_json(value: object) -> str:
    """JSON as Go's `encoding/json` writes it: `<`, `>`, `&` as `\\u003c`, `\\u003e`, `\\u0026`."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def dotnet_json(value: object) -> str:
    """JSON as .NET's `System.Text.Json` writes it by default: quotes inside strings, `<`,
    `>`, `&`, `'` and `+` as `\\u00XX` escapes."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{dotnet_json(k)}:{dotnet_json(v)}" for k, v in value.items()) + "}"
    escaped = json.dumps(value)[1:-1].replace('\\"', "\\u0022")
    for char in "<>&'+":
        escaped = escaped.replace(char, f"\\u{ord(char):04x}")
    return f'"{escaped}"'


# encoding -> the values a client stores for a secret placed in its context (`placed`).
ENCODINGS: dict[str, Callable[[str], list[str]]] = {
    "hex": lambda t: [t.encode().hex(), "dump " + t.encode().hex().upper()],
    "u_escape_every_char": lambda t: [_u_escaped(t), json.dumps({"v": _u_escaped(t)})],
    "base64_76_lf_short_last_line": lambda t: [_mime(t, last, "\n") for last in range(4, 29, 4)],
    "base64_76_crlf_short_last_line": lambda t: [_mime(t, last, "\r\n") for last in range(4, 29, 4)],
    "go_encoding_json": lambda t: [
        go_json({"input": f"<key>{t}</key>"}),
        go_json({"q": f"a=1&{t}&b=2"}),
        go_json(
            {"url": f"https://acme.blob.core.windows.net/c/b?sv=2022-11-02&se=2026&sig={quote(t, safe='')}"}
        ),
    ],
    "json_nested_u_escapes": lambda t: [
        dotnet_json({"arguments": dotnet_json({"note": t})}),
        json.dumps({"tool": dotnet_json({"arguments": dotnet_json({"password": "x", "config": t})})}),
    ],
}


def exposed(text: str) -> list[str]:
    """The corpus secrets `text` holds in any of the encodings above, or the corpus's own
    (percent-encoding, base64), up to three encodings deep: decoded here, independently
    of the redactor, at every alignment."""
    views, layer = {text}, {text}
    for _ in range(3):
        layer = {decoded for view in layer for decoded in _decodings(view)} - views
        views |= layer
    return sorted({what for view in views for what in secrets_in(view)})


def _decodings(view: str) -> set[str]:
    out = {
        re.sub(r"\\+u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), view),  # `\u` escapes
        re.sub(r"\\+r|\r", "", view),  # line breaks between base64 lines, raw or escaped
        unquote(view),
    }
    for run in re.findall(r"[0-9A-Fa-f]{8,}", view):  # hex, both alignments
        for first in (0, 1):
            digits = run[first:]
            out.add(bytes.fromhex(digits[: len(digits) // 2 * 2]).decode("latin-1"))
    for run in re.findall(r"(?:[A-Za-z0-9+/=]|\\+/|\\+[nr]|[\r\n])+", view):  # base64, all offsets
        run = re.sub(r"\\+[nr]|[\r\n]|\\", "", run).replace("=", "")
        for first in range(4):
            chunk = run[first:]
            chunk = chunk[: len(chunk) - (len(chunk) % 4 == 1)]
            with contextlib.suppress(binascii.Error, ValueError):
                out.add(base64.b64decode(chunk + "=" * (-len(chunk) % 4)).decode("latin-1"))
    # Random bytes decoded are noise: only what reads as text is worth decoding again.
    return {d for d in out if d != view and sum(c.isprintable() or c in "\r\n\t" for c in d) >= 0.9 * len(d)}


VARIANTS = [
    (encoding, what, value)
    for encoding, encode in ENCODINGS.items()
    for what, secret in SECRETS
    for value in encode(placed(what, secret))
]


def test_every_variant_holds_its_secret_before_redaction() -> None:
    # The leak check reads every encoding: otherwise "0 stored" would prove nothing.
    missed = [(encoding, what) for encoding, what, value in VARIANTS if what not in exposed(value)]
    assert missed == []


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_no_secret_survives_redact_text_in_any_encoding(encoding: str) -> None:
    tried, stored = 0, []
    for name, what, value in VARIANTS:
        if name != encoding:
            continue
        for candidate in (value, json.dumps({"attribute": value})):
            tried += 1
            out = redact_text(candidate)
            if what in exposed(out):
                stored.append((what, out[:200]))
            if candidate.startswith("{"):
                json.loads(out)  # JSON text stays JSON
    print(f"{encoding}: {len(stored)} stored of {tried} tried")
    assert stored == [], f"{encoding}: {len(stored)} of {tried} stored: {stored[:3]}"


def _logs_request(trace_id: str, span_id: str, values: list[str]) -> dict[str, object]:
    now = int(datetime.now(UTC).timestamp() * 1e9)
    records = [
        {
            "timeUnixNano": str(now + n),
            "eventName": "gen_ai.user.message",
            "traceId": trace_id,
            "spanId": span_id,
            "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": value}}]}},
        }
        for n, value in enumerate(values)
    ]
    return {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}


def _traces_request(trace_id: str, span_id: str, values: list[str]) -> dict[str, object]:
    now = int(datetime.now(UTC).timestamp() * 1e9)
    string = [{"key": f"app.value.{n}", "value": {"stringValue": v}} for n, v in enumerate(values)]
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": v}]} for v in values])
    span = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "chat m",
        "startTimeUnixNano": str(now - 2_000_000_000),
        "endTimeUnixNano": str(now - 1_000_000_000),
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": messages}},
            *string,
        ],
        "events": [
            {"timeUnixNano": str(now - 1_500_000_000), "name": "note", "attributes": string},
        ],
    }
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def test_no_secret_in_any_encoding_reaches_the_lake_through_the_collector(start_collector) -> None:  # type: ignore[no-untyped-def]
    collector = start_collector(idle_timeout_s=0.3)
    headers = {"Content-Type": "application/json"}
    tried: Counter[str] = Counter()
    for index, encoding in enumerate(sorted(ENCODINGS)):
        for number, (what, _) in enumerate(SECRETS):
            values = [v for name, w, v in VARIANTS if name == encoding and w == what]
            trace_id = f"{index + 1:016x}{number + 1:016x}"
            span_id = f"{number + 1:016x}"
            for path, body in (
                ("/v1/traces", _traces_request(trace_id, span_id, values)),
                ("/v1/logs", _logs_request(trace_id, span_id, values)),
            ):
                response = httpx.post(f"{collector.url}{path}", content=json.dumps(body), headers=headers)
                assert response.status_code == 200, response.text
            tried[encoding] += len(values)
    collector.runtime.flush()
    traces = len(ENCODINGS) * len(SECRETS)
    wait_for(
        lambda: (
            collector.lake.has_table("trajectories")
            and len(every_string(collector.lake)["trajectories.trajectory_id"]) == traces
        ),
        timeout=60,
    )
    stored_strings = every_string(collector.lake)
    # What was sent arrived (the log bodies as messages, the attributes and events as spans).
    assert any("conf" in s or "key" in s for s in stored_strings["spans.attributes"])
    assert len(stored_strings["spans.events"]) >= traces
    stored: Counter[str] = Counter()
    for where, values in stored_strings.items():
        for value in values:
            for what in exposed(value):
                stored[what] += 1
                print(f"stored: {what} in {where}: {value[:120]!r}")
    for encoding in sorted(ENCODINGS):
        print(f"{encoding}: tried {tried[encoding]} (x 3 fields: attributes, events, log bodies)")
    assert stored == Counter(), stored
    assert log_leaks(collector.lake) == []


def _wrapped(data: bytes, newline: str) -> str:
    encoded = base64.b64encode(data).decode()
    return newline.join(encoded[i : i + 76] for i in range(0, len(encoded), 76))


_RNG = random.Random(55)
# Encoded data that is not a secret, in the same encodings: kept byte for byte.
KEPT = [
    hashlib.sha256(b"x").hexdigest(),
    hashlib.sha1(b"x").hexdigest().upper(),
    _RNG.randbytes(16).hex() + _RNG.randbytes(8).hex(),  # a trace id and a span id
    _RNG.randbytes(300).hex(),  # a binary dump
    "hello in hex: " + b"Hello, this is an ordinary sentence.".hex(),
    _wrapped(b"\x89PNG\r\n\x1a\n" + _RNG.randbytes(3001), "\r\n"),  # an image, MIME-wrapped
    _wrapped(b"\x89PNG\r\n\x1a\n" + _RNG.randbytes(3002), "\n") + "\nThanks",
    _wrapped(("An ordinary mail body, wrapped as MIME wraps it. " * 5).encode(), "\r\n"),
    go_json({"html": '<div class="note">Tom & Jerry</div>', "url": "https://e.com/?a=1&b=2"}),
    json.dumps({"v": _u_escaped("Hello, this is an ordinary message & more.")}),
    dotnet_json({"arguments": dotnet_json({"city": "Paris", "units": "metric", "q": "a+b's <x>"})}),
    json.dumps({"text": "caf\u00e9 \u4e2d\u6587 \u001b[0m"}),  # non-ASCII and control escapes
    "/usr/local/lib/python3.11/site-packages/transformers/models/auto/configuration_auto.py",
    "see https://github.com/org/repo/blob/0123456789abcdef0123456789abcdef01234567/README.md",
]


@pytest.mark.parametrize("text", KEPT, ids=range(len(KEPT)))
def test_ids_digests_images_and_ordinary_encoded_text_are_kept_byte_for_byte(text: str) -> None:
    assert redact_text(text) == text
    assert redact_text(json.dumps({"v": text})) == json.dumps({"v": text})
