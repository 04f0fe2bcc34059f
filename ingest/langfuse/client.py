"""A polite reader of the Langfuse public API, on top of the langfuse SDK v5.

Reads go through the SDK's own endpoints: `api.observations.get_many` (v2 observations,
cursor paging, field groups) and `api.scores.get_many` (v3 scores). What this module
adds is the behaviour a scheduled puller needs:

- **Retries we control.** The SDK retries 408/409/429/5xx itself, but only twice, from
  a fixed 1 s base, and never a dropped connection (`api/core/http_client.py`). We turn
  its retries off per request (`max_retries=0`) and retry 429, 5xx and transport errors
  here: exponential backoff with jitter from `backoff_base_s`, or the server's
  `Retry-After` (seconds, HTTP-date or `retry-after-ms`) when it sends one, capped at
  `backoff_max_s`. 409 is not retried: on a read it is not transient.
- **Errors that say what to do.** 401/403 -> `LangfuseAuthError`; nothing listening
  before the first answer -> `LangfuseUnreachable` (a wrong host fails at once instead
  of backing off); a non-Langfuse answer (HTML, other JSON) -> `LangfuseProtocolError`;
  400 -> `LangfuseRequestRejected`; retries exhausted -> `LangfuseUnavailable`.
- Pages come back as plain camelCase dicts, the same shape as export files, so one
  converter handles pulls and imports.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import pydantic
from langfuse.api import LangfuseAPI
from langfuse.api.core.api_error import ApiError

from ingest.langfuse.config import OBSERVATION_FIELDS, SCORE_FIELDS, LangfuseConfig
from ingest.langfuse.errors import (
    LangfuseAuthError,
    LangfuseProtocolError,
    LangfuseRequestRejected,
    LangfuseUnavailable,
    LangfuseUnreachable,
)

OBSERVATIONS_PATH = "/api/public/v2/observations"
SCORES_PATH = "/api/public/v3/scores"
_NO_SDK_RETRIES = {"max_retries": 0}


@dataclass
class Page:
    """One page of a cursor-paged listing."""

    items: list[dict[str, Any]]
    next_cursor: str | None


@dataclass
class ClientStats:
    """What the client did, for the pull report."""

    requests: int = 0
    retries: int = 0
    waited_s: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)


def retry_after_seconds(headers: dict[str, str] | None, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait (`retry-after-ms`, `Retry-After` seconds or date).

    >>> retry_after_seconds({"retry-after": "3"})
    3.0
    >>> retry_after_seconds({}) is None
    True
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lower:
        try:
            return max(float(lower["retry-after-ms"]) / 1000, 0.0)
        except ValueError:
            pass
    value = lower.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(email.utils.mktime_tz(parsed) - (now if now is not None else time.time()), 0.0)


def is_retryable(status: int | None) -> bool:
    """429 and every 5xx: rate limits and server trouble pass; other codes will not."""
    return status is not None and (status == 429 or status >= 500)


class LangfuseClient:
    """Pages of observations and scores from one Langfuse project."""

    def __init__(
        self,
        config: LangfuseConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        httpx_client: httpx.Client | None = None,
    ) -> None:
        self.config = config
        self.stats = ClientStats()
        self._sleep = sleep
        self._answered = False  # after the first answer, a dropped connection is transient
        self._http = httpx_client or httpx.Client(timeout=config.timeout_s, follow_redirects=True)
        self._owns_http = httpx_client is None
        from langfuse import __version__ as sdk_version

        self.api = LangfuseAPI(
            base_url=config.host,
            username=config.public_key,
            password=config.secret_key,
            x_langfuse_sdk_name="python",
            x_langfuse_sdk_version=sdk_version,
            x_langfuse_public_key=config.public_key,
            timeout=config.timeout_s,
            httpx_client=self._http,
        )

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> LangfuseClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- listings --------------------------------------------------------------------------

    def observations_page(
        self,
        *,
        from_start_time: datetime | None,
        to_start_time: datetime | None,
        filter_json: str | None,
        cursor: str | None,
    ) -> Page:
        """One page of v2 observations (all field groups), newest first as the server orders."""
        params: dict[str, Any] = {
            "fields": OBSERVATION_FIELDS,
            "expand_metadata": ",".join(self.config.expand_metadata) or None,
            "limit": self.config.observations_page_size,
            "cursor": cursor,
            "from_start_time": from_start_time,
            "to_start_time": to_start_time,
            "filter": filter_json,
        }
        response = self._call(
            OBSERVATIONS_PATH,
            params,
            lambda: self.api.observations.get_many(**params, request_options=_NO_SDK_RETRIES),
        )
        return Page(
            [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in response.data],
            response.meta.cursor,
        )

    def scores_page(
        self,
        *,
        from_timestamp: datetime | None,
        to_timestamp: datetime | None,
        environment: str | None,
        session_id: str | None,
        cursor: str | None,
    ) -> Page:
        """One page of v3 scores with their subject and details."""
        params: dict[str, Any] = {
            "limit": self.config.scores_page_size,
            "cursor": cursor,
            "fields": SCORE_FIELDS,
            "environment": environment,
            "session_id": session_id,
            "from_timestamp": from_timestamp,
            "to_timestamp": to_timestamp,
        }
        response = self._call(
            SCORES_PATH, params, lambda: self.api.scores.get_many(**params, request_options=_NO_SDK_RETRIES)
        )
        return Page(
            [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in response.data],
            response.meta.cursor,
        )

    # --- one request, politely ---------------------------------------------------------------

    def _call(self, path: str, params: dict[str, Any], request: Callable[[], Any]) -> Any:
        host = self.config.host
        attempt = 0
        while True:
            self.stats.requests += 1
            status: int | None = None
            headers: dict[str, str] | None = None
            try:
                result = request()
                self._answered = True
                self._count(200)
                return result
            except ApiError as exc:
                self._answered = True
                status, headers = exc.status_code, exc.headers
                self._count(status)
                if status in (401, 403):
                    raise LangfuseAuthError(host, status, exc.body) from None
                if status == 400:
                    raise LangfuseRequestRejected(host, path, params, exc.body) from None
                if not is_retryable(status):
                    raise LangfuseProtocolError(host, path, status, exc.body) from None
                detail = f"HTTP {status}"
            except (pydantic.ValidationError, json.JSONDecodeError) as exc:
                raise LangfuseProtocolError(host, path, 200, f"unexpected response shape: {exc}") from None
            except httpx.TransportError as exc:
                if not self._answered and isinstance(exc, httpx.ConnectError | httpx.UnsupportedProtocol):
                    raise LangfuseUnreachable(host, f"{type(exc).__name__}: {exc}") from None
                detail = f"{type(exc).__name__}: {exc}"
            if attempt >= self.config.max_retries:
                raise LangfuseUnavailable(host, path, status, attempt + 1, detail)
            delay = self._delay(attempt, headers)
            attempt += 1
            self.stats.retries += 1
            self.stats.waited_s += delay
            self._sleep(delay)

    def _delay(self, attempt: int, headers: dict[str, str] | None) -> float:
        asked = retry_after_seconds(headers)
        if asked is not None:
            return min(asked, self.config.backoff_max_s)
        backoff = min(self.config.backoff_base_s * 2**attempt, self.config.backoff_max_s)
        return backoff * (0.8 + 0.4 * random.random())

    def _count(self, status: int | None) -> None:
        if status is not None:
            self.stats.statuses[status] = self.stats.statuses.get(status, 0) + 1
