"""The report's "what changed" section: the val scenarios a candidate answers differently.

The learning table says by how much a candidate's success moved on the val scenarios; this
section says where. It compares the candidate (the evaluation's last stage) with where its run
started learning (SFT, the adapter it continued, or the base model) scenario by scenario: each
scenario whose sampled success rate or greedy success differs, with the user's question, the
expected answer and each policy's commonest final answer. A net gain that fixes some readings
and breaks others shows as both lists, which one mean and one interval cannot.

`compare_scenarios` is a pure function over evaluation samples; `val_changes` reads them (one
bounded query) and `changes_section` renders them.
"""

from __future__ import annotations

import html
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from judging.errors import RewardInputError
from judging.trajectory import expected_answer
from store.vocabulary import equals

if TYPE_CHECKING:
    from flows.report.data import StageRow

# `flows.stages.evaluate`'s names: evaluation replays are run `eval`, GRPO rounds are stages `grpo-N`
EVALUATED = "t.replay_run = 'eval'"
ROUND_STAGE = re.compile(r"grpo-\d+")
SHOWN = 15  # scenarios listed per direction; the rest are counted


@dataclass(frozen=True)
class Outcome:
    """One policy's evaluation samples of one scenario."""

    successes: float  # the success reward summed over the sampled (T > 0) samples
    samples: int
    answer: str  # the commonest final answer of those samples
    answer_count: int
    greedy: float | None  # the greedy (T=0) sample's success, where measured

    @property
    def rate(self) -> float:
        return self.successes / self.samples if self.samples else 0.0


@dataclass(frozen=True)
class ScenarioChange:
    """A val scenario the two policies answer with different success."""

    scenario_id: str
    question: str
    expected: str
    before: Outcome
    after: Outcome

    @property
    def sampled_change(self) -> float:
        return self.after.rate - self.before.rate

    @property
    def greedy_change(self) -> float:
        if self.before.greedy is None or self.after.greedy is None:
            return 0.0
        return self.after.greedy - self.before.greedy

    @property
    def direction(self) -> int:
        """+1 fixed, -1 regressed: by the sampled rate, else (equal rates) by the greedy sample."""
        change = self.sampled_change or self.greedy_change
        return (change > 0) - (change < 0)


@dataclass(frozen=True)
class ValChanges:
    """The scenarios one candidate answers differently from where its run started."""

    before_stage: str
    before_policy: str
    after_stage: str
    after_policy: str
    scenarios: int  # val scenarios both policies were evaluated on
    changes: tuple[ScenarioChange, ...]  # most changed first

    @property
    def fixed(self) -> list[ScenarioChange]:
        return [c for c in self.changes if c.direction > 0]

    @property
    def regressed(self) -> list[ScenarioChange]:
        return [c for c in self.changes if c.direction < 0]


def compared_stages(learning: Sequence[StageRow]) -> tuple[StageRow, StageRow] | None:
    """(where the run started learning, the candidate) among an evaluation's val stages: the
    candidate is the last; the start is the last stage before it that is not a GRPO round (SFT,
    the adapter a run continued, the base model), else the stage just before it."""
    val = [row for row in learning if row.kind == "val"]
    if len(val) < 2:
        return None
    starts = [row for row in val[:-1] if not ROUND_STAGE.fullmatch(row.stage)]
    return (starts[-1] if starts else val[-2]), val[-1]


def compare_scenarios(
    samples: Iterable[Mapping[str, Any]], before: str, after: str
) -> tuple[int, list[ScenarioChange]]:
    """How many scenarios both policies were evaluated on, and those whose success differs, most
    changed first.

    `samples`: one mapping per evaluation sample with `policy`, `scenario_id`, `question`,
    `expected`, `temperature` (0: the greedy sample), `value` (the success reward) and `answer`.

    >>> rows = [dict(policy=p, scenario_id="s", question="q", expected="4", temperature=1.0, value=v,
    ...              answer=a) for p, v, a in (("a", 0.0, "5"), ("a", 0.0, "5"), ("b", 1.0, "4"), ("b", 0.0, "3"))]
    >>> n, (change,) = compare_scenarios(rows, "a", "b")
    >>> n, change.sampled_change, change.before.answer, change.after.rate
    (1, 0.5, '5', 0.5)
    """
    per: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    about: dict[str, tuple[str, str]] = {}
    for row in samples:
        if row["policy"] in (before, after):
            per[(row["scenario_id"], row["policy"])].append(row)
            about[row["scenario_id"]] = (row["question"], row["expected"])
    both = sorted(s for s in about if (s, before) in per and (s, after) in per)
    changes = []
    for scenario in both:
        first, second = _outcome(per[(scenario, before)]), _outcome(per[(scenario, after)])
        change = ScenarioChange(scenario, *about[scenario], first, second)
        if change.direction:
            changes.append(change)
    changes.sort(key=lambda c: (-abs(c.sampled_change), -abs(c.greedy_change), c.scenario_id))
    return len(both), changes


def _outcome(rows: list[Mapping[str, Any]]) -> Outcome:
    sampled = [r for r in rows if r["temperature"] > 0]
    greedy = [float(r["value"]) for r in rows if r["temperature"] == 0]
    answers = Counter(str(r["answer"]) for r in sampled)
    # the commonest answer; ties go to the one first in text order, so the page is reproducible
    answer, count = min(answers.items(), key=lambda kv: (-kv[1], kv[0])) if answers else ("", 0)
    return Outcome(
        sum(float(r["value"]) for r in sampled),
        len(sampled),
        answer,
        count,
        sum(greedy) / len(greedy) if greedy else None,
    )


def val_changes(con: Any, learning: Sequence[StageRow], reward: str) -> ValChanges | None:
    """The changes between the evaluation's start and candidate (`compared_stages`), read from
    their evaluation samples on the val scenarios scored with `reward` (its newest value,
    `latest_rewards`; a policy evaluated again reuses its groups, so each sample is read once;
    samples without a sampling record, from before `trajlake migrate`, are left out); None when
    the evaluation has fewer than two val stages."""
    pair = compared_stages(learning)
    if pair is None or not reward:
        return None
    before, after = pair
    found = con.execute(
        f"""
        SELECT t.policy, t.scenario_id,
               coalesce(list_filter(s.messages, lambda m: m.role = 'user')[-1].content, '') AS question,
               coalesce(s.expected, '') AS expected, t.sampling.temperature AS temperature,
               r.value, coalesce(t.final_output, '') AS answer
        FROM trajectories t
        JOIN latest_rewards r USING (trajectory_id)
        JOIN scenarios s USING (scenario_id)
        WHERE {EVALUATED} AND {equals("t.scenario_split", "val", table="trajectories")}
              AND r.name = $reward AND r.value IS NOT NULL AND t.policy IN ($before, $after)
              AND t.sampling.temperature IS NOT NULL
        """,
        {"reward": reward, "before": before.policy, "after": after.policy},
    ).fetchall()
    columns = [d[0] for d in con.description]
    scenarios, changes = compare_scenarios(
        (dict(zip(columns, row, strict=True)) for row in found), before.policy, after.policy
    )
    return ValChanges(before.stage, before.policy, after.stage, after.policy, scenarios, tuple(changes))


def shown_expected(raw: str) -> str:
    """A scenario's `expected` as a person reads it: its answer where the JSON holds one, else as stored.

    >>> shown_expected('{"final_output": "27"}'), shown_expected('["4", "four"]'), shown_expected("")
    ('27', '4 | four', '')
    """
    try:
        answer = expected_answer({"expected": raw})
    except RewardInputError:
        return raw
    return " | ".join(map(str, answer)) if isinstance(answer, list) else str(answer)


def _cut(text: str, width: int = 120) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _outcome_cell(outcome: Outcome) -> str:
    greedy = "" if outcome.greedy is None else f"; greedy {outcome.greedy:g}"
    answer = f"“{_cut(outcome.answer, 40)}” ×{outcome.answer_count}" if outcome.answer_count else ""
    return f"{outcome.successes:g}/{outcome.samples}{greedy}<br>{html.escape(answer)}"


def changes_section(changes: ValChanges | None) -> list[str]:
    """Heading, a sentence with the counts, and the fixed and regressed scenarios."""
    if changes is None:
        return []
    head = [
        "<h2 id='changes'>What changed on the val scenarios</h2>",
        f"<p>{html.escape(changes.after_stage)} (<code>{html.escape(changes.after_policy)}</code>) against "
        f"{html.escape(changes.before_stage)} (<code>{html.escape(changes.before_policy)}</code>), scenario "
        f"by scenario on the {changes.scenarios} val scenarios both were evaluated on: "
        f"<strong>{len(changes.fixed)} answered better, {len(changes.regressed)} worse</strong> "
        "(by the sampled success rate, else by the greedy sample). Each cell: successes of the "
        "samples, the greedy sample's success, and the commonest final answer.</p>",
    ]
    for title, listed in (("Answered better", changes.fixed), ("Answered worse", changes.regressed)):
        if not listed:
            continue
        rows = "".join(
            "<tr>"
            f"<td>{html.escape(_cut(c.question))}</td><td>{html.escape(_cut(shown_expected(c.expected), 60))}</td>"
            f"<td>{_outcome_cell(c.before)}</td><td>{_outcome_cell(c.after)}</td>"
            f"<td>{c.sampled_change:+.2f}</td>"
            "</tr>"
            for c in listed[:SHOWN]
        )
        more = f"<p><em>{len(listed) - SHOWN} more not shown.</em></p>" if len(listed) > SHOWN else ""
        head += [
            f"<h3>{title} ({len(listed)})</h3>",
            "<table><thead><tr><th>question</th><th>expected</th>"
            f"<th>{html.escape(changes.before_stage)}</th><th>{html.escape(changes.after_stage)}</th>"
            f"<th>sampled change</th></tr></thead><tbody>{rows}</tbody></table>",
            more,
        ]
    return head
