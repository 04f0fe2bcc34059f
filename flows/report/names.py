"""Human names for policies: what a report shows where the lake stores paths.

A replayed trajectory's `policy` is the sampler's `<base model>+<adapter>`, and both are
often local folders (`/tmp/demo/model+/tmp/demo/lake/_work/grpo-3/adapter`). The report
shows `model + grpo-3`, the full value on hover. A folder named like its role (`adapter`,
`final`) is named by the folder above it; names stay unique across one report (a clash
takes one more folder).
"""

from __future__ import annotations

from collections.abc import Iterable

ROLE_FOLDERS = frozenset({"adapter", "adapters", "final", "checkpoint", "checkpoints"})


def _is_path(text: str) -> bool:
    # a hub id (`org/name`) has one slash; a local folder starts with / . ~ or has several
    return text.startswith(("/", "./", "../", "~")) or text.count("/") > 1


def _short(path: str, depth: int) -> str:
    parts = [p for p in path.rstrip("/").split("/") if p]
    if depth == 1 and len(parts) > 1 and parts[-1].lower() in ROLE_FOLDERS:
        parts = parts[:-1]
    return "/".join(parts[-depth:]) if parts else path


def _split(policy: str) -> list[str]:
    if "+" not in policy:
        return [policy]
    base, _, adapter = policy.partition("+")
    return [base, adapter] if _is_path(base) or _is_path(adapter) else [policy]


def policy_label(policy: str | None, depth: int = 1) -> str:
    """`policy` with each local folder named by its last meaningful component(s)."""
    if not policy:
        return "(base)"
    parts = [(_short(p, depth) if _is_path(p) else p) for p in _split(policy)]
    return " + ".join(parts)


def policy_labels(policies: Iterable[str | None]) -> dict[str | None, str]:
    """A unique label for every policy (more folders where two would read alike)."""
    unique = list(dict.fromkeys(policies))
    labels: dict[str | None, str] = {}
    for depth in range(1, 8):
        labels = {p: policy_label(p, depth) for p in unique}
        if len(set(labels.values())) == len(labels):
            return labels
    return {p: p or "(base)" for p in unique}
