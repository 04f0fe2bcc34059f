"""The demo's domain: arithmetic questions answered with a calculator tool.

Pure and deterministic: questions come from a seeded generator, the tool is a plain
function (replay calls it as `flows.demo.task:calculator`), and the expected answer is
the number the tool gives. The phrasing matches the tiny model's tokenizer corpus
(`training/tiny.py`), so questions and tool calls tokenize compactly.
"""

from __future__ import annotations

import ast
import operator
import random
import re
from dataclasses import dataclass

SYSTEM_PROMPT = "You are a careful math assistant. Use the calculator tool when needed."

TOOL_DEFINITIONS: list[dict] = [
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
