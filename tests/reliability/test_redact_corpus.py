"""A corpus of realistic secrets, in every field the collector and the Langfuse paths store (issue 13, #5).

Each secret is written into every place a sender can put text: span names, service and
scope names, attributes (headers as lists, URLs with query strings, JSON nested in JSON
strings, chat messages), events, status messages, score comments and metadata,
Langfuse observations. Then every string of every table in the lake is read back
(nested message text included), and the spool's records and every file of every table's
Delta log (commits and checkpoints), and no secret may be left in any of them.

The secrets are built by concatenation so that this file does not itself look like a
leaked credential to a scanner.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, unquote_plus

import httpx
import pyarrow as pa
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ingest.langfuse.export.importer import import_langfuse_export
from ingest.otlp.spool.records import decode_table, read_segment
from ingest.redact import RedactionConfig, prefilter_hits, redact_table, redact_text
from store.lake import Lake
from store.schema import TABLES
from tests.ingest.conftest import wait_for
from tests.store.test_log_statistics import delta_log_text

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

PEM = (
    "-----BEGIN RSA PRIVATE" + " KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n"
    "aFDrBz9vFqU4yF1qZyWTCLzEx4Ib7bkxnS1c/2lFwW1Qj4J3mV9mNnT2dFlaDSU=\n-----END RSA PRIVATE" + " KEY-----"
)
# (what, secret): the secret text, as a sender would have it.
SECRETS: list[tuple[str, str]] = [
    ("openai_project_key", "sk-" + "proj-" + "Xq3vT9bLm2Zp8WcR4nHs6JdKfA1yEuGi"),
    ("anthropic_key", "sk-" + "ant-api03-" + "R2d2C3poBb8Yoda1Luke2Leia3Han4Solo"),
    ("aws_access_key_id", "AKIA" + "IOSFODNN7EXAMPLE"),
    ("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"),
    ("stripe_live_key", "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "github_fine_grained_pat",
        "github_" + "pat_" + "11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWX",
    ),
    ("github_classic_pat", "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a"),
    ("gitlab_pat", "glpat-" + "xT9-vQ2bLm8ZpWcR4nHs"),
    ("slack_bot_token", "xoxb-" + "2718281828-3141592653-AbCdEfGhIjKlMnOpQrStUv"),
    ("google_api_key", "AIza" + "SyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI"),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    ("huggingface_token", "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    ("pem_private_key", PEM),
    # Found by an outside tester: a Google key ending in `-`, URL passwords with an empty
    # user name and behind escaped slashes, a GCP service account's key id.
    ("google_api_key_dash_end", "AIza" + "SyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsH-"),
    ("url_password_empty_user", "Rd5" + "pass-Xy7q"),
    ("url_password_escaped_slashes", "Pg" + "Secr3t-42z"),
    ("gcp_private_key_id", "3f2a9c0d5e7b1a8c" + "4f6e2d9b0a7c5e3f1d8b6a4c"),
    # Found by an outside tester (issue 45): secrets behind an encoding, and Azure
    # connection strings whose key is not exactly 88 characters or has escaped slashes.
    (
        "azure_storage_account_key",
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KB",
    ),
    ("azure_service_bus_key", "Xq3vT9bLm2Zp8WcR4nHs6JdKfA1yEuGi" + "2718281828Ab0="),
    ("pem_url_encoded", PEM),
    ("postgres_password_url_encoded", "Pg" + "Secr3t-Enc0ded"),
    ("bearer_url_encoded", "tok" + "EnAbCdEf0123456789xyz"),
    ("openai_key_base64", "sk-" + "proj-" + "B64vT9bLm2Zp8WcR4nHs6JdKfA1yEuGi"),
    ("pem_base64_wrapped", PEM),
    ("postgres_uri_base64", "Pg" + "B64Secr3t-42z"),
    ("aws_secret_base64", "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYB64KEYEXMP"),
    ("bearer_base64_in_url", "tok" + "B64AbCdEf0123456789xyz"),
]
# How a secret is written where a sender puts it (a span name, a message): as itself,
# except the secrets that only their place makes secret. An AWS secret access key is
# bare: it is found by its randomness (`ingest.redact.rules.looks_random`).
PLACED = {
    "url_password_empty_user": "redis://:{s}@cache.internal:6379/0",
    "url_password_escaped_slashes": "postgresql:\\/\\/app:{s}@db.internal\\/prod",
    "gcp_private_key_id": '{"type": "service_account", "private_key_id": "{s}"}',
}


# Secrets a sender encodes before they reach a span: percent-encoded (a URL parameter, a
# form body) or base64 (a config blob, `base64` wrapping at 76 columns).
ENCODED: dict[str, Callable[[str], str]] = {
    "azure_storage_account_key": lambda s: (
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net"
    ),
    "azure_service_bus_key": lambda s: (
        f"Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}"
    ),
    "pem_url_encoded": lambda s: "https://vault.example.com/import?key=" + quote(s),
    "postgres_password_url_encoded": lambda s: (
        "https://app.example.com/connect?dsn=" + quote(f"postgresql://app:{s}@db.internal:5432/prod", safe="")
    ),
    "bearer_url_encoded": lambda s: "https://proxy.example.com/fwd?h=" + quote(f"Authorization: Bearer {s}"),
    "openai_key_base64": lambda s: _b64(f"OPENAI={s}"),
    "pem_base64_wrapped": lambda s: "\n".join(textwrap.wrap(_b64(s), 76)),
    "postgres_uri_base64": lambda s: "dsn " + _b64(f"postgresql://app:{s}@db.internal:5432/prod"),
    "aws_secret_base64": lambda s: _b64(f"[default]\naws_secret_access_key = {s}\n"),
    "bearer_base64_in_url": lambda s: "https://x.example.com/cb?state=" + quote(_b64(f"Bearer {s}"), safe=""),
}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def placed(what: str, secret: str) -> str:
    if what in ENCODED:
        return ENCODED[what](secret)
    return PLACED.get(what, "{s}").replace("{s}", secret)


# How each secret is put in front of the collector, by field. `{s}` is the secret.
CONTEXTS = {
    "prose": "please use {s} for the deploy",
    "env": "export AWS_SECRET_ACCESS_KEY={s}",
    "url_password": "postgresql://app:{s}@db.internal:5432/prod",
    "url_query": "https://api.example.com/v1/items?api_key={s}&token={s}&page=2",
    "bearer": "Authorization: Bearer {s}",
    "aws_prose": "the aws secret key is {s}, rotate it",
}


def _attributes(secret: str) -> dict[str, Any]:
    nested = json.dumps({"password": secret, "note": f"key {secret}"})
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": f"my key is {secret}, deploy it"}]},
    ]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": f"Using {secret} now."}]}]
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "gen_ai.input.messages": json.dumps(messages),
        "gen_ai.output.messages": json.dumps(answer),
        "tool.arguments": nested,
        "http.request.header.x-api-key": [secret],
        "http.request.header.authorization": ["Token " + secret],
        "url.full": CONTEXTS["url_query"].format(s=secret),
        **{f"context.{k}": v.format(s=secret) for k, v in CONTEXTS.items()},
    }


def _set(attributes: Any, values: dict[str, Any]) -> None:
    for key, value in values.items():
        kv = attributes.add()
        kv.key = key
        if isinstance(value, list):
            kv.value.array_value.values.add().string_value = value[0]
        else:
            kv.value.string_value = value


def otlp_request(secret: str, index: int) -> ExportTraceServiceRequest:
    """A two-span trace with `secret` in every text field OTLP has."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    _set(resource.resource.attributes, {"service.name": f"https://svc:{secret}@agents.example.com"})
    _set(resource.resource.attributes, {"deployment.token": secret})
    scope = resource.scope_spans.add()
    scope.scope.name = f"instrumentation {secret}"
    now = datetime.now(UTC).timestamp()
    trace_id = (index + 1).to_bytes(16, "big")
    root, chat = scope.spans.add(), scope.spans.add()
    for n, span in enumerate((root, chat)):
        span.trace_id, span.span_id = trace_id, (10 * index + n + 1).to_bytes(8, "big")
        span.start_time_unix_nano = int((now - 10 + n) * 1e9)
        span.end_time_unix_nano = int((now - 1 - n) * 1e9)
    root.name = f"invoke_agent {secret}"
    _set(root.attributes, {"gen_ai.operation.name": "invoke_agent"})
    chat.parent_span_id = root.span_id
    chat.name = f"GET https://u:{secret}@api.example.com/?key={secret}"
    chat.status.code, chat.status.message = 2, f"upstream refused {secret}"
    _set(chat.attributes, _attributes(secret))
    event = chat.events.add()
    event.name, event.time_unix_nano = "gen_ai.client.inference.operation.details", chat.start_time_unix_nano
    _set(event.attributes, {"detail": f"retrying with {secret}", "api_key": secret})
    return request


def every_string(lake: Lake) -> dict[str, list[str]]:
    """table.column -> every string stored in it (nested strings included), read with delta-rs."""
    from deltalake import DeltaTable

    out: dict[str, list[str]] = {}
    for name in TABLES:
        if not lake.has_table(name):
            continue
        table = DeltaTable(lake.table_uri(name)).to_pyarrow_table()
        for column in table.column_names:
            values = _strings(table.column(column).to_pylist())
            out[f"{name}.{column}"] = values
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def secrets_in(text: str) -> list[str]:
    """The corpus secrets (or long pieces of one) in `text`, as stored, JSON-escaped or
    not, also behind percent-encoding or base64 (`decoded_forms`)."""
    found = []
    texts = decoded_forms(text)
    for what, secret in SECRETS:
        pieces = [secret] if secret != PEM else PEM.split("\n")[1:3]
        forms = {f for p in pieces for f in (p, json.dumps(p)[1:-1], p.replace("/", "\\/"))}
        if any(f in t for f in forms for t in texts):
            found.append(what)
    return found


_BASE64_ISH = re.compile(r"(?:[A-Za-z0-9+/=]|\\+/|\\n|\n)+")


def decoded_forms(text: str) -> list[str]:
    """`text`, percent-decoded, and every run of base64's alphabet in either decoded at
    every alignment (line breaks and escaped slashes dropped): a leak check that does not
    trust the redactor's own decoder."""
    texts = [text, unquote(text), unquote_plus(text)]
    for layer in list(texts):
        for run in _BASE64_ISH.findall(layer):
            run = run.replace("\\n", "").replace("\n", "").replace("\\", "").rstrip("=")
            for offset in range(4):
                chunk = run[offset:].replace("=", "")
                # The last, partial group padded, not dropped: it holds a secret's last bytes.
                chunk = chunk[: len(chunk) - (len(chunk) % 4 == 1)]
                with contextlib.suppress(binascii.Error, ValueError):
                    texts.append(base64.b64decode(chunk + "=" * (-len(chunk) % 4)).decode("latin-1"))
    return texts


def leaks(lake: Lake) -> list[str]:
    """'what in table.column' for every corpus secret found stored."""
    return [
        f"{what} in {where}"
        for where, values in every_string(lake).items()
        for what in secrets_in("\n".join(values))
    ]


def spool_leaks(lake: Lake) -> list[str]:
    """'what in segment' for every corpus secret in the spool's records (decoded)."""
    found = []
    for segment in sorted((Path(lake.root) / "_spool").rglob("seg-*.wal")):
        records, _ = read_segment(segment)
        text = "\n".join(repr(decode_table(r).to_pylist()) for r in records)
        found += [f"{what} in {segment.name}" for what in secrets_in(text + segment.read_text("latin-1"))]
    return found


def log_leaks(lake: Lake) -> list[str]:
    """'what in table/_delta_log/file' for every corpus secret in a table's Delta log
    (file statistics are copies of column values), after a checkpoint of every table."""
    from deltalake import DeltaTable

    found = []
    for name in TABLES:
        if lake.has_table(name):
            DeltaTable(lake.table_uri(name)).create_checkpoint()
            for file, text in delta_log_text(lake, name).items():
                found += [f"{what} in {name}/_delta_log/{file}" for what in secrets_in(text)]
    return found


CASES = [(what, secret, context) for what, secret in SECRETS for context in sorted(CONTEXTS)]


@pytest.mark.parametrize(("what", "secret", "context"), CASES)
def test_every_secret_in_every_context_is_redacted_and_json_stays_valid(
    what: str, secret: str, context: str
) -> None:
    text = CONTEXTS[context].format(s=placed(what, secret))
    document = json.dumps({"text": text, "nested": json.dumps({"message": text})})
    for candidate in (text, document):
        out = redact_text(candidate)
        assert secret not in out and what not in secrets_in(out), (what, context, out)
    assert json.loads(json.loads(redact_text(document))["nested"])  # still JSON inside JSON
    # The prefilter is what lets a row skip the rules: it must see every secret.
    assert prefilter_hits(pa.array([text]), RedactionConfig()).to_pylist() == [True], (what, context)


def test_ordinary_text_is_left_alone() -> None:
    # Words next to credential-ish names are not credentials: a redactor that eats them
    # damages the conversations trajectories are trained on.
    text = json.dumps(
        {
            "content": "A basic understanding of token limits helps; the Token budget is 4096.",
            "gen_ai.usage.input_tokens": 1234,
            "gen_ai.usage.output_tokens": "56",
            "url": "https://example.com/search?q=laws+of+motion&page=2",
            "task-list": "task-0123456789abcdefghij done",
        }
    )
    assert redact_text(text) == text


def test_no_secret_reaches_any_table_through_the_collector_or_the_langfuse_paths(
    start_collector,  # type: ignore[no-untyped-def]
    tmp_path: Path,
) -> None:
    # Spooled records stay in the spool until `flush` below, to be read there.
    collector = start_collector(idle_timeout_s=0.3, flush_seconds=3600)
    lake = collector.lake
    headers = {"Content-Type": "application/x-protobuf"}
    for index, (what, bare) in enumerate(SECRETS):
        secret = placed(what, bare)
        body = otlp_request(secret, index).SerializeToString()
        assert httpx.post(f"{collector.url}/v1/traces", content=body, headers=headers).status_code == 200
        score = {
            "traceId": (index + 1).to_bytes(16, "big").hex(),
            "name": "helpful",
            "value": 1,
            "comment": f"reviewer pasted {secret}",
            "metadata": {"auth": f"Bearer {secret}", "note": secret},
        }
        assert httpx.post(f"{collector.url}/api/public/scores", json=score).status_code == 200
    assert list((Path(lake.root) / "_spool").rglob("seg-*.wal"))
    found = spool_leaks(lake)
    assert found == [], found
    collector.runtime.flush()
    wait_for(
        lambda: (
            lake.has_table("trajectories")
            and len(every_string(lake)["trajectories.trajectory_id"]) == len(SECRETS)
        )
    )

    # The Langfuse importer, into the same lake.
    now = datetime.now(UTC).isoformat()
    records = []
    for index, (what, bare) in enumerate(SECRETS):
        secret = placed(what, bare)
        trace = f"lf-trace-{index}"
        records.append(
            {
                "id": trace,
                "timestamp": now,
                "name": f"agent {secret}",
                "metadata": {"api_key": secret},
                "observations": [
                    {
                        "id": f"{trace}-gen",
                        "traceId": trace,
                        "type": "GENERATION",
                        "name": f"chat {secret}",
                        "startTime": now,
                        "endTime": now,
                        "model": "m",
                        "input": [{"role": "user", "content": f"here is {secret}"}],
                        "output": {"role": "assistant", "content": f"stored {secret}"},
                        "metadata": {"headers": {"authorization": f"Bearer {secret}"}},
                        "statusMessage": f"failed with {secret}",
                    }
                ],
                "scores": [
                    {
                        "id": f"{trace}-score",
                        "traceId": trace,
                        "name": "quality",
                        "value": 0.5,
                        "dataType": "NUMERIC",
                        "timestamp": now,
                        "comment": secret,
                        "metadata": {"token": secret},
                    }
                ],
            }
        )
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in records))
    report = import_langfuse_export(lake, export)
    assert report.trajectories == len(SECRETS) and report.rewards == len(SECRETS)

    stored = every_string(lake)
    # The corpus did arrive (its surroundings are there), and none of its secrets did.
    assert any("deploy it" in s for s in stored["trajectories.messages"])
    assert any("[REDACTED" in s for s in stored["rewards.metadata"])
    found = leaks(lake)
    assert found == [], found
    found = log_leaks(lake)
    assert found == [], found


def test_redact_table_reaches_strings_nested_in_lists_and_structs() -> None:
    secret = SECRETS[4][1]
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    table = pa.table(
        {
            "trajectory_id": ["t1", "t2", "t3"],
            "messages": pa.array(
                [
                    [{"role": "user", "content": f"key {secret}"}],
                    None,
                    [None, {"role": "a", "content": "ok"}],
                ],
                type=pa.list_(message),
            ),
        }
    )
    out = redact_table(table.slice(0), None).column("messages").to_pylist()
    assert out == [
        [{"role": "user", "content": "key [REDACTED:stripe_key]"}],
        None,
        [None, {"role": "a", "content": "ok"}],
    ]
    # A slice keeps its rows' own values (offsets into the parent's children).
    assert redact_table(table.slice(1), None).column("messages").to_pylist() == out[1:]
