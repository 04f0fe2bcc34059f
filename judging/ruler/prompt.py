"""The judge's prompt: rubric, the group's shared messages once, each trajectory's remainder by id.

Shape (what the judge receives as two chat messages):

- system: the task (score each trajectory in [0, 1], relative to the others), the rubric,
  and the JSON answer format `{"scores": {"t1": {"explanation", "score"}, ...}}`.
- user: `<context>` with the messages every trajectory of the group shares (the
  scenario prompt: sent once, not once per trajectory), then one
  `<trajectory id="tN">` block per trajectory with the messages after that prefix.

Trajectories are shuffled with a per-group seed before labelling (position bias: judges
prefer what they read first or last). Labels are positions in the shuffled order,
`t1..tN`; the caller keeps the label -> trajectory_id map and matches answers by label.

Truncation rule (fitting the judge's context). Size is estimated as rendered characters
/ `chars_per_token`; the budget is `max_context_tokens` minus room for the answer
(`max_output_tokens`, else 200 tokens per trajectory + 200). Until the prompt fits:

1. every message content longer than `max_message_chars` is cut in the middle
   (head and tail kept, `[... N chars truncated ...]` in between);
2. the per-message cap is halved, down to 256 characters, over all messages;
3. inner messages are dropped: the shared context keeps its first and last two
   messages, each trajectory its first message and its last k (k shrinking to 1),
   with `[N messages omitted]` in their place. The final answer is always kept;
4. if it still does not fit, the group fails with reason `context_overflow` (a
   recorded failure; raise `max_context_tokens` or score smaller groups).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from judging.errors import JudgeCallError

MIN_MESSAGE_CHARS = 256

SYSTEM_TEMPLATE = """\
All of the trajectories below were given the same goal. Your job is to consider each of them \
and give each a score between 0 and 1. Take into consideration your best judgement of the \
agent's goal. Scores are relative: compare the trajectories with each other.

Grading standards:
{rubric}

Answer with JSON only, one entry per trajectory, keyed by the trajectory ids as given:
{{"scores": {{"t1": {{"explanation": "<one or two sentences>", "score": 0.0}}, "t2": {{...}}}}}}"""


def scores_schema(labels: list[str]) -> dict[str, Any]:
    """The answer's JSON schema for one group: `{"scores": {"t1": {"explanation", "score"}, ...}}`.

    Keyed by the group's own labels, every one required and no other allowed, scores in
    [0, 1]: a server that enforces the schema (vLLM's structured outputs, OpenAI's strict
    mode) cannot answer an unknown id, leave one out, repeat one, or score out of range.
    """
    verdict = {
        "type": "object",
        "properties": {
            "explanation": {"type": "string"},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["explanation", "score"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "scores": {
                "type": "object",
                "properties": {label: verdict for label in labels},
                "required": list(labels),
                "additionalProperties": False,
            }
        },
        "required": ["scores"],
        "additionalProperties": False,
    }


@dataclass
class JudgePrompt:
    """What is sent to the judge for one group, and how to read the answer back."""

    messages: list[dict[str, str]]
    labels: dict[str, str]  # label (t1..tN) -> trajectory_id
    seed: int
    truncated: bool = False
    omitted_messages: int = 0
    estimated_tokens: int = 0
    notes: list[str] = field(default_factory=list)


def _message_view(message: dict[str, Any]) -> dict[str, Any]:
    """The parts of a message the judge needs, without nulls (JSON keys cost tokens)."""
    view: dict[str, Any] = {"role": message.get("role")}
    if message.get("name"):
        view["name"] = message["name"]
    if message.get("content") is not None:
        view["content"] = message["content"]
    calls = message.get("tool_calls") or []
    if calls:
        view["tool_calls"] = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls]
    if message.get("is_error"):
        view["is_error"] = True
    return view


def common_prefix(histories: list[list[dict[str, Any]]]) -> int:
    """Number of leading messages identical in every history (the group's shared context)."""
    if not histories:
        return 0
    shortest = min(len(h) for h in histories)
    n = 0
    while n < shortest and all(_message_view(h[n]) == _message_view(histories[0][n]) for h in histories):
        n += 1
    # Keep at least one message per trajectory: a trajectory that is all prefix has nothing to judge.
    if n == shortest and n > 0 and any(len(h) == n for h in histories):
        n -= 1
    return n


def cut_middle(text: str, cap: int) -> str:
    """`text` when short enough, else its head and tail with a marker saying how much was cut."""
    if len(text) <= cap:
        return text
    keep = max(cap - 40, 2)
    head, tail = keep // 2, keep - keep // 2
    return f"{text[:head]}[... {len(text) - head - tail} chars truncated ...]{text[-tail:]}"


def _capped(messages: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        view = dict(m)
        if isinstance(view.get("content"), str):
            view["content"] = cut_middle(view["content"], cap)
        if view.get("tool_calls"):
            view["tool_calls"] = [
                {
                    **c,
                    "arguments": cut_middle(c["arguments"], cap)
                    if isinstance(c.get("arguments"), str)
                    else None,
                }
                for c in view["tool_calls"]
            ]
        out.append(view)
    return out


def _drop_inner(messages: list[dict[str, Any]], head: int, tail: int) -> tuple[list[dict[str, Any]], int]:
    if len(messages) <= head + tail + 1:
        return messages, 0
    dropped = len(messages) - head - tail
    marker = {"role": "note", "content": f"[{dropped} messages omitted]"}
    return [*messages[:head], marker, *messages[len(messages) - tail :]], dropped


def render_user(context: list[dict[str, Any]], blocks: list[tuple[str, list[dict[str, Any]]]]) -> str:
    """The user message: shared context once, then one block per labelled trajectory."""
    parts = []
    if context:
        parts.append("Here is the conversation context shared by all trajectories:")
        parts.append(f"<context>\n{json.dumps(context, ensure_ascii=False)}\n</context>")
    parts.append("Trajectories (each continues from the context above):")
    for label, messages in blocks:
        parts.append(f'<trajectory id="{label}">\n{json.dumps(messages, ensure_ascii=False)}\n</trajectory>')
    return "\n\n".join(parts)


def shuffle_order(n: int, seed: int) -> list[int]:
    """The presentation order of `n` trajectories for a given seed (deterministic)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order


def build_prompt(
    trajectories: list[dict[str, Any]],
    rubric: str,
    seed: int,
    *,
    max_context_tokens: int,
    chars_per_token: float,
    max_message_chars: int,
    max_output_tokens: int | None = None,
) -> JudgePrompt:
    """Build the judge's messages for one group (see the module docstring for the rules).

    >>> ts = [{"trajectory_id": f"a{i}", "messages": [{"role": "user", "content": "hi"},
    ...        {"role": "assistant", "content": f"answer {i}"}]} for i in range(2)]
    >>> p = build_prompt(ts, "be fair", seed=1, max_context_tokens=10_000, chars_per_token=4, max_message_chars=500)
    >>> sorted(p.labels.values()), p.messages[1]["content"].count('"hi"')
    (['a0', 'a1'], 1)
    """
    order = shuffle_order(len(trajectories), seed)
    shuffled = [trajectories[i] for i in order]
    histories = [[_message_view(m) for m in (t.get("messages") or [])] for t in shuffled]
    n_prefix = common_prefix(histories)
    context = histories[0][:n_prefix] if histories else []
    remainders = [h[n_prefix:] for h in histories]
    labels = {f"t{i + 1}": str(t["trajectory_id"]) for i, t in enumerate(shuffled)}
    system = SYSTEM_TEMPLATE.format(rubric=rubric.strip())

    reserve = max_output_tokens or (200 * len(trajectories) + 200)
    budget_chars = int((max_context_tokens - reserve) * chars_per_token) - len(system)

    def render(ctx: list[dict[str, Any]], rems: list[list[dict[str, Any]]]) -> str:
        return render_user(ctx, list(zip(labels, rems, strict=True)))

    prompt = JudgePrompt(messages=[], labels=labels, seed=seed)
    cap = max_message_chars
    ctx, rems = _capped(context, cap), [_capped(r, cap) for r in remainders]
    user = render(ctx, rems)
    prompt.truncated = user != render(context, remainders)
    while len(user) > budget_chars and cap > MIN_MESSAGE_CHARS:
        cap = max(cap // 2, MIN_MESSAGE_CHARS)
        ctx, rems = _capped(context, cap), [_capped(r, cap) for r in remainders]
        user = render(ctx, rems)
        prompt.truncated = True
    keep = max((len(r) for r in rems), default=1)
    while len(user) > budget_chars and keep >= 1:
        omitted = 0
        ctx_cut, dropped = _drop_inner(ctx, 1, 2)
        omitted += dropped
        cut = []
        for r in rems:
            kept, dropped = _drop_inner(r, 1, keep)
            cut.append(kept)
            omitted += dropped
        user = render(ctx_cut, cut)
        prompt.truncated = True
        prompt.omitted_messages = omitted
        keep -= 1
    if len(user) > budget_chars:
        raise JudgeCallError(
            "context_overflow",
            f"the group's prompt needs about {int((len(user) + len(system)) / chars_per_token) + reserve} tokens "
            f"after truncation, over max_context_tokens={max_context_tokens}",
            retryable=False,
        )
    prompt.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    prompt.estimated_tokens = int((len(system) + len(user)) / chars_per_token)
    return prompt
