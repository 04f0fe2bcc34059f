"""Exceptions of the ingest package. Context lives in attributes so the collector and flows can branch on it.

Every error maps to one HTTP answer of the OTLP/HTTP specification (`status`), so the
collector turns any of them into the right response without a table of special cases.
"""

from __future__ import annotations

import errno

from store.errors import SettingError


class IngestError(Exception):
    """Base class for every error raised by `ingest`."""

    status: int = 500


class MalformedPayload(IngestError, ValueError):
    """A request body could not be decoded (bad protobuf, bad JSON, bad ids). Not retried: 400."""

    status = 400

    def __init__(
        self, what: str, detail: str, *, path: str | None = None, fix: str = "fix the sender"
    ) -> None:
        self.what = what
        self.detail = detail
        self.path = path
        where = f" at `{path}`" if path else ""
        super().__init__(f"malformed {what}{where}: {detail}; nothing was written, {fix}")


class PayloadTooLarge(IngestError, ValueError):
    """A body (compressed or decompressed) is over the configured limit: 413."""

    status = 413

    def __init__(self, limit: int, *, decompressed: bool) -> None:
        self.limit = limit
        self.decompressed = decompressed
        which = "decompressed body" if decompressed else "body"
        super().__init__(
            f"{which} is over the limit of {limit} bytes; send smaller batches "
            "(e.g. OTEL_BSP_MAX_EXPORT_BATCH_SIZE) or raise `collector.max_body_mb`"
        )


class UnsupportedMediaType(IngestError, ValueError):
    """A Content-Type or Content-Encoding the collector does not speak: 415."""

    status = 415

    def __init__(self, header: str, value: str, accepted: tuple[str, ...]) -> None:
        self.header = header
        self.value = value
        self.accepted = accepted
        super().__init__(f"unsupported {header} `{value}`; accepted: {', '.join(accepted)}")


class Unauthorized(IngestError, PermissionError):
    """Authentication is configured and the request's credentials are missing or wrong: 401."""

    status = 401

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme
        super().__init__(f"missing or wrong credentials: this endpoint expects `{scheme}` authentication")


class Overloaded(IngestError, RuntimeError):
    """The writer cannot keep up; the client should retry after `retry_after` seconds: 503."""

    status = 503

    def __init__(self, pending_bytes: int, limit: int, retry_after: int, cause: str | None = None) -> None:
        self.pending_bytes = pending_bytes
        self.limit = limit
        self.retry_after = retry_after
        self.cause = cause
        because = f" because {cause}" if cause else ""
        super().__init__(
            f"collector is behind: {pending_bytes} bytes wait to be written (limit {limit}){because}; "
            f"retry after {retry_after}s"
        )


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` says the disk is full: an OSError's errno, or delta-rs's message,
    which carries the OS error only as text (`No space left on device (os error 28)`)."""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(error)
    return any(f"(os error {code})" in text for code in (errno.ENOSPC, errno.EDQUOT))


def describe_write_error(error: BaseException, where: str) -> str:
    """What went wrong writing under `where`, a full disk said as such (not as `[Errno 28]`)."""
    if is_disk_full(error):
        return f"the disk is full: no space left on the device of `{where}` (ENOSPC)"
    return f"writing to `{where}` failed ({type(error).__name__}: {str(error)[:200]})"


class SpoolWriteFailed(IngestError, RuntimeError):
    """The spool could not store a request durably (the disk is full, the directory is
    gone): nothing of it was acknowledged, so the client retries: 503."""

    status = 503

    def __init__(self, directory: str, error: OSError, retry_after: int) -> None:
        self.directory = directory
        self.errno = error.errno
        self.retry_after = retry_after
        super().__init__(
            f"{describe_write_error(error, directory)}; nothing from this request was stored, "
            f"retry after {retry_after}s"
        )


class CollectorSettingError(IngestError, SettingError):
    """An invalid collector setting or combination of them."""

    def __init__(self, message: str, *, field: str, value: object = None) -> None:
        SettingError.__init__(self, message, field=field, value=value)


class InstrumentError(IngestError, ValueError):
    """`instrument` was called without a destination (or with two)."""


class SpoolBusy(IngestError, RuntimeError):
    """Another live collector process owns the spool directory (each process needs its own)."""

    def __init__(self, directory: str, holder: str) -> None:
        self.directory = directory
        self.holder = holder
        super().__init__(
            f"spool `{directory}` is owned by another collector ({holder}); give this one its own "
            "`--spool-dir`, or leave it unset to get a spool of its own under the lake"
        )


class RedactionFailed(IngestError, RuntimeError):
    """The configured redaction function raised: nothing is stored unredacted, so the request is
    refused as retryable (503) until the function is fixed."""

    status = 503

    def __init__(self, error: BaseException, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(
            f"the redaction function failed ({type(error).__name__}: {str(error)[:200]}); nothing was "
            f"stored, retry after {retry_after}s"
        )


class LakeUnavailable(IngestError, RuntimeError):
    """Writing to the lake failed for a reason the client did not cause (a full disk, an
    unreachable object store): retryable, 503."""

    status = 503

    def __init__(self, lake: str, error: BaseException, retry_after: int) -> None:
        self.lake = lake
        self.retry_after = retry_after
        cause = (
            describe_write_error(error, lake)
            if is_disk_full(error)
            else f"could not write to the lake `{lake}` ({type(error).__name__}: {str(error)[:200]})"
        )
        super().__init__(f"{cause}; nothing was stored, retry after {retry_after}s")


class RequestTimeout(IngestError, TimeoutError):
    """A client took longer than the limit to send its request: 408, and the connection is
    closed, so a stalled sender holds no buffer and no connection."""

    status = 408

    def __init__(self, timeout_s: float, received: int) -> None:
        self.timeout_s = timeout_s
        self.received = received
        super().__init__(
            f"the request body did not arrive within {timeout_s:g}s ({received} bytes came); nothing "
            "was written, send it again (a slow link: raise `collector.request_timeout_s`)"
        )


class ClientDisconnected(IngestError, ConnectionError):
    """The client went away before its request was read: nothing was written, nobody to answer."""

    status = 499  # nginx's "client closed request"; the answer is never delivered

    def __init__(self) -> None:
        super().__init__("the client disconnected before its request body was read; nothing was written")
