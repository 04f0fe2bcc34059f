"""The polite client against the stand-in server: retries, Retry-After, clear errors, limits."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from ingest.langfuse.client import LangfuseClient, retry_after_seconds
from ingest.langfuse.config import LangfuseConfig
from ingest.langfuse.errors import (
    InvalidLangfuseConfig,
    LangfuseAuthError,
    LangfuseProtocolError,
    LangfuseRequestRejected,
    LangfuseUnavailable,
    LangfuseUnreachable,
)
from tests.ingest.langfuse.conftest import make_config
from tests.ingest.langfuse.standin import StandinLangfuse, serve

OBS = "/api/public/v2/observations"
SCORES = "/api/public/v3/scores"


def page(client: LangfuseClient, cursor: str | None = None):  # type: ignore[no-untyped-def]
    return client.observations_page(from_start_time=None, to_start_time=None, filter_json=None, cursor=cursor)


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"Retry-After": "7"}) == 7.0
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"Retry-After": "Fri, 20 Nov 2026 12:00:10 GMT"}, now=1_795_176_000.0) == 10.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None


def test_429_and_5xx_are_retried_honouring_retry_after(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str
) -> None:
    standin.fail_next(OBS, 429, times=1, retry_after="2")
    standin.fail_next(OBS, 503, times=1)
    standin.fail_next(OBS, 502, times=1, retry_after="120")  # capped at backoff_max_s
    sleeps = Sleeps()
    config = make_config(langfuse_url, standin, backoff_max_s=5.0)
    with LangfuseClient(config, sleep=sleeps) as client:
        result = page(client)
    assert len(result.items) == 5
    assert standin.count(OBS, 429) == 1 and standin.count(OBS, 503) == 1 and standin.count(OBS, 502) == 1
    assert sleeps[0] == 2.0  # the server's Retry-After, not our backoff
    assert 0.016 <= sleeps[1] <= 0.024  # no Retry-After: 0.01 s * 2 (second retry) +-20% jitter
    assert sleeps[2] == 5.0  # Retry-After 120 s capped at backoff_max_s
    assert client.stats.retries == 3 and client.stats.statuses[429] == 1


def test_retries_run_out_with_a_resumable_error(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str
) -> None:
    standin.fail_next(OBS, 500, times=10)
    config = make_config(langfuse_url, standin, max_retries=2)
    with LangfuseClient(config, sleep=Sleeps()) as client, pytest.raises(LangfuseUnavailable) as info:
        page(client)
    assert info.value.http_status == 500 and info.value.attempts == 3
    assert "rerun the same `trajlake ingest langfuse` command" in str(info.value)


def test_wrong_keys_are_a_clear_auth_error(standin: StandinLangfuse, langfuse_url: str) -> None:
    config = make_config(langfuse_url, standin, secret_key="sk-lf-wrong")
    with LangfuseClient(config) as client, pytest.raises(LangfuseAuthError) as info:
        page(client)
    assert info.value.http_status == 401 and info.value.host == langfuse_url
    assert "LANGFUSE_SECRET_KEY" in str(info.value)
    assert standin.count(OBS, 401) == 1  # not retried


def test_nothing_listening_fails_at_once() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sleeps = Sleeps()
    config = LangfuseConfig(host=f"http://127.0.0.1:{port}", public_key="pk", secret_key="sk")
    with LangfuseClient(config, sleep=sleeps) as client, pytest.raises(LangfuseUnreachable) as info:
        page(client)
    assert "Check --host" in str(info.value) and sleeps == []


@pytest.fixture
def not_langfuse() -> Iterator[str]:
    async def home(request):  # type: ignore[no-untyped-def]
        return HTMLResponse("<html>Welcome to nginx!</html>", status_code=404)

    with serve_app(Starlette(routes=[Route("/{path:path}", home)])) as url:
        yield url


def serve_app(app: Starlette):  # type: ignore[no-untyped-def]
    class Wrapped(StandinLangfuse):
        def app(self) -> Starlette:  # type: ignore[override]
            return app

    return serve(Wrapped())


def test_a_host_that_is_not_langfuse_says_so(not_langfuse: str) -> None:
    config = LangfuseConfig(host=not_langfuse, public_key="pk", secret_key="sk", max_retries=0)
    with LangfuseClient(config) as client, pytest.raises(LangfuseProtocolError) as info:
        page(client)
    assert info.value.http_status == 404 and "nginx" in str(info.value)


def test_requests_use_field_groups_and_page_limits(
    standin: StandinLangfuse, seeded: list[str], langfuse_url: str
) -> None:
    with LangfuseClient(
        make_config(langfuse_url, standin, observations_page_size=1000, scores_page_size=100)
    ) as client:
        first = page(client)
        scores = client.scores_page(
            from_timestamp=None, to_timestamp=None, environment=None, session_id=None, cursor=None
        )
    assert len(first.items) == 24 and first.next_cursor is None
    obs_params = standin.requests[0][1]
    assert obs_params["limit"] == "1000"
    assert set(obs_params["fields"].split(",")) >= {"core", "basic", "io", "model", "usage", "trace_context"}
    assert "parseIoAsJson" not in obs_params
    assert standin.requests[1][1]["limit"] == "100" and standin.requests[1][1]["fields"] == "details,subject"
    assert {s["dataType"] for s in scores.items} == {"NUMERIC", "BOOLEAN", "CATEGORICAL", "TEXT"}
    # io comes back as the raw strings the v2 API returns
    assert all(isinstance(o.get("input", ""), str) for o in first.items)


def test_page_sizes_beyond_the_api_limits_are_refused_before_any_request() -> None:
    with pytest.raises(InvalidLangfuseConfig) as info:
        LangfuseConfig(host="http://127.0.0.1:1", observations_page_size=5000)
    assert info.value.field == "observations_page_size"
    with pytest.raises(InvalidLangfuseConfig):
        LangfuseConfig(host="http://127.0.0.1:1", scores_page_size=101)
    with pytest.raises(InvalidLangfuseConfig):
        LangfuseConfig(host="localhost:3000")


def test_a_bad_filter_is_a_clear_400(standin: StandinLangfuse, langfuse_url: str) -> None:
    with (
        LangfuseClient(make_config(langfuse_url, standin)) as client,
        pytest.raises(LangfuseRequestRejected) as info,
    ):
        client.observations_page(
            from_start_time=None, to_start_time=None, filter_json='{"not": "a list"}', cursor=None
        )
    assert "filter must be a JSON array" in str(info.value)
    assert standin.count(OBS, 400) == 1


def test_expand_metadata_asks_for_untruncated_values(standin: StandinLangfuse, langfuse_url: str) -> None:
    standin.add_observation(
        id="m1",
        traceId="ab" * 16,
        type="SPAN",
        startTime="2026-08-01T10:00:00Z",
        metadata={"prompt_dump": "x" * 500, "note": "y" * 500},
    )
    with LangfuseClient(make_config(langfuse_url, standin, expand_metadata=("prompt_dump",))) as client:
        [item] = page(client).items
    assert len(item["metadata"]["prompt_dump"]) == 500  # expanded
    assert len(item["metadata"]["note"]) == 200  # the API's default truncation
    assert standin.requests[-1][1]["expandMetadata"] == "prompt_dump"
