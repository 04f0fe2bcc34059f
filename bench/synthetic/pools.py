"""The text the synthetic data is made of: agents, their asks and tools, answers, models."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

# --- content pools ------------------------------------------------------------------------

_TOOLS: dict[str, dict[str, Any]] = {
    "search_docs": {
        "description": "Search the product documentation.",
        "parameters": {"query": "string", "limit": "integer"},
        "args": [
            '{"query": "reset password", "limit": 5}',
            '{"query": "billing cycle", "limit": 3}',
            '{"query": "api rate limits", "limit": 5}',
            '{"query": "export data csv", "limit": 10}',
        ],
        "ok": [
            '[{"title": "Resetting your password", "url": "/docs/auth/reset"}]',
            '[{"title": "Billing cycles", "url": "/docs/billing"}, {"title": "Invoices", "url": "/docs/invoices"}]',
            '[{"title": "Rate limits", "url": "/docs/api/limits", "snippet": "600 requests per minute"}]',
        ],
        "error": ["Error: search backend timed out after 10s", "Error: index `docs-v2` is unavailable"],
    },
    "lookup_order": {
        "description": "Fetch an order by its id.",
        "parameters": {"order_id": "string"},
        "args": ['{"order_id": "A-10023"}', '{"order_id": "B-55120"}', '{"order_id": "C-90871"}'],
        "ok": [
            '{"order_id": "A-10023", "status": "shipped", "eta": "2026-11-24"}',
            '{"order_id": "B-55120", "status": "processing", "items": 3}',
            '{"order_id": "C-90871", "status": "delivered", "signed_by": "J. Doe"}',
        ],
        "error": ["Error: order not found", "Error: 403 Forbidden: order belongs to another account"],
    },
    "refund_order": {
        "description": "Refund an order, fully or partly.",
        "parameters": {"order_id": "string", "amount": "number"},
        "args": ['{"order_id": "A-10023", "amount": 19.99}', '{"order_id": "B-55120", "amount": 120.0}'],
        "ok": [
            '{"refund_id": "R-7781", "status": "accepted"}',
            '{"refund_id": "R-7782", "status": "pending_review"}',
        ],
        "error": ["Error: refund window of 30 days has passed", "Error: amount exceeds order total"],
    },
    "get_weather": {
        "description": "Current weather for a city.",
        "parameters": {"city": "string", "units": "string"},
        "args": [
            '{"city": "Paris", "units": "metric"}',
            '{"city": "Tokyo", "units": "metric"}',
            '{"city": "Austin", "units": "imperial"}',
        ],
        "ok": [
            '{"temp": 11.5, "conditions": "light rain"}',
            '{"temp": 18.0, "conditions": "clear"}',
            '{"temp": 64, "conditions": "cloudy"}',
        ],
        "error": ["Error: unknown city", "Error: weather provider returned 503"],
    },
    "run_sql": {
        "description": "Run a read-only SQL query on the analytics warehouse.",
        "parameters": {"query": "string"},
        "args": [
            '{"query": "SELECT count(*) FROM orders WHERE created_at > now() - INTERVAL 7 DAY"}',
            '{"query": "SELECT region, sum(revenue) FROM sales GROUP BY region"}',
            '{"query": "SELECT * FROM users ORDER BY signup_at DESC LIMIT 5"}',
        ],
        "ok": [
            '[{"count": 1843}]',
            '[{"region": "EU", "sum": 120455.2}, {"region": "US", "sum": 98012.7}]',
            '[{"id": 991, "email": "a@example.com"}, {"id": 990, "email": "b@example.com"}]',
        ],
        "error": ["Error: Binder Error: column `revenue` not found", "Error: query exceeded 30s timeout"],
    },
    "read_file": {
        "description": "Read a file from the workspace.",
        "parameters": {"path": "string"},
        "args": ['{"path": "README.md"}', '{"path": "src/app/config.yaml"}', '{"path": "reports/q3.csv"}'],
        "ok": [
            "# Project\n\nA small service that ...",
            "port: 8080\nlog_level: info\n",
            "month,revenue\n7,10\n8,12\n",
        ],
        "error": ["Error: No such file or directory", "Error: permission denied"],
    },
    "calculator": {
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"expression": "string"},
        "args": ['{"expression": "1843 * 0.15"}', '{"expression": "(120455.2 - 98012.7) / 98012.7"}'],
        "ok": ["276.45", "0.2290"],
        "error": ["Error: division by zero", "Error: invalid syntax at position 4"],
    },
    "create_ticket": {
        "description": "Open a support ticket for a human agent.",
        "parameters": {"title": "string", "priority": "string"},
        "args": [
            '{"title": "Customer cannot log in", "priority": "high"}',
            '{"title": "Refund dispute", "priority": "normal"}',
        ],
        "ok": ['{"ticket_id": "T-4410", "queue": "tier2"}', '{"ticket_id": "T-4411", "queue": "billing"}'],
        "error": ["Error: ticketing system unavailable"],
    },
}

_AGENTS: dict[str, dict[str, Any]] = {
    "support-agent": {
        "system": "You are a friendly customer-support agent for Acme. Use the tools to look up orders "
        "and documentation before answering. Never promise refunds you have not issued.",
        "tools": ["lookup_order", "refund_order", "search_docs", "create_ticket"],
        "asks": [
            "Where is my order? It was supposed to arrive yesterday.",
            "I was charged twice this month, can you refund one of them?",
            "How do I reset my password? The link in the email expired.",
            "Can I export all my data as CSV?",
            "My package says delivered but I never got it.",
        ],
    },
    "analyst-agent": {
        "system": "You are a data analyst. Answer questions with SQL against the warehouse; show "
        "numbers with their units and say how you computed them.",
        "tools": ["run_sql", "calculator", "read_file", "search_docs"],
        "asks": [
            "How many orders did we get in the last 7 days?",
            "Which region had the most revenue, and by how much?",
            "Summarise the Q3 revenue report.",
            "Who are our five newest users?",
        ],
    },
    "assistant-agent": {
        "system": "You are a helpful general assistant with access to tools. Think step by step and "
        "call a tool whenever it can make the answer more accurate.",
        "tools": ["get_weather", "calculator", "search_docs", "read_file"],
        "asks": [
            "Should I take an umbrella in Paris today?",
            "What is 15% of 1843?",
            "What's in the README of this project?",
            "Compare the weather in Tokyo and Austin right now.",
        ],
    },
}

_PREAMBLES = [
    "Let me look that up.",
    "I'll check that for you.",
    "One moment, querying the system.",
    "Let me try a different approach.",
]
_FINALS = [
    "Your order A-10023 has shipped and should arrive by November 24.",
    "I've issued a refund of 19.99; it will show on your statement in 3-5 business days.",
    "We received 1843 orders in the last 7 days.",
    "EU had the highest revenue (120,455.20), about 22.9% more than the US.",
    "Yes, take an umbrella: it's 11.5°C with light rain in Paris.",
    "I couldn't complete that: the system returned an error. I've opened ticket T-4410 for a human agent.",
    "Here is a summary: revenue grew from 10 to 12 between July and August.",
    "You can reset your password from Settings > Security; the reset link is valid for 24 hours.",
]
_MODELS = ["gpt-4.1-mini", "gpt-4.1", "claude-sonnet-4.5", "qwen3-8b"]
_POLICIES = [
    ("qwen3-0.6b", "qwen3-0.6b"),
    ("qwen3-0.6b", "qwen3-0.6b+lora:support-v1"),
    ("qwen3-0.6b", "qwen3-0.6b+lora:support-v2"),
]
_METADATA = [
    '{"env": "prod", "region": "eu-west-1"}',
    '{"env": "prod", "region": "us-east-1"}',
    '{"env": "staging", "region": "eu-west-1"}',
    '{"env": "prod", "region": "ap-northeast-1", "beta": true}',
]

_TOOL_NAMES = list(_TOOLS)
_AGENT_NAMES = list(_AGENTS)
_AGENT_TOOL_IDX = np.array(
    [[_TOOL_NAMES.index(t) for t in a["tools"]] for a in _AGENTS.values()], dtype=np.int64
)
_TOOLS_JSON = [
    json.dumps(
        [
            {
                "type": "function",
                "function": {
                    "name": t,
                    "description": _TOOLS[t]["description"],
                    "parameters": {
                        "type": "object",
                        "properties": {p: {"type": ty} for p, ty in _TOOLS[t]["parameters"].items()},
                        "required": list(_TOOLS[t]["parameters"]),
                    },
                },
            }
            for t in a["tools"]
        ]
    )
    for a in _AGENTS.values()
]
_VARIANTS = 4  # max(len(args|ok|error)) is cycled to this many variants per tool


def _cycle(items: list[str]) -> list[str]:
    return [items[v % len(items)] for v in range(_VARIANTS)]


# One flat pool of every fixed text; messages index into it and `take` builds the column.
_POOL_PARTS: dict[str, list[str]] = {
    "system": [a["system"] for a in _AGENTS.values()],
    "preamble": _PREAMBLES,
    "final": _FINALS,
    "ok": [s for t in _TOOLS.values() for s in _cycle(t["ok"])],
    "error": [s for t in _TOOLS.values() for s in _cycle(t["error"])],
    "args": [s for t in _TOOLS.values() for s in _cycle(t["args"])],
    "tool_name": _TOOL_NAMES,
}
_POOL_BASE: dict[str, int] = {}
_pool_items: list[str] = []
for _part, _items in _POOL_PARTS.items():
    _POOL_BASE[_part] = len(_pool_items)
    _pool_items.extend(_items)
_POOL = pa.array(_pool_items, type=pa.string())
_ASKS = [ask for a in _AGENTS.values() for ask in a["asks"]]
_ASK_BASE = np.cumsum([0] + [len(a["asks"]) for a in _AGENTS.values()])[:-1]
_ASK_COUNT = np.array([len(a["asks"]) for a in _AGENTS.values()])

_ROLES = pa.array(["system", "user", "assistant", "tool"])
_SYSTEM, _USER, _ASSISTANT, _TOOL = 0, 1, 2, 3
