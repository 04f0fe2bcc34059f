"""The format of `trajectories.policy`: what sampled a trajectory, `<base model>+<adapter>`, declared
once. How each part is named (a hub id, a folder name, a run id, a digest) is
`training.models.policies`'s; this module only joins and splits, for every writer and reader.
"""

from __future__ import annotations

from typing import NamedTuple

SEPARATOR = "+"  # between the base model's name and the adapter's


class PolicyName(NamedTuple):
    """A policy name's parts: the base model, and the adapter (None: the base model alone)."""

    base: str
    adapter: str | None


def join_policy(base: str, adapter: str | None) -> str:
    """The policy name of `base` sampling through `adapter` (None: the base model's own name).

    >>> join_policy("Qwen/Qwen2.5-0.5B-Instruct", "grpo-20261126T101500-1a2b3c4d")
    'Qwen/Qwen2.5-0.5B-Instruct+grpo-20261126T101500-1a2b3c4d'
    """
    return f"{base}{SEPARATOR}{adapter}" if adapter else base


def split_policy(policy: str) -> PolicyName:
    """The parts of a policy name (`join_policy` read back).

    >>> split_policy("tiny-qwen+my-lora@3f2a9c1e")
    PolicyName(base='tiny-qwen', adapter='my-lora@3f2a9c1e')
    >>> split_policy("tiny-qwen")
    PolicyName(base='tiny-qwen', adapter=None)
    """
    base, separator, adapter = policy.partition(SEPARATOR)
    return PolicyName(base, adapter if separator else None)
