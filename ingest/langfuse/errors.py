"""What can go wrong talking to Langfuse or reading its exports, with the context to act on it.

Every exception carries its evidence as attributes (`host`, `status`, `path`, `errors`)
so flows and tests branch on them, and its message names the offending item in
backticks, shows the evidence and says what state was left and what to do next.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.errors import IngestError


class LangfuseIngestError(IngestError):
    """Base of every error raised by `ingest.langfuse`."""


class InvalidLangfuseConfig(LangfuseIngestError, ValueError):
    """A config field or filter has a value the API would reject."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"invalid `{field}` = {value!r}: {reason}")


class LangfuseAuthError(LangfuseIngestError, PermissionError):
    """The server refused the keys (401) or the keys lack access to the project (403)."""

    def __init__(self, host: str, status: int, body: object) -> None:
        self.host = host
        self.http_status = status  # what Langfuse answered (`status` is the collector's own code)
        self.body = body
        what = "rejected the API keys" if status == 401 else "denied access with these keys"
        super().__init__(
            f"Langfuse at `{host}` {what} (HTTP {status}: {_excerpt(body)}). Check "
            "LANGFUSE_PUBLIC_KEY / LANGFUSE_SECRET_KEY (or --public-key / --secret-key): both must "
            "belong to the same project on this host (pk-lf-... and sk-lf-...). Nothing was written."
        )


class LangfuseUnreachable(LangfuseIngestError, ConnectionError):
    """Nothing answered at the host (refused connection, unknown name, timeout before any reply)."""

    def __init__(self, host: str, reason: str) -> None:
        self.host = host
        self.reason = reason
        super().__init__(
            f"cannot reach Langfuse at `{host}`: {reason}. Check --host (for Langfuse Cloud "
            "`https://cloud.langfuse.com` or `https://us.cloud.langfuse.com`; self-hosted: the web "
            "URL without `/api/public`). Nothing was written."
        )


class LangfuseProtocolError(LangfuseIngestError):
    """Something answered, but not like the Langfuse public API (wrong host, proxy page, old server)."""

    def __init__(self, host: str, path: str, status: int | None, body: object) -> None:
        self.host = host
        self.path = path
        self.http_status = status  # what Langfuse answered (`status` is the collector's own code)
        self.body = body
        super().__init__(
            f"`{host}` did not answer `{path}` like a Langfuse server (HTTP {status}: "
            f"{_excerpt(body)}). Is --host the Langfuse web URL, and is the server >= v4.59 "
            "(needed by the v2 observations and v3 scores APIs)?"
        )


class LangfuseRequestRejected(LangfuseIngestError, ValueError):
    """The server answered 400: a filter or parameter it does not accept."""

    def __init__(self, host: str, path: str, params: dict[str, object], body: object) -> None:
        self.host = host
        self.path = path
        self.params = params
        self.body = body
        shown = {k: v for k, v in params.items() if v is not None}
        super().__init__(
            f"Langfuse at `{host}` rejected `{path}` with {shown} (HTTP 400: {_excerpt(body)}). "
            "Fix the filter named in the message and rerun."
        )


class LangfuseUnavailable(LangfuseIngestError, ConnectionError):
    """Retries ran out on 429/5xx or a broken connection; the pull left a resumable checkpoint."""

    def __init__(self, host: str, path: str, status: int | None, attempts: int, detail: str) -> None:
        self.host = host
        self.path = path
        self.http_status = status  # what Langfuse answered (`status` is the collector's own code)
        self.attempts = attempts
        self.detail = detail
        super().__init__(
            f"Langfuse at `{host}` kept failing `{path}` ({detail}) after {attempts} attempts. "
            "Everything up to the last checkpoint is in the lake and the watermark keeps the "
            "resume cursor: rerun the same `trajlake ingest langfuse` command to continue."
        )


@dataclass(frozen=True)
class RecordProblem:
    """One bad record of an export file: where it is and why it was refused."""

    line: int
    reason: str  # snake_case code: invalid_json, unknown_record, missing_field, bad_timestamp, ...
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}: {self.detail}"


class MalformedExport(LangfuseIngestError, ValueError):
    """An export file has records that cannot be imported; the whole file is refused."""

    def __init__(self, path: str, problems: list[RecordProblem], records: int) -> None:
        self.path = path
        self.problems = problems
        self.records = records
        shown = "\n  ".join(str(p) for p in problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__(
            f"`{path}`: {len(problems)} malformed record(s) out of {records}; the file was not "
            f"imported (nothing written):\n  {shown}{more}\nFix or remove those lines and rerun."
        )


class ExportUnreadable(LangfuseIngestError, ValueError):
    """An export file cannot be read within the import's bounds (a compression bomb, a line
    or document over the size limit, an archive of several files); nothing is written."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot import `{path}`: {reason}; nothing was written")


class ExportNotFound(LangfuseIngestError, FileNotFoundError):
    """The export path does not exist or is not a readable file."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"export file `{path}` does not exist or is not a file")


def _excerpt(body: object, limit: int = 200) -> str:
    text = body if isinstance(body, str) else repr(body)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
