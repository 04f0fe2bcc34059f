"""Benchmark: does a published adapter answer questions its training traffic never asked?

    python bench/generalisation.py --workdir demo [--adapter calculator-agent:production] [--per-kind 20]

The demo's production traffic (`flows.demo.task`) asks arithmetic in a fixed set of phrasings,
under three system prompts, with operands up to 99. This check asks what users of the same
agent would also ask and the demo never does: phrasings none of its templates use, operands of
four and five digits, word problems about other things, all under a system prompt the demo
never used. Each policy (the base model, then the adapter) is served by `trajlake
serve-sampler` (a real process, greedy: how most production serves) and driven by the openai
SDK through the calculator tool, as the demo's agent is. Success is the demo's metric: the
final answer is the expected number. Prints a table, then one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import openai
from rich.console import Console
from rich.table import Table

from flows.background import free_port
from flows.demo.task import SYSTEM_PROMPTS, TOOL_DEFINITIONS, calculator
from judging.evaluation_stats import bootstrap_ci

SYSTEM_PROMPT = "You are a friendly assistant with access to tools. Keep answers short."
assert SYSTEM_PROMPT not in SYSTEM_PROMPTS

# (wording, expression): none of these is a phrasing of `flows.demo.task`.
NEW_PHRASINGS = (
    ("Find {a} plus {b}.", "{a} + {b}"),
    ("What's {a} times {b}?", "{a} * {b}"),
    ("Quick one: {a} minus {b}?", "{a} - {b}"),
    ("I need to know {a} + {b}.", "{a} + {b}"),
    ("Evaluate {a} * {b}.", "{a} * {b}"),
    ("If you add {a} and {b}, what do you get?", "{a} + {b}"),
    ("Work out {a} - {b}, please.", "{a} - {b}"),
    ("Tell me {a} multiplied by {b}.", "{a} * {b}"),
)
NEW_WORD_PROBLEMS = (
    ("A farmer has {a} cows and buys {b} more. How many cows does the farmer have?", "{a} + {b}"),
    ("There are {a} crates with {b} eggs in each. How many eggs are there?", "{a} * {b}"),
    ("A shop had {a} shirts and sold {b}. How many shirts are left?", "{a} - {b}"),
    ("Each ticket costs {b} dollars. How much do {a} tickets cost?", "{a} * {b}"),
)

CONVERSATIONAL = (
    ("Hi there! My daughter asked me what {a} times {b} is and I forgot. Can you help?", "{a} * {b}"),
    ("Hey, quick sanity check before I send this invoice: {a} plus {b}?", "{a} + {b}"),
    ("We spent {a} dollars on food and {b} on drinks. What was the total?", "{a} + {b}"),
    ("Could you double-check {a} minus {b} for me? I keep getting different results.", "{a} - {b}"),
)
NUMBER_WORDS = (
    *(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
        ]
    ),
    *(["fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]),
)
SPELLED_OUT = (
    ("What is {a} plus {b}?", "+"),
    ("What is {a} times {b}?", "*"),
    ("What is {a} minus {b}?", "-"),
)


def questions(per_kind: int, seed: int) -> list[tuple[str, str, str]]:
    """(kind, question, expected answer): `per_kind` of each kind."""
    rng = random.Random(seed)
    asked = []
    for _ in range(per_kind):
        wording, expression = rng.choice(NEW_PHRASINGS)
        values = {"a": rng.randint(2, 99), "b": rng.randint(2, 20)}
        asked.append(("new phrasing", wording.format(**values), calculator(expression.format(**values))))
    for _ in range(per_kind):
        a, b = rng.randint(1000, 99999), rng.randint(100, 9999)
        expression = f"{a} {rng.choice('+-*')} {b}"
        asked.append(("large numbers", f"What is {expression}?", calculator(expression)))
    for _ in range(per_kind):
        wording, expression = rng.choice(NEW_WORD_PROBLEMS)
        a, b = rng.randint(5, 40), rng.randint(2, 12)
        values = {"a": max(a, b), "b": min(a, b)}
        asked.append(("new word problem", wording.format(**values), calculator(expression.format(**values))))
    for _ in range(per_kind):
        wording, expression = rng.choice(CONVERSATIONAL)
        values = {"a": rng.randint(12, 250), "b": rng.randint(2, 40)}
        asked.append(("conversational", wording.format(**values), calculator(expression.format(**values))))
    for _ in range(per_kind):
        wording, op = rng.choice(SPELLED_OUT)
        a, b = rng.randint(2, 20), rng.randint(2, 9)
        question = wording.format(a=NUMBER_WORDS[a], b=NUMBER_WORDS[b])
        asked.append(("numbers in words", question, calculator(f"{a} {op} {b}")))
    return asked


def ask(client: openai.OpenAI, model: str, question: str, max_steps: int = 3) -> str | None:
    """The agent's loop: the question under the unseen system prompt, the calculator run for every call."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    for _ in range(max_steps):
        response = client.chat.completions.create(
            model=model, messages=messages, tools=TOOL_DEFINITIONS, temperature=0.0, max_tokens=64
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                result = calculator(json.loads(call.function.arguments)["expression"])
            except (ValueError, KeyError, TypeError) as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


class ServedPolicy:
    """`trajlake serve-sampler` in its own process, greedy by default, until the block ends."""

    def __init__(self, model: str, lake: str, adapter: str | None) -> None:
        self.port = free_port("127.0.0.1")
        self.command = [
            *(sys.executable, "-m", "flows.cli", "serve-sampler"),
            *(
                "--model",
                model,
                "--lake",
                lake,
                "--port",
                str(self.port),
                "--temperature",
                "0",
                "--max-tokens",
                "64",
            ),
            *(("--adapter", adapter) if adapter else ()),
        ]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> str:
        """Starts the server; returns the model name to ask for."""
        # its log goes to a file: a pipe nobody reads while it serves would fill and stall it
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise SystemExit(f"serve-sampler exited: {self.log.read().decode()[-2000:]}")
            try:
                served = httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=2).json()["data"]
                return str(served[-1]["id"])  # the adapter's name when one is served, else the model's
            except httpx.HTTPError:
                time.sleep(1)
        raise SystemExit("serve-sampler did not start within 300 s")

    def __exit__(self, *_: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, required=True, help="a `trajlake demo --model ...` workdir")
    parser.add_argument(
        "--adapter", default=None, help="published version (default: `<publish.name>:production`)"
    )
    parser.add_argument("--per-kind", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = tomllib.loads((args.workdir / "trajlake.toml").read_text())
    model = config["sampler"]["model"]
    lake = str((args.workdir / config["lake"]["path"]).resolve())
    adapter = args.adapter or f"{config['publish']['name']}:production"
    asked = questions(args.per_kind, args.seed)
    kinds = sorted({kind for kind, _, _ in asked})
    scores: dict[str, list[float]] = {}
    for policy, served_adapter in (("base", None), (adapter, adapter)):
        server = ServedPolicy(model, lake, served_adapter)
        with server as served:
            client = openai.OpenAI(base_url=server.url, api_key="bench", max_retries=0, timeout=600)
            with ThreadPoolExecutor(max_workers=8) as users:  # users at once: the server batches their calls
                answers = list(
                    users.map(ask, [client] * len(asked), [served] * len(asked), [q for _, q, _ in asked])
                )
            scores[policy] = [
                float((got or "").strip() == want) for got, (_, _, want) in zip(answers, asked, strict=True)
            ]
    table = Table(title=f"Held-out questions, greedy, `{SYSTEM_PROMPT}` ({len(asked)} questions)")
    table.add_column("policy")
    for kind in [*kinds, "all"]:
        table.add_column(kind, justify="right")
    report: dict[str, Any] = {"questions": len(asked), "system_prompt": SYSTEM_PROMPT, "policies": {}}
    for policy, got in scores.items():
        by_kind = {kind: [g for g, (k, _, _) in zip(got, asked, strict=True) if k == kind] for kind in kinds}
        by_kind["all"] = got
        cells = []
        report["policies"][policy] = {}
        for kind, values in by_kind.items():
            mean = sum(values) / len(values)
            low, high = bootstrap_ci(values)
            report["policies"][policy][kind] = {
                "success": round(mean, 3),
                "ci": [round(low, 3), round(high, 3)],
            }
            cells.append(f"{mean:.2f} [{low:.2f}, {high:.2f}]")
        table.add_row(policy, *cells)
    Console().print(table)
    differences = [a - b for a, b in zip(scores[adapter], scores["base"], strict=True)]
    low, high = bootstrap_ci(differences)
    report["adapter_minus_base"] = {
        "mean": round(sum(differences) / len(differences), 3),
        "ci": [round(low, 3), round(high, 3)],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
