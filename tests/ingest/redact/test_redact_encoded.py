"""Secrets behind percent-encoding and base64 are redacted in their encoded form, and
encoded data that holds no secret (ids, digests, images, ordinary base64 text) is kept
byte for byte (issue 45 item 2). The corpus of every secret in every place is
`test_redact_corpus.py`; here, exact outputs."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import textwrap
import uuid
from urllib.parse import quote

import pyarrow as pa
import pytest

from ingest.redact import RedactionConfig, prefilter_hits, redact_text

# Built by concatenation so that this file does not itself look like a leaked credential.
OPENAI_KEY = "sk-" + "proj-" + "Xq3vT9bLm2Zp8WcR4nHs6JdKfA1yEuGi"
PEM = (
    "-----BEGIN PRIVATE" + " KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n-----END PRIVATE" + " KEY-----"
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_percent_encoded_connection_string_keeps_its_encoding_around_the_marker() -> None:
    dsn = quote("postgresql://app:" + "Hunter2-Secret" + "@db.internal:5432/prod", safe="")
    out = redact_text(f"https://app.example.com/connect?dsn={dsn}&next=%2Fhome")
    assert out == (
        "https://app.example.com/connect?dsn=postgresql%3A%2F%2Fapp%3A[REDACTED]%40db.internal%3A5432%2Fprod"
        "&next=%2Fhome"
    )


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        (quote("Bearer " + "abcdefghijklmnop123"), "Bearer%20[REDACTED]"),
        # Form encoding: `+` is a space.
        ("auth_header=Bearer+" + "abcdefghijklmnop123", "auth_header=Bearer [REDACTED]"),
        (quote(PEM), "[REDACTED:private_key]"),
    ],
)
def test_percent_encoded_bearer_tokens_and_pem_blocks(encoded: str, expected: str) -> None:
    assert redact_text(encoded) == expected


def test_a_base64_secret_is_replaced_by_the_base64_of_its_redacted_text() -> None:
    out = redact_text(f"config {b64('use the key ' + OPENAI_KEY)} loaded")
    encoded = out.split()[1]
    assert base64.b64decode(encoded).decode() == "use the key [REDACTED:api_key]"
    assert out == f"config {encoded} loaded"


def test_wrapped_base64_in_json_keeps_its_line_width_escaped_slashes_and_validity() -> None:
    # `base64` wraps at 76 columns; PHP and Java encoders write `/` as `\/` in JSON.
    text = "token=" + "ghp_" + "16C7e42F292c6912E7710c838347Ae178B4a" + "\n" + ("note about the key " * 8)
    wrapped = "\n".join(textwrap.wrap(b64(text), 76))
    document = json.dumps({"blob": wrapped}).replace("/", "\\/")
    out = redact_text(document)
    blob = json.loads(out)["blob"]
    lines = blob.split("\n")
    assert len(lines) > 1 and {len(line) for line in lines[:-1]} == {76}
    assert base64.b64decode(blob.replace("\n", "")).decode() == text.replace(
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "[REDACTED:github_token]"
    )
    assert "\\/" in out or "/" not in blob  # slashes escaped as they were


def test_base64_inside_a_url_parameter_is_decoded_two_levels_deep() -> None:
    state = quote(b64("Authorization: Bearer " + "abcdefghijklmnop123"), safe="")
    out = redact_text(f"https://x.example.com/cb?state={state}")
    encoded = out.split("state=")[1].replace("%3D", "=")
    assert base64.b64decode(encoded).decode() == "Authorization: Bearer [REDACTED]"


def _png() -> str:
    rng = random.Random(7)
    return b64("") + base64.b64encode(b"\x89PNG\r\n\x1a\n" + rng.randbytes(4000)).decode()


# Encoded data that is not a secret: kept exactly (a redactor that eats these damages
# the conversations trajectories are trained on).
KEPT = [
    _png(),  # an image
    hashlib.sha256(b"x").hexdigest(),  # a digest
    base64.b64encode(hashlib.sha256(b"x").digest()).decode(),  # a digest in base64
    str(uuid.UUID(int=12345678901234567890)),
    "chatcmpl-" + "AbCdEfGhIjKlMnOpQrStUvWxYz012",  # a provider's response id
    b64("Hello, this is an ordinary sentence about the weather."),  # base64 text, no secret
    "https://example.com/search?q=hello%20world&path=%2Fhome%2Fuser",  # ordinary escapes
    "internationalizationLocalizationGlobalization",
    "100%25 of requests, printf('%02d')",
]


@pytest.mark.parametrize("text", KEPT)
def test_ids_digests_and_ordinary_encoded_data_are_kept(text: str) -> None:
    assert redact_text(text) == text
    assert redact_text(json.dumps({"v": text})) == json.dumps({"v": text})


@pytest.mark.parametrize(
    "text",
    [
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey="
        + "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KB"
        + ";EndpointSuffix=core.windows.net",
        # JSON with escaped slashes, a key of the usual 88 characters.
        json.dumps({"c": "AccountKey=" + "A" * 40 + "/" + "b" * 45 + "==;x=1"}).replace("/", "\\/"),
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey="
        + "Xq3vT9bLm2Zp8WcR4nHs6JdKfA1yEuGi2718281828Ab0=",
    ],
)
def test_azure_connection_string_keys_of_any_length(text: str) -> None:
    out = redact_text(text)
    assert "Key=[REDACTED]" in out and "Eby8" not in out and "AAAA" not in out and "Xq3v" not in out
    assert "SharedAccessKeyName=Root" in out or "SharedAccessKey" not in text


def test_the_prefilter_sends_encoded_text_to_the_decoder_and_leaves_ordinary_text() -> None:
    values = [
        quote("postgresql://a:" + "pw12345678" + "@h/db", safe=""),
        b64("api_key=" + OPENAI_KEY),
        "The weather in Paris is mild; bring an umbrella just in case.",
        "chatcmpl-" + "AbCdEfGhIjKlMnOpQrSt",
    ]
    # One array per value: a match running across the boundary of two values laid end to
    # end marks both (a false alarm by design, `prefilter_hits`).
    hits = [prefilter_hits(pa.array([value]), RedactionConfig()).to_pylist()[0] for value in values]
    assert hits == [True, True, False, False]
