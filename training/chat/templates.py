"""The chat template every use renders with, and a tool-aware one for models whose own ignores tools.

Many small instruct models ship a chat template that drops `tools=` on the floor
(SmolLM2-135M-Instruct's is plain ChatML with a default system prompt): the text rendered
with a tools list equals the text without it, so the policy is never shown its tools and
cannot call them. `chat_template_for(tokenizer)` is the one decision, taken the same way by
replay's renderer, SFT's tokenisation, evaluation and `serve-sampler` (all through
`ChatRenderer`), and by `training.run.load_tokenizer`, which puts the chosen template on the
tokenizer so it is saved beside every adapter (`chat_template.jinja`: what a vLLM server
is given with `--chat-template`):

- a template that renders tools is kept as it is;
- a ChatML template that ignores tools (EOS `<|im_end|>`, turns `<|im_start|>role\\n...`)
  is replaced by `tool_chatml_template`, Hermes-style: tool definitions inside
  `<tools></tools>` in the system turn (after the model's own default system prompt, kept),
  assistant tool calls as `<tool_call>{json}</tool_call>`, results as `<tool_response>`
  blocks in a user turn (the format `training.replay.rollout.parsing` reads);
- any other template that ignores tools is kept, and rendering tools with it is refused
  (`ChatTemplateError`, reason `template_ignores_tools`) rather than silently hiding them.

The tool-aware template marks with `{% generation %}` exactly the tokens a policy samples
after the generation prompt `<|im_start|>assistant\\n`: the content, the tool calls and the
closing `<|im_end|>` (EOS), not the newline after it, so TRL's assistant masks and what
replay records as sampled are the same tokens.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CHATML_EOS = "<|im_end|>"
TOOL_CHATML_NAME = "trajlake-tool-chatml"
_PROBE_USER = "What is 2 + 3?"
_PROBE_MESSAGES = [{"role": "user", "content": _PROBE_USER}]
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "trajlake_probe_tool",
            "description": "Says whether tools are rendered.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
]


class ChatTemplateError(ValueError):
    """A chat template cannot render what it is asked to (tools it ignores, no template at all,
    turns it does not render prefix-preservingly); `reason` is a snake_case code
    (`template_ignores_tools`, `no_chat_template`, `template_not_prefix_preserving`)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# Hermes-style tool-aware ChatML. `__DEFAULT_SYSTEM__` becomes the model's own default system
# prompt (a JSON string literal, which Jinja reads as a string) or `none`.
_TOOL_CHATML = r"""{#- trajlake's tool-aware ChatML (Hermes-style tools) for models whose own template ignores
    tools. {% generation %} marks exactly what a policy samples after '<|im_start|>assistant\n':
    content, tool calls and the closing <|im_end|>. -#}
{%- set default_system = __DEFAULT_SYSTEM__ %}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system = default_system %}
    {%- set rest = messages %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if system %}
        {{- system + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- '\n' + (tool | tojson(sort_keys=True)) }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif system %}
    {{- '<|im_start|>system\n' + system + '<|im_end|>\n' }}
{%- endif %}
{%- for message in rest %}
    {%- if message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- generation %}
            {{- message['content'] or '' }}
            {%- for tool_call in message['tool_calls'] or [] %}
                {%- if tool_call['function'] is defined %}
                    {%- set tool_call = tool_call['function'] %}
                {%- endif %}
                {%- if message['content'] or not loop.first %}
                    {{- '\n' }}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call['name'] + '", "arguments": ' + (tool_call['arguments'] | tojson) + '}\n</tool_call>' }}
            {%- endfor %}
            {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\n' }}
    {%- elif message['role'] == 'tool' %}
        {%- if loop.first or rest[loop.index0 - 1]['role'] != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' }}
        {%- if loop.last or rest[loop.index0 + 1]['role'] != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""


def tool_chatml_template(default_system: str | None = None) -> str:
    """The tool-aware ChatML template, with `default_system` as the system prompt of conversations without one.

    >>> "<tool_call>" in tool_chatml_template("You are helpful.")
    True
    """
    return _TOOL_CHATML.replace("__DEFAULT_SYSTEM__", json.dumps(default_system))


def template_identity(template: str | None) -> dict[str, str | None]:
    """What the lineage records of the template an adapter was trained with: its name
    (`trajlake-tool-chatml` for the tool-aware one, else `model`: the model's own) and sha256.

    >>> template_identity(tool_chatml_template(None))["name"]
    'trajlake-tool-chatml'
    """
    if template is None:
        return {"name": None, "sha256": None}
    name = TOOL_CHATML_NAME if template.startswith(_TOOL_CHATML[:40]) else "model"
    return {"name": name, "sha256": hashlib.sha256(template.encode()).hexdigest()}


def render(tokenizer: Any, template: str, messages: list[dict], tools: list[dict] | None = None) -> str:
    """`template` applied to template-form messages (no generation prompt), as text."""
    return tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False)


def ignores_tools(tokenizer: Any, template: str | None = None) -> bool:
    """Whether a template renders a conversation with a tools list exactly as without one."""
    template = template or own_template(tokenizer)
    return render(tokenizer, template, _PROBE_MESSAGES, _PROBE_TOOLS) == render(
        tokenizer, template, _PROBE_MESSAGES
    )


def is_chatml(tokenizer: Any, template: str | None = None) -> bool:
    """Whether a template writes ChatML turns (`<|im_start|>user\\n...<|im_end|>`) and EOS is `<|im_end|>`."""
    template = template or own_template(tokenizer)
    turn = f"<|im_start|>user\n{_PROBE_USER}{CHATML_EOS}"
    return tokenizer.eos_token == CHATML_EOS and turn in render(tokenizer, template, _PROBE_MESSAGES)


def default_system_prompt(tokenizer: Any, template: str | None = None) -> str | None:
    """The system prompt a ChatML template writes when a conversation brings none (None if it writes none)."""
    text = render(tokenizer, template or own_template(tokenizer), _PROBE_MESSAGES)
    head = text.split("<|im_start|>user\n", 1)[0]
    start = "<|im_start|>system\n"
    if start not in head:
        return None
    return head.split(start, 1)[1].split(CHATML_EOS, 1)[0]


def own_template(tokenizer: Any) -> str:
    """The tokenizer's own chat template; none at all is an error naming the tokenizer."""
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        raise ChatTemplateError(
            f"tokenizer `{getattr(tokenizer, 'name_or_path', '?')}` has no chat template; give the model "
            "one (`chat_template.jinja` in its folder)",
            reason="no_chat_template",
        )
    return template


def chat_template_for(tokenizer: Any) -> str:
    """The template every use renders this tokenizer's conversations with (see the module docstring).

    Idempotent: the tool-aware template renders tools, so choosing again keeps it.
    """
    template = own_template(tokenizer)
    if ignores_tools(tokenizer, template) and is_chatml(tokenizer, template):
        return tool_chatml_template(default_system_prompt(tokenizer, template))
    return template


def check_renders_tools(tokenizer: Any, template: str, tools: list[dict] | None) -> None:
    """Refuse to render a tools list with a template that would drop it."""
    if tools and ignores_tools(tokenizer, template):
        raise ChatTemplateError(
            f"the chat template of `{getattr(tokenizer, 'name_or_path', '?')}` ignores `tools=` and is not "
            "ChatML, so trajlake has no tool-aware template for it; give the model a chat template that "
            "renders tools (its `chat_template.jinja`)",
            reason="template_ignores_tools",
        )
