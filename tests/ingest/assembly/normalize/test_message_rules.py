"""One rule turns an OpenAI chat message into a lake message (`store.messages.from_openai`); the
assembler's compiled twins (`ingest.assembly.normalize`) give the same output for any input."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.assembly.normalize.genai_messages import messages_from_openai
from ingest.assembly.normalize.types import as_json_text, as_text, make_message, strip_or_none
from store.messages import (
    ROLE_ALIASES,
    an_id,
    content_text,
    from_openai,
    json_text,
    lake_message,
)

_TEXT = st.text(max_size=12)
_IDS = st.one_of(
    st.none(), _TEXT, st.sampled_from([" call_1", "<not specified>", "  ", "c 2 "]), st.integers()
)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
    max_leaves=8,
)
_PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries({"url": _TEXT})}),
    st.fixed_dictionaries({"content": _TEXT}),
)
_CONTENT = st.one_of(st.none(), _TEXT, st.lists(_PART, max_size=3), _JSON)
_NAMES = st.one_of(st.none(), _TEXT, st.integers())
_FUNCTION = st.fixed_dictionaries({"name": _NAMES}, optional={"arguments": st.one_of(_TEXT, _JSON)})
_CALL = st.one_of(
    st.fixed_dictionaries({"id": _IDS, "type": st.just("function"), "function": _FUNCTION}),  # OpenAI's
    st.fixed_dictionaries({"id": _IDS, "name": _NAMES, "arguments": st.one_of(_TEXT, _JSON)}),  # the lake's
    _TEXT,  # not a call at all
)
_MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.one_of(st.none(), st.just(""), st.sampled_from(["user", "assistant", "tool", "system"])),
        "content": _CONTENT,
        "name": _NAMES,
        "tool_call_id": _IDS,
        "id": _IDS,
        "tool_calls": st.one_of(st.none(), st.lists(_CALL, max_size=3)),
        "is_error": st.one_of(st.none(), st.booleans(), _TEXT),
    },
)


@settings(max_examples=400, deadline=None)
@given(_MESSAGE, st.sampled_from([None, *ROLE_ALIASES]))
def test_the_compiled_converter_follows_the_lake_rule(message: dict[str, Any], alias: str | None) -> None:
    if alias is not None:
        message = {**message, "role": alias}
    assert messages_from_openai([message]) == [from_openai(message)]


@settings(max_examples=300, deadline=None)
@given(_CONTENT, st.one_of(_TEXT, _JSON), _IDS)
def test_the_compiled_text_rules_follow_the_lake_rules(content: Any, arguments: Any, an: Any) -> None:
    assert as_text(content) == content_text(content)
    assert as_json_text(arguments) == json_text(arguments)
    assert strip_or_none(an) == an_id(an)


def test_the_compiled_builder_maps_roles_as_the_rule_does() -> None:
    for alias, role in ROLE_ALIASES.items():
        assert (
            make_message(alias, "x")
            == lake_message(role, "x")
            == from_openai({"role": alias, "content": "x"})
        )


def test_what_the_rule_does_with_each_kind_of_input() -> None:
    # a tool result names its call by `id` when it has no `tool_call_id`; image parts are kept as JSON
    assert from_openai({"role": "tool", "id": " r1 ", "content": 4})["tool_call_id"] == "r1"
    image = [{"type": "image_url", "image_url": {"url": "u"}}]
    assert (
        from_openai({"role": "user", "content": image})["content"]
        == '[{"type": "image_url", "image_url": {"url": "u"}}]'
    )
    # a lake message goes through unchanged, its `is_error` with it
    lake = lake_message("tool", "boom", tool_call_id="c1", is_error=True)
    assert from_openai(lake) == lake
    assert from_openai({"content": "hi", "is_error": "yes"}) == lake_message("user", "hi")
