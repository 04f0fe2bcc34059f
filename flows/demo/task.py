"""The demo's domain: arithmetic questions answered with calculator tools.

Pure and deterministic: questions come from a seeded generator, tools are plain
functions (also used by replay as `flows.demo.task:add` / `:multiply`), and the
expected answer is the number the tools give.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

SYSTEM_PROMPT = "You are a calculator agent. Call a tool, then reply with the number only."

TOOL_DEFINITIONS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{verb} two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    for name, verb in (("add", "Add"), ("multiply", "Multiply"))
]

OPERATIONS = {"plus": "add", "times": "multiply"}
QUESTION = re.compile(r"What is (-?\d+) (plus|times) (-?\d+)\?")


def add(a: int, b: int) -> int:
    """Sum of two integers (a demo tool)."""
    return int(a) + int(b)


def multiply(a: int, b: int) -> int:
    """Product of two integers (a demo tool)."""
    return int(a) * int(b)


TOOLS = {"add": add, "multiply": multiply}


@dataclass(frozen=True)
class Question:
    text: str
    tool: str
    a: int
    b: int

    @property
    def answer(self) -> str:
        return str(TOOLS[self.tool](self.a, self.b))


def make_questions(n: int, seed: int = 0) -> list[Question]:
    """`n` distinct-enough questions with small operands (the tiny model can learn them)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        word = rng.choice(list(OPERATIONS))
        a, b = rng.randint(1, 9), rng.randint(1, 9)
        out.append(Question(f"What is {a} {word} {b}?", OPERATIONS[word], a, b))
    return out


def parse_question(text: str) -> Question | None:
    """The question in a user message, or None when it is not one of ours."""
    match = QUESTION.search(text or "")
    if match is None:
        return None
    a, word, b = match.groups()
    return Question(match.group(0), OPERATIONS[word], int(a), int(b))
