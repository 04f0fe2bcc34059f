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
import hashlib
import json
import operator
import random
import re
from dataclasses import dataclass

from judging.rewards.base import needs_expected
from judging.trajectory import expected_answer, final_answer
from training.tiny import TOOLS as TINY_MODEL_TOOLS

SYSTEM_PROMPT = "You are a careful math assistant. Use the calculator tool when needed."
# The mixed task's production agent has served under more than one system prompt (teams edit
# theirs): each conversation keeps the one it ran with, so a policy learns the task, not a prompt.
SYSTEM_PROMPTS = (
    SYSTEM_PROMPT,
    "You help people with arithmetic. Work every result out with the calculator tool, then reply with the number.",
    "You are the assistant of a bookkeeping app. Check every calculation with the calculator tool.",
)

# The tiny model's tokenizer corpus declares this very tool, so its JSON tokenizes compactly.
TOOL_DEFINITIONS: list[dict] = [tool for tool in TINY_MODEL_TOOLS if tool["function"]["name"] == "calculator"]

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
QUESTION = re.compile(r"What is (\d+(?: [-+*] \d+)+)\?")
TASKS = ("simple", "mixed")

# How users phrase an arithmetic question: (wording, the expression it means, a plausible
# misreading of it or None). `{op}`/`{op2}` stand for a written operator (+, - or *). Users
# write to an assistant in many ways; a policy that learned one phrasing answers only that one.
ONE_OPERATION: tuple[tuple[str, str, str | None], ...] = (
    ("What is {a} {op} {b}?", "{a} {op} {b}", None),
    ("Calculate {a} {op} {b}.", "{a} {op} {b}", None),
    ("Please work out {a} {op} {b} for me.", "{a} {op} {b}", None),
    ("Can you tell me what {a} {op} {b} equals?", "{a} {op} {b}", None),
    ("{a} {op} {b} = ?", "{a} {op} {b}", None),
    ("How much is {a} plus {b}?", "{a} + {b}", None),
    ("What is the sum of {a} and {b}?", "{a} + {b}", "{a} * {b}"),
    ("Add {b} to {a}.", "{a} + {b}", None),
    ("How much is {a} minus {b}?", "{a} - {b}", None),
    ("Subtract {b} from {a}.", "{a} - {b}", "{b} - {a}"),
    ("What do I get if I take {b} away from {a}?", "{a} - {b}", "{b} - {a}"),
    ("How much is {a} times {b}?", "{a} * {b}", None),
    ("What is the product of {a} and {b}?", "{a} * {b}", "{a} + {b}"),
    ("Multiply {a} by {b}.", "{a} * {b}", None),
)
TWO_OPERATIONS: tuple[tuple[str, str, str | None], ...] = (
    ("What is {a} {op} {b} {op2} {c}?", "{a} {op} {b} {op2} {c}", None),
    ("Calculate {a} {op} {b} {op2} {c}.", "{a} {op} {b} {op2} {c}", None),
    ("Could you compute {a} {op} {b} {op2} {c}?", "{a} {op} {b} {op2} {c}", None),
    ("What is {a} times {b}, plus {c}?", "{a} * {b} + {c}", "{a} * ({b} + {c})"),
    ("Take {a}, add {b}, then subtract {c}. What do you get?", "{a} + {b} - {c}", "{a} + {b} + {c}"),
)
# Word problems the model must turn into an expression.
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
    ("A box holds {a} pens. How many pens are in {b} boxes?", "{a} * {b}", "{a} + {b}"),
    (
        "{name} reads {a} pages on Monday and {b} pages on Tuesday. How many pages is that in total?",
        "{a} + {b}",
        "{a} * {b}",
    ),
    (
        "A bus has {a} people on it. At the stop, {b} get off. How many are still on the bus?",
        "{a} - {b}",
        "{a} + {b}",
    ),
)
NAMES = ("Ann", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana")


def _template_pattern(wording: str) -> re.Pattern[str]:
    """A regex reading the numbers, operators and name back out of a phrasing's text."""
    seen: set[str] = set()

    def field(match: re.Match[str]) -> str:
        key = match.group(1)
        if key in seen:
            return f"(?P={key})"
        seen.add(key)
        if key == "name":
            return f"(?P<{key}>[A-Z][a-z]+)"
        if key.startswith("op"):
            return f"(?P<{key}>[-+*])"
        return f"(?P<{key}>\\d+)"

    return re.compile(re.sub(r"\\\{(\w+)\\\}", field, re.escape(wording)))


_PATTERNS = [
    (_template_pattern(wording), right, wrong)
    for wording, right, wrong in (*ONE_OPERATION, *TWO_OPERATIONS, *WORD_PROBLEMS)
]


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
    wording: str | None = None  # the user's text (None: "What is <expression>?")
    misread: str | None = None  # the expression a careless reader makes of the wording

    @property
    def text(self) -> str:
        return self.wording or f"What is {self.expression}?"

    @property
    def answer(self) -> str:
        return calculator(self.expression)


def make_questions(n: int, seed: int = 0, task: str = "simple") -> list[Question]:
    """`n` questions of `task`: `simple` has small operands, so the tiny model can learn it;
    `mixed` is a third one-operation questions, a third two-operation questions, each phrased
    in one of many ways, and a third word problems.

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
    values: dict[str, object] = {"name": rng.choice(NAMES), "op": rng.choice("+-*"), "op2": rng.choice("+-*")}
    if kind == 0:
        wording, right, wrong = rng.choice(ONE_OPERATION)
        values.update(a=rng.randint(0, 99), b=rng.randint(0, 20))
    elif kind == 1:
        wording, right, wrong = rng.choice(TWO_OPERATIONS)
        values.update(a=rng.randint(1, 30), b=rng.randint(1, 12), c=rng.randint(1, 12))
    else:
        wording, right, wrong = rng.choice(WORD_PROBLEMS)
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        if right == "{a} - {b}":
            a, b = max(a, b), min(a, b)  # nobody gives away more apples than they have
        values.update(a=a, b=b, c=rng.randint(1, a * b // 2 if "*" in right else a + b - 1))
    return Question(
        right.format(**values), wording.format(**values), wrong.format(**values) if wrong else None
    )


def system_prompt(question: Question, task: str = "simple") -> str:
    """The system prompt the production agent ran `question` under: the simple task's one, or
    (mixed) one of `SYSTEM_PROMPTS`, chosen by a stable hash of the question.

    >>> system_prompt(Question("1 + 2")) == SYSTEM_PROMPT
    True
    """
    if task == "simple":
        return SYSTEM_PROMPT
    digest = hashlib.sha256(question.text.encode()).digest()
    return SYSTEM_PROMPTS[digest[0] % len(SYSTEM_PROMPTS)]


def parse_question(text: str) -> Question | None:
    """The question in a user message, or None when it is not one of ours.

    >>> parse_question("Ann has 5 apples and gives away 2. How many apples are left?").expression
    '5 - 2'
    >>> parse_question("Subtract 4 from 19.").misread
    '4 - 19'
    """
    text = (text or "").strip()
    for pattern, right, wrong in _PATTERNS:
        match = pattern.fullmatch(text)
        if match:
            values = match.groupdict()
            return Question(right.format(**values), text, wrong.format(**values) if wrong else None)
    match = QUESTION.search(text)  # the simple task's "What is A op B?" inside a longer message
    if match:
        return Question(match.group(1))
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
