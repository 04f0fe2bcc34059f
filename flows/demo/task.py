"""The demo's domain: arithmetic questions answered with a calculator tool.

Pure and deterministic: questions come from a seeded generator, the tool is a plain
function (replay calls it as `flows.demo.task:calculator`), and the expected answer is
the number the tool gives. The phrasing matches the tiny model's tokenizer corpus
(`training/tiny.py`), so questions and tool calls tokenize compactly.
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from dataclasses import dataclass

from training.tiny import TOOLS as TINY_MODEL_TOOLS

SYSTEM_PROMPT = "You are a careful math assistant. Use the calculator tool when needed."

# The tiny model's tokenizer corpus declares this very tool, so its JSON tokenizes compactly.
TOOL_DEFINITIONS: list[dict] = [tool for tool in TINY_MODEL_TOOLS if tool["function"]["name"] == "calculator"]

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
QUESTION = re.compile(r"What is (\d+ [-+*] \d+)\?")


def _evaluate(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError(f"unsupported expression element `{ast.dump(node)[:40]}`")


def calculator(expression: str) -> str:
    """Integer arithmetic with + - * and parentheses (the demo's tool; never `eval`)."""
    try:
        tree = ast.parse(str(expression), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: `{expression}`") from None
    return str(_evaluate(tree.body))


TOOLS = {"calculator": calculator}


@dataclass(frozen=True)
class Question:
    expression: str

    @property
    def text(self) -> str:
        return f"What is {self.expression}?"

    @property
    def answer(self) -> str:
        return calculator(self.expression)


def make_questions(n: int, seed: int = 0) -> list[Question]:
    """`n` questions with small operands, so the tiny model can learn the task."""
    rng = random.Random(seed)
    return [Question(f"{rng.randint(0, 20)} {rng.choice('+-*')} {rng.randint(0, 9)}") for _ in range(n)]


def parse_question(text: str) -> Question | None:
    """The question in a user message, or None when it is not one of ours."""
    match = QUESTION.search(text or "")
    return Question(match.group(1)) if match else None


def calculator_reward(trajectory: dict, scenario: dict | None) -> float:
    """The demo's training reward, graded so GRPO sees a signal before answers are right.

    1.0 when the final answer is the expected number; 0.5 when the calculator was called
    with an expression whose value is the expected number (the answer was then mangled);
    0.2 for a well-formed calculator call with another expression; 0.0 otherwise.

    >>> good = {"messages": [{"role": "assistant", "content": "7"}]}
    >>> calculator_reward(good, {"expected": '"7"'})
    1.0
    """
    from judging.trajectory import expected_answer, final_answer

    expected = str(expected_answer(scenario)).strip()
    if (final_answer(trajectory) or "").strip() == expected:
        return 1.0
    best = 0.0
    for message in trajectory.get("messages") or []:
        for call in message.get("tool_calls") or []:
            if call.get("name") != "calculator":
                continue
            try:
                value = calculator(json.loads(call.get("arguments") or "")["expression"])
            except (ValueError, KeyError, TypeError):
                continue
            best = max(best, 0.5 if value == expected else 0.2)
    return best


calculator_reward.reward_version = "1"  # type: ignore[attr-defined]
