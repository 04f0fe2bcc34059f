"""How much two scorers agree, where it matters for GRPO: the order they give within each group.

GRPO only uses rewards relative to the group's mean, so two rewards that rank every
group's trajectories the same way train the same policy even if their scales differ.
Per group, with trajectories scored by both:

- Spearman's rho of the two rankings (ties get average ranks); undefined when either
  reward is constant in the group (reported as `constant_a`/`constant_b`);
- pairwise agreement: among pairs that both rewards order strictly, the share they order
  the same way (a Kendall-style number that stays readable with ties).

Use it to check a RULER rubric against a programmatic check before trusting it:
`trajlake agreement ruler exact_match`.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from statistics import median

from judging.select import candidates_sql, run_checked, where_clause
from store.catalog.connection import connect
from store.lake import Lake
from store.vocabulary import equals

OK = equals("status", "ok", table="rewards")


@dataclass
class GroupAgreement:
    group_id: str
    size: int
    spearman: float | None
    concordant: int
    discordant: int


@dataclass
class AgreementReport:
    """Agreement of rewards `a` and `b` over the groups both scored."""

    a: str
    b: str
    groups: int = 0
    defined: int = 0  # groups where rho is defined (neither reward constant)
    constant_a: int = 0
    constant_b: int = 0
    mean_spearman: float | None = None
    median_spearman: float | None = None
    pairwise_agreement: float | None = None
    per_group: list[GroupAgreement] = field(default_factory=list)


def average_ranks(values: list[float]) -> list[float]:
    """Ranks 1..n, ties sharing their average rank.

    >>> average_ranks([0.1, 0.5, 0.5, 0.9])
    [1.0, 2.5, 2.5, 4.0]
    """
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Spearman's rho (Pearson correlation of average ranks); None when either side is constant.

    >>> spearman([1, 2, 3], [10, 20, 30]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    if len(a) < 2:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return round(cov / math.sqrt(va * vb), 12)


def pair_counts(a: list[float], b: list[float]) -> tuple[int, int]:
    """(concordant, discordant) pairs among those both sides order strictly."""
    concordant = discordant = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 or db == 0:
                continue
            if (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    return concordant, discordant


def _split(spec: str) -> tuple[str, str | None]:
    name, _, scorer = spec.partition("@")
    return name, scorer or None


def agreement(
    lake: Lake | str | os.PathLike[str], a: str, b: str, *, where: str | None = None
) -> AgreementReport:
    """Rank agreement within groups between rewards `a` and `b`.

    Each is a reward name (`ruler`), or `name@scorer` to pin one scorer when several
    wrote the same name; without a scorer the newest successful value is used.
    """
    lake = Lake.of(lake)
    con = connect(lake)
    (name_a, scorer_a), (name_b, scorer_b) = _split(a), _split(b)
    sql = f"""
        WITH candidates AS ({candidates_sql()}),
             picked AS (SELECT trajectory_id, group_id FROM candidates {where_clause(where)}),
             ra AS (SELECT trajectory_id, value FROM rewards
                    WHERE name = $na AND ($sa IS NULL OR scorer = $sa) AND {OK} AND value IS NOT NULL
                    QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY scored_at DESC, _written_at DESC) = 1),
             rb AS (SELECT trajectory_id, value FROM rewards
                    WHERE name = $nb AND ($sb IS NULL OR scorer = $sb) AND {OK} AND value IS NOT NULL
                    QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY scored_at DESC, _written_at DESC) = 1)
        SELECT p.group_id, ra.value, rb.value
        FROM picked p JOIN ra USING (trajectory_id) JOIN rb USING (trajectory_id)
        WHERE p.group_id IS NOT NULL
        ORDER BY p.group_id, p.trajectory_id
    """
    params = {"na": name_a, "sa": scorer_a, "nb": name_b, "sb": scorer_b}
    groups: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for gid, va, vb in run_checked(con, sql, params, user_sql=where or ""):
        groups[gid][0].append(va)
        groups[gid][1].append(vb)
    report = AgreementReport(a, b)
    rhos: list[float] = []
    concordant = discordant = 0
    for gid, (va, vb) in groups.items():
        if len(va) < 2:
            continue
        report.groups += 1
        rho = spearman(va, vb)
        c, d = pair_counts(va, vb)
        concordant, discordant = concordant + c, discordant + d
        report.constant_a += int(min(va) == max(va))
        report.constant_b += int(min(vb) == max(vb))
        if rho is not None:
            rhos.append(rho)
        report.per_group.append(GroupAgreement(gid, len(va), rho, c, d))
    report.defined = len(rhos)
    if rhos:
        report.mean_spearman = sum(rhos) / len(rhos)
        report.median_spearman = median(rhos)
    if concordant + discordant:
        report.pairwise_agreement = concordant / (concordant + discordant)
    return report
