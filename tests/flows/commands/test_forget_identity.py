"""`trajlake forget` finds a user by the identity attributes, in any encoding, and nothing else.

The spans come through a real `trajlake collect` process (which stores attributes as raw
UTF-8 JSON) and, for the same user, through `store.writer.write` with `json.dumps` (`\\u00fc`
escapes): both are the user's and go. A trace of someone else that only mentions the id
(`app.target_user`), spans whose `gen_ai.operation.name` is `chat` and a `service.name`
stay: the id is not an identity there.
"""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from typer.testing import CliRunner

from flows.background import free_port
from flows.cli import app
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.erasure.plan import ErasureSelection, identity_rows
from store.erasure.verify import encodings, files_holding, verify_erased
from store.lake import Lake
from store.writer import write
from tests.reliability.test_durability import start

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

runner = CliRunner()
USER = "ünï-Ω-user-55"
MARKER = "marker-of-the-forgotten-55"
T0 = datetime(2026, 11, 20, tzinfo=UTC)


def _request(trace: str, spans: list[dict[str, str]], service: str = "shop") -> bytes:
    """One OTLP request: a trace of `spans` (each a dict of string attributes)."""
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    attr = resource.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", service
    scope = resource.scope_spans.add()
    for i, attributes in enumerate(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id = bytes.fromhex(trace), bytes.fromhex(f"{i + 1:016x}")
        span.name = f"step {i}"
        span.start_time_unix_nano, span.end_time_unix_nano = (
            1_700_000_000_000_000_000,
            1_700_000_001_000_000_000,
        )
        for key, value in attributes.items():
            kv = span.attributes.add()
            kv.key, kv.value.string_value = key, value
    return request.SerializeToString()


USERS_TRACE = "a1" * 16  # the user's: `user.id` on its root, a child without it
OTHERS_TRACE = "b2" * 16  # someone else's, naming the user as a target
CHAT_TRACE = "c3" * 16  # an ordinary chat, another user
LANGFUSE_TRACE = "d4" * 16  # the user's again, under Langfuse's key
ESCAPED_TRACE = "e5" * 16  # the user's, written by a writer that escapes non-ASCII


@pytest.fixture
def collected(lake: Lake) -> Lake:
    port = free_port()
    process = start(lake, port)
    bodies = [
        _request(USERS_TRACE, [{"user.id": USER, "note": MARKER}, {"gen_ai.prompt": f"{MARKER} child"}]),
        _request(
            OTHERS_TRACE,
            [{"user.id": "someone-else", "app.target_user": USER}, {"gen_ai.operation.name": "chat"}],
        ),
        _request(CHAT_TRACE, [{"enduser.id": "third-user", "gen_ai.operation.name": "chat"}], service="chat"),
        _request(LANGFUSE_TRACE, [{"langfuse.user.id": USER, "note": MARKER}]),
    ]
    with httpx.Client(timeout=30) as http:
        for body in bodies:
            response = http.post(
                f"http://127.0.0.1:{port}/v1/traces",
                content=body,
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert response.status_code == 200, response.text
    process.send_signal(signal.SIGTERM)  # a graceful stop flushes the spool into the lake
    assert process.wait(timeout=120) == 0
    write(
        lake,
        "spans",
        [
            {
                "trace_id": ESCAPED_TRACE,
                "span_id": f"{1:016x}",
                "source": "otel",
                "start_time": T0,
                "attributes": json.dumps({"enduser.id": USER, "note": MARKER}),  # `\u00fc...`
            }
        ],
    )
    write(
        lake,
        "trajectories",
        [
            {
                "trajectory_id": "traj-users",
                "trace_id": USERS_TRACE,
                "user_id": USER,
                "source": "otel",
                "started_at": T0,
                "messages": [{"role": "user", "content": MARKER}],
            },
            {
                "trajectory_id": "traj-others",
                "trace_id": OTHERS_TRACE,
                "user_id": "someone-else",
                "source": "otel",
                "started_at": T0,
                "messages": [{"role": "user", "content": f"please help {USER}"}],
            },
        ],
    )
    raw = connect(lake).execute("SELECT attributes FROM spans WHERE trace_id = $t", {"t": USERS_TRACE})
    assert any(USER in r[0] for r in raw.fetchall())  # the collector stored the id as raw UTF-8
    return lake


def _spans(lake: Lake) -> dict[str, int]:
    rows = connect(lake).execute("SELECT trace_id, count(*) FROM spans GROUP BY trace_id").fetchall()
    return dict(rows)


def test_a_non_ascii_user_is_found_in_raw_and_escaped_spans_and_erased_whole(collected: Lake) -> None:
    lake = collected
    dry = runner.invoke(app, ["forget", "--user-id", USER, "--lake", lake.root])
    assert dry.exit_code == 0, dry.output
    # per matched attribute: the collector's raw `user.id`, Langfuse's key, the escaped `enduser.id`
    for place in (
        'spans.attributes."user.id"',
        'spans.attributes."langfuse.user.id"',
        'spans.attributes."enduser.id"',
    ):
        assert place in dry.output, dry.output
    assert "trajectories.user_id" in dry.output and "app.target_user" not in dry.output

    result = runner.invoke(app, ["forget", "--user-id", USER, "--yes", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert "erased and checked" in result.output

    # the user's three traces went whole (the child span without `user.id` too)
    assert _spans(lake) == {OTHERS_TRACE: 2, CHAT_TRACE: 1}

    assert identity_rows(lake, snapshot(lake), "user_id", USER) == {"trajectories": 0, "spans": 0}
    assert files_holding(lake, [MARKER]) == []  # in no file, in any encoding
    con = connect(lake)
    assert con.execute("SELECT trajectory_id FROM trajectories").fetchall() == [("traj-others",)]
    audit = con.execute("SELECT rows, verified FROM erasures").fetchall()
    assert len(audit) == 1 and audit[0][1] is True
    assert json.loads(audit[0][0])["spans"] == 4 and json.loads(audit[0][0])["trajectories"] == 1


def test_the_check_finds_a_user_the_plan_missed_in_either_encoding(collected: Lake) -> None:
    from flows.stages.forget import plan

    lake = collected
    erasure, _ = plan(lake, ErasureSelection("user_id", USER))
    # A plan that missed the user's rows (as one that searched only `\u00fc` escapes did), and
    # nothing erased: the check must not pass.
    for target in erasure.targets.values():
        target.values = []
    problems = verify_erased(lake, erasure)
    assert any("`spans` still holds 3 rows naming the user_id" in p for p in problems), problems
    assert any("`trajectories` still holds 1 rows" in p for p in problems), problems


@pytest.mark.parametrize("value", ["chat", "shop", "someone-else-not", USER[:4]])
def test_a_value_that_is_no_ones_identity_erases_nothing(collected: Lake, value: str) -> None:
    """`chat` is a `gen_ai.operation.name` and a `service.name`, `shop` a service: no user."""
    before = _spans(collected)
    result = runner.invoke(app, ["forget", "--user-id", value, "--yes", "--lake", collected.root])
    assert result.exit_code == 0, result.output
    assert "nothing in the lake matches" in result.output
    assert _spans(collected) == before


def test_a_mention_of_the_user_in_another_users_trace_is_not_theirs(lake: Lake) -> None:
    plain = "plain-user-7"
    rows = [
        (OTHERS_TRACE, 1, {"user.id": "someone-else", "app.target_user": plain}),
        (OTHERS_TRACE, 2, {"gen_ai.prompt": "hello"}),
        (USERS_TRACE, 1, {"user.id": plain}),
        (USERS_TRACE, 2, {"gen_ai.prompt": "child span of the user's trace"}),
    ]
    write(
        lake,
        "spans",
        [
            {
                "trace_id": t,
                "span_id": f"{i:016x}",
                "source": "otel",
                "start_time": T0,
                "attributes": json.dumps(attrs),
            }
            for t, i, attrs in rows
        ],
    )
    result = runner.invoke(app, ["forget", "--user-id", plain, "--yes", "--lake", lake.root])
    assert result.exit_code == 0, result.output
    assert _spans(lake) == {OTHERS_TRACE: 2}  # the user's trace went whole, the other one stayed
    kept = connect(lake).execute("SELECT attributes FROM spans WHERE trace_id = $t", {"t": OTHERS_TRACE})
    assert any(json.loads(r[0]).get("app.target_user") == plain for r in kept.fetchall())


def test_encodings_cover_what_the_writers_store() -> None:
    spelled = {json.dumps(USER), json.dumps(USER, ensure_ascii=False), json.dumps(json.dumps({"k": USER}))}
    for text in spelled:
        assert any(form in text for form in encodings(USER)), text


@pytest.mark.parametrize("wait", ["-1", "nan", "inf"])
def test_a_spool_wait_that_is_no_duration_exits_2_in_one_line(lake: Lake, wait: str) -> None:
    write(lake, "erasures", [{"erasure_id": "e", "reason": "forget", "requested_at": T0}])
    result = runner.invoke(app, ["forget", "--user-id", "u", "--spool-wait-s", wait, "--lake", lake.root])
    assert result.exit_code == 2, result.output
    assert "--spool-wait-s" in result.output and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
