"""The secret formats redaction removes, as RE2 rules, and the cheap prefilter in front of them.

Most formats are translated from the regexes of Yelp's detect-secrets plugins
(`detect_secrets/plugins/<name>.py`, cited per rule) rather than invented here; calling
detect-secrets itself would be a Python call per string, and this runs on the
collector's hot path as a few vectorised RE2 passes (`ingest.redact.apply`). Translation
notes: RE2 has no look-arounds or back-references, so a boundary the plugin checks with
`(?!\\w)` is a `\\b` or a captured terminator put back by the replacement.

The rules run on plain text (span names, service names, message content) and on JSON
text (attributes, events, metadata), including JSON nested inside JSON strings, where
quotes are escaped as `\\"`. A replacement never adds a quote or a backslash of its own
and never removes part of one, so JSON text stays valid JSON.

Rules are (name, pattern, replacement), applied in this order: whole private-key
blocks first, then the formats a secret has on its own, then the contexts that make any
value a secret (URLs, headers, secret-named fields), so that no rule cuts a secret in
half and leaves the rest for the next one to miss.

Last, one check that is not a regular expression: a bare random string with no label
(an AWS secret access key pasted alone). Finding those is a trade against ids, which are
random strings too, so it is narrow (`looks_random`): exactly 40 characters of base64's
alphabet standing alone (not part of a longer run, not followed by `=` padding), mixing
upper case, lower case and digits, not hex (git/sha1 digests, trace ids), with a Shannon
entropy of at least 4.3 bits per character (random 40-character keys: 4.78 on average,
below 4.3 about once in 3,000; words, paths and identifiers written together: 3.8-4.2).
All told, about one random key in 700 is kept. UUIDs (dashes), hex digests, trace ids
and long base64 data (images) are never cut; a 40-character base64 id of 30 random
bytes cannot be told from a key and is redacted.
"""

from __future__ import annotations

import math
from collections import Counter

# Field names whose value is a secret whatever it looks like (JSON keys and HTTP headers
# captured as `http.request.header.<name>`). A name must *end* with one of them, so that
# `gen_ai.usage.input_tokens` is not a token and `token_type` is not one either.
SECRET_NAMES = (
    r"api[_\-]?key|apikey|password|passwd|secret|token|authorization|cookie|credentials?"
    r"|private[_\-]?key|private[_\-]?key[_\-]?id|access[_\-]?key|session[_\-]?id"
)
# Keyword assignments in free text (`DB_PASSWORD=...`, `api_key: ...`): detect-secrets'
# KeywordDetector (plugins/keyword.py), narrowed to the keywords that name a secret on their own.
_ASSIGNED = (
    r"api[_\-]?key|apikey|passw(?:or)?d|pwd|secret[_\-]?key|client[_\-]?secret|access[_\-]?token"
    r"|auth[_\-]?token|private[_\-]?key[_\-]?id"
)
# Words that end the name of a URL parameter holding a secret.
_KEYWORDS = r"key|token|secret|password|passwd|pwd|signature|sig|credential|auth|session"
# A JSON string's content at depth 0, and at any depth inside another string (escaped quotes).
_JSON_STRING = r"\"(?:[^\"\\]|\\.)*\""
# The rest of a string value: stops before its closing quote, escaped or not.
_REST_OF_STRING = r"(?:[^\"\\]|\\+[^\"\\])*"
_PEM_LABEL = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
# A URL's `//`, also as `\/\/`: JSON written by encoders that escape slashes (PHP, Java's
# org.json), at any depth of JSON nested in strings.
_URL_SLASHES = r"(?:\\*/){2}"
# One character of a URL's password: an escaped slash included, so `p\/w` is one password.
_PASSWORD_CHAR = r"(?:[^@\s\"\\]|\\+/)"

SECRET_RULES: tuple[tuple[str, str, str], ...] = (
    # PrivateKeyDetector (plugins/private_key.py): any `BEGIN ... PRIVATE KEY` block; its
    # newlines are `\n` escapes in JSON text. A block cut short loses the rest of its string.
    (
        "private_key",
        _PEM_LABEL + r"[^\"]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
        "[REDACTED:private_key]",
    ),
    ("private_key_truncated", _PEM_LABEL + _REST_OF_STRING, "[REDACTED:private_key]"),
    # OpenAI (plugins/openai.py is a subset), Anthropic, Langfuse and other `sk-` style keys.
    ("api_key", r"\b(?:sk|pk|rk)-(?:proj-|ant-|lf-|live-|test-)?[A-Za-z0-9_\-]{16,}", "[REDACTED:api_key]"),
    # StripeDetector (plugins/stripe.py), test keys too.
    ("stripe_key", r"\b[rs]k_(?:live|test)_[0-9a-zA-Z]{24,}", "[REDACTED:stripe_key]"),
    # AWSKeyDetector (plugins/aws.py): access key ids, and secret access keys by their context.
    ("aws_access_key", r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b", "[REDACTED:aws_key]"),
    (
        "aws_secret_key",
        r"(?i)(aws.{0,20}?(?:key|pwd|pw|password|pass|token|secret).{0,20}?[\s'\"=:\\])"
        r"[0-9a-zA-Z/+]{40}([^0-9a-zA-Z/+=]|$)",
        r"\1[REDACTED:aws_secret]\2",
    ),
    # GitHubTokenDetector (plugins/github_token.py), plus fine-grained `github_pat_` tokens.
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9_]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        "[REDACTED:github_token]",
    ),
    # GitLabTokenDetector (plugins/gitlab_token.py).
    (
        "gitlab_token",
        r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glptt)-[A-Za-z0-9_\-]{20,}",
        "[REDACTED:gitlab_token]",
    ),
    # SlackDetector (plugins/slack.py): tokens and incoming-webhook URLs.
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "[REDACTED:slack_token]"),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+",
        "[REDACTED:slack_webhook]",
    ),
    # Google API keys: no boundary after the 35 characters, which may end with `-`
    # (where `\b` finds no boundary before a space).
    ("google_api_key", r"\bAIza[0-9A-Za-z\-_]{35}", "[REDACTED:api_key]"),
    # JwtTokenDetector (plugins/jwt.py), payload required to be JSON too (`eyJ`).
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*", "[REDACTED:jwt]"),
    # SendGridDetector, AzureStorageKeyDetector, NpmDetector, PypiTokenDetector, SquareOAuthDetector.
    ("sendgrid_key", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}", "[REDACTED:api_key]"),
    # Azure connection strings (storage `AccountKey=`, Service Bus and Event Hubs
    # `SharedAccessKey=`): the whole value, whatever its length, slashes JSON-escaped or not.
    (
        "azure_storage_key",
        r"(?i)((?:Account|SharedAccess)Key\s*=\s*)(?:[A-Za-z0-9+/=]|\\+/)+",
        r"\1[REDACTED]",
    ),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}", "[REDACTED:npm_token]"),
    ("pypi_token", r"\bpypi-AgE[A-Za-z0-9_\-]{70,}", "[REDACTED:pypi_token]"),
    ("square_oauth", r"\bsq0csp-[0-9A-Za-z_\-]{43}", "[REDACTED:api_key]"),
    # Hugging Face access tokens (not in detect-secrets).
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}", "[REDACTED:hf_token]"),
    # Then the rules that know a secret by its context, not its format: run last, they
    # may meet a marker left by a format rule, never a secret cut in half by one.
    # BasicAuthDetector (plugins/basic_auth.py): user:password@ in a URL, the user name
    # possibly empty (`redis://:password@host`, Redis's own form). A password may hold an
    # unescaped `/` (people write them so), but not be a bare port (`:3000/@vite`).
    (
        "url_password",
        rf"(:{_URL_SLASHES}[^/\s:@\"\\]*:)(?:[^@\s/\"\\]+|{_PASSWORD_CHAR}*[^@\s/\"\\0-9]{_PASSWORD_CHAR}*)@",
        r"\1[REDACTED]@",
    ),
    # Credentials in a URL's query string (`?api_key=...&token=...`, S3 and Azure signatures):
    # a parameter whose name ends with a secret word.
    (
        "url_query_secret",
        rf"(?i)([?&][A-Za-z0-9_.\-]*(?:{_KEYWORDS})=)[^&#\s\"'\\<>]+",
        r"\1[REDACTED]",
    ),
    # Authorization header values in free text (`Bearer+...`: form-encoded, `+` for the
    # space). `Token` (Django REST, many APIs) only
    # case-sensitive and long, so the English word is left alone.
    (
        "bearer_token",
        r"(?i)\b(bearer)(?:\s+|\+)[A-Za-z0-9\-._~+/]{8,}=*",
        r"\1 [REDACTED]",
    ),
    # Basic credentials are base64 (a multiple of 4 characters), which most words are not.
    (
        "basic_auth",
        r"(?i)\b(basic)\s+(?:[A-Za-z0-9+/]{4}){2,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?([^A-Za-z0-9+/=]|$)",
        r"\1 [REDACTED]\2",
    ),
    ("token_scheme", r"\b(Token)\s+[A-Za-z0-9\-._~+/]{20,}=*", r"\1 [REDACTED]"),
    # Secret-named JSON fields: the whole value, a string or an array of strings (headers).
    (
        "secret_field",
        rf"(?i)(\"[A-Za-z0-9_.\-]*(?:{SECRET_NAMES})\"\s*:\s*){_JSON_STRING}",
        r'\1"[REDACTED]"',
    ),
    (
        "secret_field_list",
        rf"(?i)(\"[A-Za-z0-9_.\-]*(?:{SECRET_NAMES})\"\s*:\s*)\[\s*{_JSON_STRING}(?:\s*,\s*{_JSON_STRING})*\s*\]",
        r'\1["[REDACTED]"]',
    ),
    # ... and inside JSON that is itself a string value (tool-call arguments, message lists).
    (
        "secret_field_nested",
        rf"(?i)(\\+\"[A-Za-z0-9_.\-]*(?:{SECRET_NAMES})\\+\"\s*:\s*)(\\+\")[^\"\\]*\\+\"",
        r"\1\2[REDACTED]\2",
    ),
    ("keyword_assignment", rf"(?i)((?:{_ASSIGNED})\s*[:=]\s*)[^\s\"'\\,;&]{{4,}}", r"\1[REDACTED]"),
)

# --- bare random strings (see the module docstring) ---------------------------------------

RANDOM_LENGTH = 40
RANDOM_MIN_BITS = 4.3
RANDOM_REPLACEMENT = "[REDACTED:random_secret]"
# A run of base64's alphabet at least RANDOM_LENGTH long; a `/` may be JSON-escaped (`\\/`).
BASE64_RUN = rf"(?:[A-Za-z0-9+/]|\\+/){{{RANDOM_LENGTH},}}"
_HEX = frozenset("0123456789abcdefABCDEF")


def shannon_bits(text: str) -> float:
    """Shannon entropy of `text`'s characters, in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_random(token: str) -> bool:
    """Whether a standalone RANDOM_LENGTH-character base64-alphabet `token` is taken for a
    secret: it mixes upper case, lower case and digits, is not hex, and its entropy is high."""
    return (
        len(token) == RANDOM_LENGTH
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
        and not set(token) <= _HEX
        and shannon_bits(token) >= RANDOM_MIN_BITS
    )


EMAIL_RULE = (
    "email",
    r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
    "[REDACTED:email]",
)
PHONE_RULE = (
    "phone",
    r"(?:\+\d{1,3}[\s.\-]?)?(?:\(\d{2,4}\)|\d{2,4})[\s.\-]\d{3,4}[\s.\-]\d{3,4}\b",
    "[REDACTED:phone]",
)

# --- secrets behind an encoding (`ingest.redact.encoded`) ----------------------------------

# A percent-encoded byte: a URL-encoded PEM block, a connection string or a header in a
# query string hides the punctuation the rules look for (`%3A%2F%2F`, `%20`).
PERCENT_ESCAPE = r"%[0-9A-Fa-f]{2}"
_BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# The bytes of text a secret is written in: printable ASCII, tab and line breaks.
_TEXT_BYTES = frozenset({0x09, 0x0A, 0x0D, *range(0x20, 0x7F)})
# How many aligned 4-character groups of base64 a secret must fill to be looked for:
# any 14 bytes of text fill 4 groups wherever they start. Random ids fill 4 groups of
# text-like characters about once in a thousand, hex digests once in ten thousand,
# identifiers and words almost never (none in 5 MB of Python source).
BASE64_TEXT_GROUPS = 4


def _base64_text_group() -> str:
    """One 4-character base64 group that can decode to 3 bytes of text: each position
    carries 6 bits of the bytes, so text (bytes 0x09-0x7E) allows only some characters
    at the first three positions (the first: `C`, `D`, `I`-`Z`, `a`-`f`)."""
    first = {b >> 2 for b in _TEXT_BYTES}
    second = {((a & 3) << 4) | (b >> 4) for a in _TEXT_BYTES for b in _TEXT_BYTES}
    third = {((a & 15) << 2) | (b >> 6) for a in _TEXT_BYTES for b in _TEXT_BYTES}
    classes = ["[" + "".join(_BASE64[i] for i in sorted(p)) + "]" for p in (first, second, third)]
    # `+` and `/` only ever land in the last position; JSON may escape the slash.
    return "".join(classes) + r"(?:[A-Za-z0-9+]|\\*/)"


# Where base64 may hide text long enough to hold a secret: BASE64_TEXT_GROUPS groups in a
# row that may each decode to text. Images and other binary data rarely look like that
# for long; those that do are rejected by the decoder on their first bytes.
BASE64_TEXT = f"(?:{_base64_text_group()}){{{BASE64_TEXT_GROUPS}}}"

# Hex of text: each byte of text is two hex digits, the first 2-7 (printable ASCII) or 0
# before 9, a or d (tab, line breaks). HEX_TEXT_BYTES of them in a row (the 14 bytes of
# base64's four groups): 9 of 200,000 random SHA-256 digests have that, 3 of 200,000 trace ids.
HEX_TEXT_BYTES = 14
HEX_TEXT = rf"(?:[2-7][0-9A-Fa-f]|0[9AaDd]){{{HEX_TEXT_BYTES}}}"
# A JSON `\u` escape of a printable ASCII character (`\u0026`, `\\u0022` in JSON nested
# in a string): Go, .NET and some clients write punctuation, or every character, so.
# Escaped control characters alone (`\u001b[0m` in a tool's output) hide no secret.
JSON_ASCII_ESCAPE = r"\\+u00[2-7][0-9A-Fa-f]"

# A cheap superset of where the secret rules can match, mostly literals (which RE2 scans
# several times faster than the full rules): rows it misses cannot hold a secret the
# rules would find, rows it hits get the full rules. Secret-named fields need the closing
# quote and keyword assignments their `=`/`:`, so `gen_ai.usage.input_tokens` on every
# chat span does not send it down the slow path. `tests/reliability/test_redact_corpus.py`
# checks that every rule's corpus entry passes the prefilter.
SECRET_PREFILTER = (
    rf"-----BEGIN |:{_URL_SLASHES}[^/\s:@\"\\]*:{_PASSWORD_CHAR}+@|(?i:bearer|basic)[\s+]|Token\s"
    r"|sk-|pk-|rk-|[rs]k_live_|[rs]k_test_|A3T|ABIA|ACCA|AKIA|ASIA|(?i:aws)"
    r"|gh[pousr]_|github_pat_|gl(?:pat|dt|ft|soat|rt|cbt|ptt)-|xox[abposr]-|hooks\.slack\.com|AIza|eyJ"
    r"|SG\.|(?i:AccountKey|SharedAccessKey)\s*=|npm_|pypi-|sq0csp-|hf_"
    # One alternation for the three context rules: a secret word ending a JSON key (its
    # quote, escaped or not), a URL parameter or an assignment (its `=` or `:`).
    rf"|(?i:(?:{SECRET_NAMES}|{_KEYWORDS}|{_ASSIGNED})(?:\\*\"|\s*[:=]))"
    # Where `looks_random` may find a bare key: any run of base64's alphabet that long.
    # Unbounded on purpose: the scan runs over many values laid end to end, where a
    # boundary test would see the next value's first character.
    rf"|{BASE64_RUN}"
    # Encoded text the rules cannot read as written (`ingest.redact.encoded` decodes it).
    rf"|{PERCENT_ESCAPE}|{JSON_ASCII_ESCAPE}|{HEX_TEXT}|{BASE64_TEXT}"
)
