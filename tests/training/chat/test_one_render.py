"""One rendering of lake messages: SFT's conversations are replay's prompts, token for token."""

from __future__ import annotations

from pathlib import Path

from store.catalog.connection import connect
from store.lake import Lake
from store.writer import write
from tests.training.helpers import make_trajectory
from training.chat.render import ChatRenderer, canonical_tools, parse_tools, template_messages
from training.datasets import select_sft
from training.run import load_tokenizer
from training.sft import tokenize_conversations

# A template that renders what the stock Qwen one leaves out (names on every role), so any
# difference between the two paths shows up in the ids.
NAMED_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{{ tools | tojson }}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}{% if m.name %} ({{ m.name }}){% endif %}\n"
    "{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} "
    "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
)


def test_sft_and_replay_render_a_stored_conversation_to_the_same_ids(lake: Lake, tiny_model: Path) -> None:
    row = make_trajectory("named", has_content=True)
    row["messages"][1]["name"] = "alice"  # a user with a name
    row["messages"][2]["tool_calls"].append({"id": "c2", "name": None, "arguments": '{"q": "x"}'})
    write(lake, "trajectories", [row])
    with connect(lake, read_only=True) as con:
        stored = con.execute("SELECT messages, tools FROM trajectories").to_arrow_table().to_pylist()[0]
    assert stored["messages"][0]["role"] == "system" and any(m["role"] == "tool" for m in stored["messages"])

    (sft_row,) = select_sft(lake, "SELECT trajectory_id FROM trajectories").rows
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(tiny_model)
    for template in (None, NAMED_TEMPLATE):  # (a template that renders tools is used as it is)
        if template:
            tokenizer.chat_template = template
        renderer = ChatRenderer(tokenizer)
        tools = parse_tools(stored["tools"])
        (sft_ids,) = tokenize_conversations([sft_row], tokenizer)["input_ids"]
        replay_text = renderer.render(stored["messages"], tools, add_generation_prompt=False)
        assert sft_ids == renderer.encode(replay_text)
    assert "(alice)" in replay_text


def test_sft_no_longer_trains_the_template_newlines_replay_never_samples(tiny_model: Path) -> None:
    """TRL's `{% generation %}` version of Qwen2.5's template also marks the newline after
    `<|im_start|>assistant` (part of replay's prompt) and the one after `<|im_end|>` (template
    text replay appends after a turn); SFT's mask is now exactly the sampled tokens."""
    from trl.chat_template_utils import get_training_chat_template

    tokenizer = load_tokenizer(str(tiny_model))
    row = make_trajectory("newlines")
    chat = {"messages": template_messages(row["messages"]), "tools": parse_tools(row["tools"])}
    out = tokenize_conversations([chat], tokenizer)
    ids, mask = out["input_ids"][0], out["assistant_masks"][0]
    trl = tokenizer.apply_chat_template(
        chat["messages"],
        tools=canonical_tools(chat["tools"]),  # rendered in the lake's key order, as SFT and replay do
        chat_template=get_training_chat_template(tokenizer),
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert list(trl["input_ids"]) == ids  # the same conversation, token for token
    extra = [
        i for i, (ours, theirs) in enumerate(zip(mask, trl["assistant_masks"], strict=True)) if theirs > ours
    ]
    assert not [
        i for i, (ours, theirs) in enumerate(zip(mask, trl["assistant_masks"], strict=True)) if ours > theirs
    ]
    assert [tokenizer.decode([ids[i]]) for i in extra] == ["\n"] * 4  # two per assistant turn
    eos = [i for i, m in enumerate(mask) if m and ids[i] == tokenizer.eos_token_id]
    assert len(eos) == 2 and all(i + 1 in extra and not mask[i + 1] for i in eos)  # the newline after EOS
