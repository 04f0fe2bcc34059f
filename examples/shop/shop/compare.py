"""The production LLM against the adapter, on the same new customers' questions.

Both batches were asked with the same `--seed`, so line i of each file is the same question:
the paired difference (adapter - production, per question) and the unpaired one (two
independent success rates) get 95% bootstrap intervals. Prints a Markdown table:

    python -m shop.compare production-new.jsonl adapter.jsonl
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def load(path: str) -> np.ndarray:
    with open(path) as lines:
        return np.array([float(json.loads(line)["correct"]) for line in lines if line.strip()])


def interval(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.quantile(samples, [0.025, 0.975])
    return float(low), float(high)


def compare(
    production: np.ndarray, adapter: np.ndarray, resamples: int = 10_000, seed: int = 0
) -> dict[str, float]:
    """Success of each, and the paired and unpaired difference with 95% bootstrap intervals."""
    if len(production) != len(adapter) or not len(production):
        raise ValueError(f"the two batches differ in size ({len(production)} vs {len(adapter)}) or are empty")
    rng = np.random.default_rng(seed)
    n = len(production)
    paired = rng.integers(0, n, (resamples, n))
    paired_diff = (adapter[paired] - production[paired]).mean(axis=1)
    unpaired_diff = adapter[rng.integers(0, n, (resamples, n))].mean(axis=1) - production[
        rng.integers(0, n, (resamples, n))
    ].mean(axis=1)
    p_low, p_high = interval(paired_diff)
    u_low, u_high = interval(unpaired_diff)
    return {
        "n": n,
        "production": float(production.mean()),
        "adapter": float(adapter.mean()),
        "difference": float(adapter.mean() - production.mean()),
        "paired_low": p_low,
        "paired_high": p_high,
        "unpaired_low": u_low,
        "unpaired_high": u_high,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("production", help="the production LLM's runs (JSONL of `shop.agent`)")
    parser.add_argument("adapter", help="the adapter's runs on the same questions")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    result = compare(load(args.production), load(args.adapter))
    if args.json:
        print(json.dumps(result))
        return
    print("| policy | runs | success |\n| --- | --- | --- |")
    print(f"| production LLM | {result['n']} | {result['production']:.3f} |")
    print(f"| published adapter | {result['n']} | {result['adapter']:.3f} |")
    print(
        f"\nadapter - production: {result['difference']:+.3f}, paired 95% CI "
        f"[{result['paired_low']:+.3f}, {result['paired_high']:+.3f}], unpaired "
        f"[{result['unpaired_low']:+.3f}, {result['unpaired_high']:+.3f}]"
    )


if __name__ == "__main__":
    main()
