"""Chat-template rendering at the token level: the first prompt, and tool-result suffixes.

Only two things are ever tokenised: the scenario's prompt prefix (once, at the start of a
rollout) and the text the template puts after an assistant turn that called tools (the tool
results and the next assistant header). Sampled tokens are never decoded and re-encoded, so
every turn's prompt is exactly the previous prompt + the sampled ids + the suffix ids.
SFT builds a stored conversation's ids the same way (`ChatRenderer.conversation_ids`), so it
trains exactly the tokens a policy samples.
"""

from __future__ import annotations

import json
from typing import Any

from training.chat.templates import ChatTemplateError, chat_template_for, check_renders_tools

_DUMMY = [{"role": "user", "content": "."}, {"role": "assistant", "content": "."}]


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lake message structs -> what chat templates expect (arguments as objects, no null fields).

    The one rendering of lake messages for every chat-template use: replay's prompts, GRPO's
    rows, evaluation and SFT's conversations (`training.datasets`), so what is trained is
    what the policy is shown when it samples.

    >>> template_messages([{"role": "assistant", "content": None, "name": None, "tool_call_id": None,
    ...     "tool_calls": [{"id": "c1", "name": "add", "arguments": '{"a": 1}'}], "is_error": None}])
    [{'role': 'assistant', 'content': '', 'tool_calls': [{'id': 'c1', 'type': 'function', 'function': {'name': 'add', 'arguments': {'a': 1}}}]}]
    """
    out = []
    for message in messages:
        m: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("name"):
            m["name"] = message["name"]
        if message.get("tool_call_id"):
            m["tool_call_id"] = message["tool_call_id"]
        calls = message.get("tool_calls") or []
        if calls:
            m["tool_calls"] = [
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {
                        "name": call.get("name") or "",
                        "arguments": _as_object(call.get("arguments")),
                    },
                }
                for call in calls
            ]
        out.append(m)
    return out


def _as_object(arguments: str | dict | None) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments


def parse_tools(tools: str | list | None) -> list[dict] | None:
    """Tool definitions from the lake's JSON text (or a list) -> list, or None when there are none."""
    if tools is None or tools == "":
        return None
    if isinstance(tools, str):
        tools = json.loads(tools)
    return list(tools) or None


def canonical_tools(tools: list[dict] | None) -> list[dict] | None:
    """Tool definitions with every object's keys in sorted order, as the lake stores them.

    A chat template's `tojson` writes keys in the order it is given, and a client (an agent
    calling `serve-sampler`) sends its own order: without this the policy is served a prompt it
    was never trained on (SmolLM2 trained on the lake's order called `calculator` with its JSON
    schema as the arguments when served the OpenAI SDK's order).

    >>> canonical_tools([{"type": "function", "function": {"name": "f", "description": "d"}}])
    [{'function': {'description': 'd', 'name': 'f'}, 'type': 'function'}]
    """
    return json.loads(json.dumps(tools, sort_keys=True)) if tools else tools


class ChatRenderer:
    """Token-level rendering with the chat template `templates.chat_template_for` picks for a tokenizer
    (its own, or the tool-aware ChatML one when its own ignores tools): replay, evaluation,
    `serve-sampler` and SFT all render through here."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_token: str = tokenizer.eos_token
        self.eos_token_id: int = tokenizer.eos_token_id
        self._template: str | None = None
        self._checked_tools = False

    @property
    def chat_template(self) -> str:
        """The template every rendering uses (chosen once, on first use)."""
        if self._template is None:
            self._template = chat_template_for(self.tokenizer)
        return self._template

    def render(self, messages: list[dict], tools: list[dict] | None, *, add_generation_prompt: bool) -> str:
        """Lake message structs (and tool definitions) -> the template's text."""
        return self.render_chat(
            template_messages(messages), tools, add_generation_prompt=add_generation_prompt
        )

    def render_chat(
        self, messages: list[dict], tools: list[dict] | None, *, add_generation_prompt: bool
    ) -> str:
        """Messages already in template form (`template_messages`) -> the template's text."""
        tools = canonical_tools(tools)
        if tools and not self._checked_tools:
            check_renders_tools(self.tokenizer, self.chat_template, tools)
            self._checked_tools = True
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            chat_template=self.chat_template,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        """Exact text of sampled ids, special tokens included (nothing is hidden from the record)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The first prompt: the scenario's messages plus the assistant header."""
        return self.encode(self.render(messages, tools, add_generation_prompt=True))

    def tool_suffix_text(self, tool_messages: list[dict]) -> str:
        """What the template writes after an assistant turn's EOS: tool results + next assistant header.

        Found by rendering a dummy conversation with and without the tool results and taking
        the difference, so it follows whatever template the tokenizer has.
        """
        base = self.render(_DUMMY, None, add_generation_prompt=False)
        full = self.render([*_DUMMY, *tool_messages], None, add_generation_prompt=True)
        if not full.startswith(base) or self.eos_token not in base:
            raise ChatTemplateError(
                "the chat template is not prefix-preserving for tool results (rendering with the tool "
                f"messages does not extend rendering without them: {base[-60:]!r} vs {full[len(base) - 60 :][:120]!r}); "
                "use a template like Qwen2.5's",
                reason="template_not_prefix_preserving",
            )
        after_eos = base[base.rindex(self.eos_token) + len(self.eos_token) :]
        return after_eos + full[len(base) :]

    def tool_suffix_ids(self, tool_messages: list[dict]) -> list[int]:
        return self.encode(self.tool_suffix_text(tool_messages))

    def conversation_ids(self, messages: list[dict], tools: list[dict] | None) -> tuple[list[int], list[int]]:
        """A whole conversation (template-form messages) as replay would hold it, and which ids were sampled.

        The ids are built the way a rollout builds them: the prompt up to each assistant
        turn's generation prompt, then that turn's text through its EOS (what a policy
        samples, mask 1), then the template text up to the next generation prompt (tool
        results, the next header: mask 0), each piece tokenised on its own. So SFT trains
        exactly the tokens a policy samples: not the newline after the assistant header
        (part of the prompt) nor the one after EOS (template text replay adds after a turn).

        A template that rewrites earlier turns when a later one is added (not prefix-
        preserving) cannot be replayed token-exactly either, and is refused.
        """
        full = self.render_chat(messages, tools, add_generation_prompt=False)
        ids: list[int] = []
        mask: list[int] = []
        done = 0  # characters of `full` already tokenised
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = self.render_chat(messages[:i], tools, add_generation_prompt=True)
            end = full.find(self.eos_token, len(prompt))
            if not full.startswith(prompt) or len(prompt) < done or end < 0:
                raise ChatTemplateError(
                    f"the chat template does not render assistant turn {i} after its own generation prompt "
                    f"(prompt ends {prompt[-60:]!r}, conversation has {full[len(prompt) - 60 : len(prompt) + 60]!r}); "
                    "such a template cannot be trained token-exactly; use a prefix-preserving one",
                    reason="template_not_prefix_preserving",
                )
            context = self.encode(full[done : len(prompt)])
            sampled = self.encode(full[len(prompt) : end + len(self.eos_token)])
            ids += context + sampled
            mask += [0] * len(context) + [1] * len(sampled)
            done = end + len(self.eos_token)
        tail = self.encode(full[done:])
        return ids + tail, mask + [0] * len(tail)
