"""Parsing Hermes/Qwen `<tool_call>` blocks: well-formed calls, and every way a call can be malformed."""

from __future__ import annotations

import pytest

from training.replay.rollout.parsing import canonical_arguments, parse_assistant_text


def test_plain_answer_has_no_calls() -> None:
    parsed = parse_assistant_text("The answer is 84.")
    assert parsed.content == "The answer is 84." and parsed.tool_calls == []


def test_well_formed_calls_keep_prose_and_order() -> None:
    text = (
        "Let me compute.\n<tool_call>\n"
        '{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>\n'
        '<tool_call>{"name": "lookup", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>'
    )
    parsed = parse_assistant_text(text)
    assert parsed.content == "Let me compute."
    assert [(c.name, c.arguments, c.error) for c in parsed.tool_calls] == [
        ("calculator", '{"expression": "1 + 2"}', None),
        ("lookup", '{"query": "x"}', None),  # arguments given as a JSON string are accepted
    ]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('{"name": "calculator", "arguments": {"expression": "1 +', "bad_json"),  # cut off mid-JSON
        ('["calculator"]', "not_an_object"),  # JSON, but not an object
        ('{"arguments": {"a": 1}}', "missing_name"),  # no tool name
        ('{"name": "calculator", "arguments": [1, 2]}', "bad_arguments"),  # arguments must be an object
        (
            '{"name": "calculator", "arguments": "{oops"}',
            "bad_arguments",
        ),  # string arguments that are not JSON
    ],
)
def test_malformed_calls_get_reason_codes(body: str, error: str) -> None:
    (call,) = parse_assistant_text(f"<tool_call>{body}</tool_call>").tool_calls
    assert call.error == error and not call.ok
    assert call.raw == body


def test_unclosed_tag_is_a_malformed_call() -> None:
    parsed = parse_assistant_text('Sure. <tool_call>{"name": "calculator"')
    assert parsed.content == "Sure."
    (call,) = parsed.tool_calls
    assert call.error == "unclosed_tag" and call.raw == '{"name": "calculator"'


def test_canonical_arguments_ignore_key_order_and_spacing() -> None:
    assert (
        canonical_arguments('{"b": 1, "a": [1, 2]}')
        == canonical_arguments({"a": [1, 2], "b": 1})
        == '{"a":[1,2],"b":1}'
    )
    assert canonical_arguments("not json ") == "not json"
