"""The demo's domain: arithmetic questions answered with a calculator tool.

Pure and deterministic: questions come from a seeded generator, the tool is a plain
function (replay calls it as `flows.demo.task:calculator`), and the expected answer is
the number the tool gives. Two tasks (`TASKS`):

- `simple` (the tiny model's demo): "What is A op B?", phrased as the tiny model's tokenizer
  corpus (`training/tiny.py`) is, so questions and tool calls tokenize compactly;
- `mixed` (a real model's demo): simple questions with larger operands, two-operation
  questions ("What is 7 + 12 * 3?") and word problems the model must turn into an expression
  ("Ann buys 4 bags with 6 apples in each. ..."). Each word problem has a plausible misreading
  (`Question.misread`), which the scripted production LLM writes on a share of them: its
  traces on the hard questions are wrong more often, so imitating the well-rated ones does not
  finish the task and GRPO's own trials have something to add.
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from dataclasses import dataclass

from judging import needs_expected
from training.tiny import TOOLS as TINY_MODEL_TOOLS

SYSTEM_PROMPT = "You are a careful math assistant. Use the calculator tool when needed."

# The tiny model's tokenizer corpus declares this very tool, so its JSON tokenizes compactly.
TOOL_DEFINITIONS: list[dict] = [tool for tool in TINY_MODEL_TOOLS if tool["function"]["name"] == "calculator"]

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
QUESTION = re.compile(r"What is (\d+(?: [-+*] \d+)+)\?")
TASKS = ("simple", "mixed")

# Word problems: (wording, the expression it means, a plausible misreading of it).
WORD_PROBLEMS: tuple[tuple[str, str, str], ...] = (
    (
        "{name} has {a} apples and buys {b} more. How many apples does {name} have now?",
        "{a} + {b}",
        "{a} * {b}",
    ),
    ("{name} has {a} apples and gives away {b}. How many apples are left?", "{a} - {b}", "{a} + {b}"),
    ("{name} buys {a} bags with {b} apples in each. How many apples is that?", "{a} * {b}", "{a} + {b}"),
    (
        "{name} has {a} coins, finds {b} more and spends {c}. How many coins are left?",
        "{a} + {b} - {c}",
        "{a} + {b} + {c}",
    ),
    (
        "A hall has {a} rows of {b} chairs and {c} extra chairs. How many chairs are there?",
        "{a} * {b} + {c}",
        "{a} * ({b} + {c})",
    ),
    (
        "{name} buys {a} packs of {b} cards and gives away {c} cards. How many cards are left?",
        "{a} * {b} - {c}",
        "{a} * ({b} - {c})",
    ),
)
NAMES = ("Ann", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana")


def _word_pattern(wording: str) -> re.Pattern[str]:
    """A regex reading the numbers (and the name) back out of a word problem's text."""
    seen: set[str] = set()

    def field(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in seen:
            return f"(?P={key})"
        seen.add(key)
        return f"(?P<{key}>[A-Z][a-z]+)" if key == "name" else f"(?P<{key}>\\d+)"

    return re.compile(re.sub(r"\\\{(\w+)\\\}", field, re.escape(wording)))


_WORD_PATTERNS = [(_word_pattern(wording), right, wrong) for wording, right, wrong in WORD_PROBLEMS]


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
    wording: str | None = None  # a word problem's text (None: "What is <expression>?")
    misread: str | None = None  # the expression a careless reader makes of the wording

    @property
    def text(self) -> str:
        return self.wording or f"What is {self.expression}?"

    @property
    def answer(self) -> str:
        return calculator(self.expression)


def make_questions(n: int, seed: int = 0, task: str = "simple") -> list[Question]:
    """`n` questions of `task`: `simple` has small operands, so the tiny model can learn it;
    `mixed` is a third simple, a third two-operation, a third word problems.

    >>> [q.text for q in make_questions(2)]
    ['What is 12 - 0?', 'What is 8 * 7?']
    """
    if task not in TASKS:
        raise ValueError(f"unknown demo task `{task}`; known: {', '.join(TASKS)}")
    rng = random.Random(seed)
    if task == "simple":
        return [Question(f"{rng.randint(0, 20)} {rng.choice('+-*')} {rng.randint(0, 9)}") for _ in range(n)]
    return [_mixed_question(rng, i % 3) for i in range(n)]


def _mixed_question(rng: random.Random, kind: int) -> Question:
    if kind == 0:
        return Question(f"{rng.randint(0, 60)} {rng.choice('+-*')} {rng.randint(0, 20)}")
    if kind == 1:
        a, b, c = rng.randint(1, 30), rng.randint(1, 12), rng.randint(1, 12)
        return Question(f"{a} {rng.choice('+-*')} {b} {rng.choice('+-*')} {c}")
    wording, right, wrong = rng.choice(WORD_PROBLEMS)
    name, a, b = rng.choice(NAMES), rng.randint(2, 12), rng.randint(2, 12)
    c = rng.randint(1, a * b // 2 if "*" in right else a + b - 1)
    values = {"name": name, "a": a, "b": b, "c": c}
    return Question(right.format(**values), wording.format(**values), wrong.format(**values))


def parse_question(text: str) -> Question | None:
    """The question in a user message, or None when it is not one of ours.

    >>> parse_question("Ann has 5 apples and gives away 2. How many apples are left?").expression
    '5 - 2'
    """
    match = QUESTION.search(text or "")
    if match:
        return Question(match.group(1))
    for pattern, right, wrong in _WORD_PATTERNS:
        match = pattern.search(text or "")
        if match:
            values = match.groupdict()
            return Question(right.format(**values), match.group(0), wrong.format(**values))
    return None


@needs_expected  # it compares with the scenario's expected number: production traces have none
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
