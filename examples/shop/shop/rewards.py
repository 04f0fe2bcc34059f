"""The shop's reward: how good one answer to a customer is, graded so GRPO has a signal early.

Scored with `trajlake score -r shop.rewards:stock_reward` (rows named `stock`), and named in
`trajlake.toml` (`[score] rewards`). The signature every reward shares is
`(trajectory, scenario) -> float`; see the Rewards page of the docs.
"""

from __future__ import annotations

import json

from judging.rewards.base import needs_expected, reward_version
from judging.trajectory import expected_answer, final_answer, tool_calls
from shop.catalog import find_product, normalize_answer


def _looked_up(trajectory: dict, name: str) -> list[dict]:
    """The arguments of every `name` call the trajectory made that parse as a JSON object."""
    found = []
    for call in tool_calls(trajectory):
        if call.get("name") != name:
            continue
        try:
            arguments = json.loads(call.get("arguments") or "")
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict):
            found.append(arguments)
    return found


@needs_expected  # compares with the scenario's expected answer: production traces have none
@reward_version("1")
def stock_reward(trajectory: dict, scenario: dict | None) -> float:
    """1.0 for the expected answer; else 0.5 when the agent checked the stock of a SKU
    `find_product` gave it (or, for a product the shop does not sell, found no match) and then
    answered wrong; 0.2 for any well-formed `find_product` call; 0.0 otherwise.

    >>> right = {"messages": [{"role": "assistant", "content": "Sold out."}]}
    >>> stock_reward(right, {"expected": '"sold out"'})
    1.0
    """
    expected = normalize_answer(str(expected_answer(scenario)))
    if normalize_answer(final_answer(trajectory)) == expected:
        return 1.0
    queries = [str(a.get("query", "")) for a in _looked_up(trajectory, "find_product")]
    if not queries:
        return 0.0
    skus = {find_product(q).removeprefix("SKU ") for q in queries} - {"no match"}
    checked = {
        str(a.get("sku", "")).strip().upper().removeprefix("SKU ").strip()
        for a in _looked_up(trajectory, "check_stock")
    }
    if (expected == "not sold here" and not skus) or skus & checked:
        return 0.5
    return 0.2
