"""A prompt never depends on the key order of the tool definitions it was given.

The lake stores tool definitions with sorted keys; an agent calling `serve-sampler` (the OpenAI
SDK) sends them in its own order. Rendered as given, the served prompt differed from the trained
one: SmolLM2 trained on the lake's order answered the demo's agent with its tool's JSON schema as
the arguments (2 of 80 right in production against 0.69 on val). `ChatRenderer` renders tools in
the lake's order, and the tool-aware template sorts them itself (what a vLLM server renders).
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from training.chat.render import ChatRenderer, canonical_tools
from training.chat.templates import tool_chatml_template

# the OpenAI SDK's order, as the demo's agent sends it: type before function, name before description
CLIENT_ORDER = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression and return the number.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 12 * (3 + 4)"}},
                "required": ["expression"],
            },
        },
    }
]
LAKE_ORDER = json.loads(json.dumps(CLIENT_ORDER, sort_keys=True))
MESSAGES = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "What is 2 + 3?"}]


def test_canonical_tools_sorts_every_level() -> None:
    tools = canonical_tools(CLIENT_ORDER)
    assert tools == CLIENT_ORDER  # the same definitions
    assert list(tools[0]) == ["function", "type"]
    assert list(tools[0]["function"]) == ["description", "name", "parameters"]
    assert list(tools[0]["function"]["parameters"]) == ["properties", "required", "type"]
    assert canonical_tools(None) is None and canonical_tools([]) == []


def test_the_renderer_renders_either_order_as_the_lake_does(tiny_model: Path) -> None:
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(tiny_model))
    served = renderer.render_chat(MESSAGES, CLIENT_ORDER, add_generation_prompt=True)
    trained = renderer.render_chat(MESSAGES, LAKE_ORDER, add_generation_prompt=True)
    assert served == trained and '"calculator"' in trained


def test_the_tool_aware_template_sorts_what_a_server_passes_it(tiny_model: Path) -> None:
    # a vLLM server renders the request's tools with the adapter's chat_template.jinja, unsorted
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    template = tool_chatml_template("You are helpful.")

    def text(tools: list[dict]) -> str:
        return tokenizer.apply_chat_template(
            MESSAGES, tools=tools, chat_template=template, tokenize=False, add_generation_prompt=True
        )

    assert text(CLIENT_ORDER) == text(LAKE_ORDER)
    assert '{"function": {"description": "Evaluate' in text(CLIENT_ORDER)
