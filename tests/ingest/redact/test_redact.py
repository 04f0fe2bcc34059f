"""Redaction before anything is written: secrets always, PII when configured, a user function last."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from ingest.redact import RedactionConfig, redact_table, redact_text
from ingest.redact.apply import _prefilter, prefilter_hits
from ingest.redact.rules import RANDOM_MIN_BITS, looks_random, shannon_bits
from tests.ingest.otlp_cases import chat_trace


@pytest.mark.parametrize(
    ("secret", "marker"),
    [
        ("sk-proj-Abcdefghijklmnopqrstuvwxyz012345", "[REDACTED:api_key]"),  # OpenAI project key
        ("sk-ant-api03-abcdefghijklmnopqrstuvwx", "[REDACTED:api_key]"),  # Anthropic
        ("sk-lf-1234567890abcdef1234", "[REDACTED:api_key]"),  # Langfuse secret key
        ("AKIAIOSFODNN7EXAMPLE", "[REDACTED:aws_key]"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:github_token]"),
        ("xoxb-1234567890-abcdefghij", "[REDACTED:slack_token]"),
        ("AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "[REDACTED:api_key]"),
    ],
)
def test_secrets_are_always_redacted(secret: str, marker: str) -> None:
    out = redact_text(json.dumps({"prompt": f"use {secret} please"}))
    assert secret not in out and marker in out and json.loads(out)["prompt"].startswith("use ")


def test_bearer_tokens_url_passwords_and_secret_fields_keep_json_valid() -> None:
    document = {
        "http.request.header.authorization": "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
        "db.connection_string": "postgresql://app:hunter2@db.internal:5432/prod",
        "config": json.dumps({"password": 'p"ss', "api_key": "abc"}),
        "password": "plain",
        "note": "curl -H 'Authorization: Bearer abcdefghijklmnop123' https://api",
        "gen_ai.usage.input_tokens": 123456789012,
    }
    out = redact_text(json.dumps(document))
    parsed = json.loads(out)
    assert parsed["http.request.header.authorization"] == "[REDACTED]"  # a secret-named field: all of it
    assert parsed["note"] == "curl -H 'Authorization: Bearer [REDACTED]' https://api"
    assert parsed["db.connection_string"] == "postgresql://app:[REDACTED]@db.internal:5432/prod"
    assert parsed["password"] == "[REDACTED]"
    assert parsed["gen_ai.usage.input_tokens"] == 123456789012  # numbers are not phone numbers
    assert "hunter2" not in out and "eyJhbGci" not in out


def test_emails_and_phones_only_when_configured() -> None:
    text = json.dumps({"m": "write to jane.doe@example.co.uk or call +1 (415) 555-0132"})
    assert redact_text(text) == text
    out = json.loads(redact_text(text, RedactionConfig(emails=True, phones=True)))["m"]
    assert out == "write to [REDACTED:email] or call [REDACTED:phone]"


def test_user_function_runs_last_on_every_text_column() -> None:
    table = pa.table(
        {
            "attributes": ['{"name": "Alice"}', None],
            "events": ["[]", "[]"],
            "status_message": ["Alice failed", None],
        }
    )
    out = redact_table(table, RedactionConfig(function=lambda s: s.replace("Alice", "[PERSON]")))
    assert out.column("attributes").to_pylist() == ['{"name": "[PERSON]"}', None]
    assert out.column("status_message").to_pylist() == ["[PERSON] failed", None]


def test_a_failing_redaction_function_refuses_only_its_request_and_stores_nothing_unredacted(
    start_collector,  # type: ignore[no-untyped-def]
) -> None:
    import threading

    import httpx

    from tests.ingest.conftest import sql

    def strict(text: str) -> str:
        if "BOOM" in text:
            raise ValueError("cannot redact this")
        return text

    collector = start_collector(redaction=RedactionConfig(function=strict))
    headers = {"Content-Type": "application/x-protobuf"}
    bodies = [chat_trace(content="BOOM" if i == 3 else "fine").SerializeToString() for i in range(8)]
    answers: dict[int, httpx.Response] = {}

    def post(i: int) -> None:  # at once, so that several share one group commit
        answers[i] = httpx.post(f"{collector.url}/v1/traces", content=bodies[i], headers=headers)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers[3].status_code == 503 and "Retry-After" in answers[3].headers
    assert "redaction function failed (ValueError: cannot redact this)" in answers[3].text
    assert all(answers[i].status_code == 200 for i in range(8) if i != 3)
    collector.runtime.flush()
    stored = sql(collector.lake, "SELECT attributes FROM spans")
    assert len(stored) == 7 * 2 and not any("BOOM" in row["attributes"] for row in stored)


def test_prefilter_scan_flags_every_value_arrow_regex_would_and_respects_slices() -> None:
    # The prefilter scans a string array's contiguous data in one pass; it must flag at least
    # the values a per-value regex match flags (a match across a value boundary may flag more).
    import random

    import pyarrow.compute as pc

    rng = random.Random(5)
    pieces = [
        "sk-",
        "proj-",
        "a" * 20,
        "://u:",
        "p@",
        "Bearer ",
        "xyz",
        '"password": ',
        "api_key=",
        "",
        " ",
        "é",
    ]
    values = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(400)]
    values = [None if rng.random() < 0.1 else v for v in values]
    array = pa.array(values, pa.string())
    config = RedactionConfig()
    for sliced in (array, array.slice(7, 300), array.slice(399)):
        ours = prefilter_hits(sliced, config).to_pylist()
        arrow = pc.fill_null(pc.match_substring_regex(sliced, pattern=_prefilter(config)), False).to_pylist()
        assert len(ours) == len(sliced) and all(o or not a for o, a in zip(ours, arrow, strict=True))
        assert sum(arrow) > 0 and sum(ours) <= sum(arrow) + 20  # false alarms are few


# Built by concatenation, so that this file does not itself look like a leaked credential.
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GCP_KEY_ID = "3f2a9c0d5e7b1a8c" + "4f6e2d9b0a7c5e3f1d8b6a4c"  # 40 hex characters


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        # A URL password with an empty user name (Redis's own form).
        ("redis://:Sup3r" + "S3cret@cache.internal:6379/0", "Sup3rS3cret"),
        ("rediss://:hunter2@cache", "hunter2"),
        # A URL in JSON text written by an encoder that escapes slashes, and deeper.
        ("postgresql:\\/\\/u:Pw" + "0rd!@db\\/prod", "Pw0rd!"),
        ("postgresql:\\\\\\/\\\\\\/u:Pw" + "0rd!@db", "Pw0rd!"),
        ("mysql://u:a\\/b" + "cd@db", "a\\/bcd"),
        # A GCP service account's key id: a field named for it, in JSON, nested JSON, text.
        (json.dumps({"type": "service_account", "private_key_id": GCP_KEY_ID}), GCP_KEY_ID),
        (json.dumps({"key": json.dumps({"private_key_id": GCP_KEY_ID})}), GCP_KEY_ID),
        ("private_key_id=" + GCP_KEY_ID, GCP_KEY_ID),
        # A Google API key whose last character is `-` (no `\b` after it).
        ("key AIza" + "SyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsH- done", "SyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsH-"),
        # A bare AWS secret access key: no label, found by its randomness.
        (f"use {AWS_SECRET} for the deploy", AWS_SECRET),
        (AWS_SECRET, AWS_SECRET),
        (f"the key:\n{AWS_SECRET}\nthanks", AWS_SECRET),
        (json.dumps({"m": f"the key:\n{AWS_SECRET}"}), AWS_SECRET),
        (json.dumps({"m": AWS_SECRET}).replace("/", "\\/"), AWS_SECRET.replace("/", "\\/")),
        (json.dumps({"n": json.dumps({"m": f"key\t{AWS_SECRET}."})}), AWS_SECRET),
    ],
)
def test_formats_found_by_an_outside_tester_are_redacted(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and "[REDACTED" in out, out
    if text.startswith("{"):
        json.loads(out)  # still JSON


def test_ids_digests_and_data_are_not_taken_for_random_secrets() -> None:
    import base64
    import hashlib
    import random
    import uuid

    rng = random.Random(7)
    blob = base64.b64encode(rng.randbytes(3000)).decode()
    # A certificate's body: 64-character lines, the last one 40 long (30 bytes, no padding).
    pem_body = base64.b64encode(rng.randbytes(48 * 3 + 30)).decode()
    certificate = "\n".join(pem_body[i : i + 64] for i in range(0, len(pem_body), 64))
    assert len(certificate.rsplit("\n", 1)[1]) == 40
    texts = [
        hashlib.sha1(b"x").hexdigest(),  # a git commit, a sha1 digest
        hashlib.sha1(b"y").hexdigest().upper(),
        hashlib.sha256(b"z").hexdigest(),
        str(uuid.UUID(int=rng.getrandbits(128))),
        rng.randbytes(16).hex() + " " + rng.randbytes(8).hex(),  # trace and span ids
        "data:image/png;base64," + blob,  # image data: one long run
        base64.b64encode(rng.randbytes(29)).decode(),  # 40 characters with `=` padding: data
        "-----BEGIN CERTIFICATE-----\n" + certificate + "\n-----END CERTIFICATE-----",
        "/home/User1/projects/MyApp/build/output1",  # 40 characters, but words
        "getUserAccountSettingsForOrganization2xy",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123" + "x",  # 41: longer than a key
        "chatcmpl-" + "AbCdEf0123456789GhIjKlMnOpQrS",  # provider ids
    ]
    for text in texts:
        for candidate in (text, json.dumps({"v": text}), json.dumps({"v": json.dumps({"w": text})})):
            assert redact_text(candidate) == candidate, candidate


def test_looks_random_needs_mixed_classes_and_high_entropy() -> None:
    assert looks_random(AWS_SECRET) and shannon_bits(AWS_SECRET) >= RANDOM_MIN_BITS
    assert not looks_random(AWS_SECRET.lower())  # no upper case
    assert not looks_random("0123456789abcdefABCDEF0123456789abcdefAB")  # hex, mixed case
    assert not looks_random("AbC1" * 10)  # low entropy
    assert not looks_random(AWS_SECRET[:-1])  # not 40 long
