"""Redaction before anything is written: secrets always, PII when configured, a user function last."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from ingest.redact import RedactionConfig, redact_table, redact_text


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
    from tests.ingest.otlp_cases import chat_trace

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

    from ingest.redact import _prefilter, prefilter_hits

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
