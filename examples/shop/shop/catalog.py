"""The shop's domain: a small catalog, the agent's two tools, and customers' questions.

Everything is deterministic. A customer asks about a product ("Is the red mug in stock?");
the agent looks it up with `find_product` (its SKU, or `no match` for what the shop does not
sell), asks `check_stock` how many are left, and answers with one of three short strings:
`in stock`, `sold out` or `not sold here`. Replay calls the same tools by import path
(`shop.catalog:find_product`, `shop.catalog:check_stock`).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass

SYSTEM_PROMPT = (
    "You are a shop assistant. Look the product up with find_product, then check_stock. "
    "Answer only: in stock, sold out, or not sold here."
)
ANSWERS = ("in stock", "sold out", "not sold here")

COLORS = ("red", "blue", "green", "black", "white")
ITEMS = ("mug", "kettle", "lamp", "scarf", "backpack", "umbrella")

TOOL_DEFINITIONS: list[dict] = [
    {
        "type": "function",
        "function": {
            "name": "find_product",
            "description": "Find a product by name; returns its SKU, or no match.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "check_stock",
            "description": "How many of a SKU are left.",
            "parameters": {
                "type": "object",
                "properties": {"sku": {"type": "string"}},
                "required": ["sku"],
            },
        },
    },
]


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def _catalog() -> dict[str, tuple[str, int]]:
    """`"red mug"` -> (SKU, units left) for what the shop sells: 4 of every 5 products, about
    half of them sold out; SKUs are arbitrary, so only `find_product` knows them."""
    sold: dict[str, tuple[str, int]] = {}
    for color in COLORS:
        for item in ITEMS:
            h = _digest(f"{color} {item}")
            if h % 5 == 0:
                continue  # not sold here
            sku = f"{item[0].upper()}{100 + h % 900}"
            sold[f"{color} {item}"] = (sku, 0 if (h >> 8) % 2 else 1 + (h >> 16) % 9)
    return sold


CATALOG = _catalog()
STOCK = {sku: left for sku, left in CATALOG.values()}


def find_product(query: str) -> str:
    """The SKU of the product `query` names (a color and an item), or `no match`.

    >>> find_product("Red Mug") == f"SKU {CATALOG['red mug'][0]}"
    True
    """
    words = re.findall(r"[a-z]+", str(query).lower())
    color = next((w for w in words if w in COLORS), None)
    item = next((w for w in words if w in ITEMS), None)
    if color is None or item is None or f"{color} {item}" not in CATALOG:
        return "no match"
    return f"SKU {CATALOG[f'{color} {item}'][0]}"


def check_stock(sku: str) -> str:
    """How many units of `sku` are left: `3 left`, `0 left`, or `unknown SKU` (an error)."""
    key = str(sku).strip().upper().removeprefix("SKU ").strip()
    if key not in STOCK:
        raise ValueError(f"unknown SKU `{sku}`")
    return f"{STOCK[key]} left"


TOOLS = {"find_product": find_product, "check_stock": check_stock}

WORDINGS = (
    "Is the {product} in stock?",
    "Do you have the {product}?",
    "Can I buy a {product} today?",
    "Any {product} left?",
)


@dataclass(frozen=True)
class Question:
    product: str  # "red mug"
    wording: str

    @property
    def text(self) -> str:
        return self.wording.format(product=self.product)

    @property
    def answer(self) -> str:
        """The right answer, from the catalog (what the tools would say)."""
        if self.product not in CATALOG:
            return "not sold here"
        return "in stock" if CATALOG[self.product][1] > 0 else "sold out"


def make_questions(n: int, seed: int = 0) -> list[Question]:
    """`n` customers' questions about random products (a seed gives the same ones).

    >>> [q.text for q in make_questions(2)]
    ['Is the black scarf in stock?', 'Any green backpack left?']
    """
    rng = random.Random(seed)
    return [Question(f"{rng.choice(COLORS)} {rng.choice(ITEMS)}", rng.choice(WORDINGS)) for _ in range(n)]


def parse_question(text: str) -> Question | None:
    """The question a user message asks, or None when it is not about a product."""
    for wording in WORDINGS:
        pattern = re.escape(wording).replace(re.escape("{product}"), r"(?P<product>[a-z]+ [a-z]+)")
        match = re.search(pattern, text or "")
        if match:
            return Question(match.group("product"), wording)
    return None


def normalize_answer(text: str | None) -> str:
    """An answer as the reward and the user compare it: lower case, no final period or quotes.

    >>> normalize_answer(" Sold out. ")
    'sold out'
    """
    return (text or "").strip().strip("\"'").rstrip(".!").strip().lower()
