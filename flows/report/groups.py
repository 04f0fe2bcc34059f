"""The group viewer: a group's G trajectories side by side, with what each was scored and why.

What an RL practitioner reads most is the groups: which sample the reward or the judge
preferred, how far apart they were, where two rewards disagree, how a scenario's groups
changed over the rounds. `group_view` picks a bounded set of groups with SQL (the largest
reward spreads, some all-equal groups, groups where two rewards rank differently, and every
round's group of the scenarios shown), so a lake of a million trajectories reads a few
hundred; `render_groups` lays each out as cards with messages, tool calls and results, the
final answer, each reward with its scorer and explanation, the advantage the sample got
(`training.advantages`, group-scaled as GRPO's default), and the sampled tokens with their
logprobs, those sampled with p < 0.2 highlighted. Filters run in the page (buttons, or the URL:
`#groups/filter=equal`, `#groups/scenario=<id>`, `#groups/policy=<name>`, the name URL-encoded).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from flows.report.window import time_window
from store.selections import OUTSIDE_VAL_SCENARIOS
from store.vocabulary import equals
from training.advantages import compute_advantages

LOW_PROBABILITY = math.log(0.2)  # tokens sampled with p < 0.2 are highlighted
SCENARIOS_ACROSS_ROUNDS = 5


@dataclass
class Member:
    trajectory_id: str
    messages: list[dict[str, Any]]
    final_output: str | None
    rewards: list[dict[str, Any]]  # name, scorer, value, explanation
    advantage: float | None
    tokens: list[tuple[str, float]]  # (token, logprob) of every sampled token, all turns
    status: str | None


@dataclass
class Group:
    group_id: str
    scenario_id: str | None
    policy: str  # its name (`training.models.policies`), as stored
    spread: float
    equal: bool
    disagree: bool
    members: list[Member] = field(default_factory=list)


@dataclass
class GroupView:
    reward: str
    total: int  # groups in the selection window
    groups: list[Group] = field(default_factory=list)


def group_view(
    con: Any,
    reward: str,
    *,
    cap: int = 60,
    since: str | None = None,
    until: str | None = None,
    tokenizer: Any = None,
) -> GroupView:
    """At most `cap` groups of replayed trajectories scored with `reward`, chosen in SQL."""
    window, params = time_window(since, until)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE viewer_stats AS
        WITH v AS (
            SELECT t.group_id, t.scenario_id, t.policy, t.started_at, r.trajectory_id, r.name, r.value
            FROM trajectories t JOIN latest_rewards r USING (trajectory_id)
            WHERE {equals("t.source", "replay", table="trajectories")} AND t.group_id IS NOT NULL {window} AND {OUTSIDE_VAL_SCENARIOS}
        ),
        tops AS (
            SELECT group_id, name, arg_max(trajectory_id, value) AS top, max(value) AS best, min(value) AS low
            FROM v GROUP BY ALL
        ),
        disagree AS (  -- the best sample under one reward is not the best under another
            SELECT DISTINCT a.group_id FROM tops a
            JOIN tops b ON a.group_id = b.group_id AND a.name <> b.name AND b.best > b.low
            JOIN v ON v.group_id = a.group_id AND v.name = b.name AND v.trajectory_id = a.top
            WHERE v.value < b.best
        )
        SELECT v.group_id, any_value(v.scenario_id) AS scenario_id, any_value(v.policy) AS policy,
               min(v.started_at) AS first_seen, max(v.value) - min(v.value) AS spread,
               v.group_id IN (SELECT group_id FROM disagree) AS disagree
        FROM v WHERE v.name = ? GROUP BY v.group_id
        """,
        [*params, reward],
    )
    total = con.execute("SELECT count(*) FROM viewer_stats").fetchone()[0]
    chosen = con.execute(
        f"""
        WITH spread AS (SELECT * FROM viewer_stats WHERE spread > 0 ORDER BY spread DESC, group_id LIMIT {max(1, cap // 3)}),
        equal AS (SELECT * FROM viewer_stats WHERE spread = 0 ORDER BY first_seen DESC, group_id LIMIT {max(1, cap // 6)}),
        disagree AS (SELECT * FROM viewer_stats WHERE disagree ORDER BY spread DESC, group_id LIMIT {max(1, cap // 6)}),
        scenarios AS (SELECT scenario_id FROM spread WHERE scenario_id IS NOT NULL
                      GROUP BY scenario_id ORDER BY max(spread) DESC, scenario_id LIMIT {SCENARIOS_ACROSS_ROUNDS}),
        rounds AS (SELECT * FROM viewer_stats WHERE scenario_id IN (SELECT scenario_id FROM scenarios)
                   ORDER BY first_seen LIMIT {max(1, cap // 3)})
        SELECT DISTINCT * FROM (SELECT * FROM spread UNION ALL SELECT * FROM equal
                                UNION ALL SELECT * FROM disagree UNION ALL SELECT * FROM rounds)
        ORDER BY spread DESC, first_seen, group_id LIMIT {cap}
        """
    ).fetchall()
    groups = {
        gid: Group(gid, scenario, policy or "(base)", float(spread), spread == 0, bool(dis))
        for gid, scenario, policy, _, spread, dis in chosen
    }
    if groups:
        _fill_members(con, groups, reward, tokenizer)
    return GroupView(reward=reward, total=int(total), groups=list(groups.values()))


def _fill_members(con: Any, groups: dict[str, Group], reward: str, tokenizer: Any) -> None:
    ids = list(groups)
    rows = con.execute(
        f"""
        SELECT group_id, trajectory_id, messages, final_output, turns, status FROM trajectories
        WHERE {equals("source", "replay", table="trajectories")} AND group_id IN (SELECT unnest(?)) ORDER BY group_id, trajectory_id
        """,
        [ids],
    ).fetchall()
    scored: dict[str, list[dict[str, Any]]] = {}
    for tid, name, scorer, value, explanation in con.execute(
        f"""
        SELECT r.trajectory_id, r.name, r.scorer, r.value, r.explanation
        FROM latest_rewards r JOIN trajectories t USING (trajectory_id)
        WHERE {equals("t.source", "replay", table="trajectories")} AND t.group_id IN (SELECT unnest(?)) ORDER BY r.name
        """,
        [ids],
    ).fetchall():
        scored.setdefault(tid, []).append(
            {"name": name, "scorer": scorer, "value": value, "explanation": explanation}
        )
    for gid, tid, messages, final_output, turns, status in rows:
        groups[gid].members.append(
            Member(
                tid,
                list(messages or []),
                final_output,
                scored.get(tid, []),
                None,
                _tokens(turns, tokenizer),
                status,
            )
        )
    for group in groups.values():
        found = [next((r["value"] for r in m.rewards if r["name"] == reward), None) for m in group.members]
        values = [v for v in found if v is not None]
        if values and len(values) == len(found):
            advantages, _ = compute_advantages([group.group_id] * len(values), [float(v) for v in values])
            for member, advantage in zip(group.members, advantages, strict=True):
                member.advantage = advantage


def _tokens(turns: Any, tokenizer: Any) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for turn in turns or []:
        ids, logprobs = list(turn["completion_token_ids"] or []), list(turn["logprobs"] or [])
        texts = tokenizer.convert_ids_to_tokens(ids) if tokenizer is not None else [f"#{i}" for i in ids]
        out += list(zip(texts, (float(x) for x in logprobs), strict=False))
    return out


# --- HTML ---------------------------------------------------------------------------------------


def _message_html(message: dict[str, Any]) -> str:
    role = message.get("role") or "?"
    body = html.escape(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        body += (
            f"<div class='call'>→ <b>{html.escape(call.get('name') or '')}</b>"
            f"({html.escape(call.get('arguments') or '')})</div>"
        )
    name = f" <i>{html.escape(message['name'])}</i>" if message.get("name") else ""
    error = " error" if message.get("is_error") else ""
    return f"<div class='msg {html.escape(role)}{error}'><span class='role'>{html.escape(role)}{name}</span>{body}</div>"


def _tokens_html(tokens: list[tuple[str, float]]) -> str:
    if not tokens:
        return ""
    spans = "".join(
        f"<span class='tok{' low' if lp < LOW_PROBABILITY else ''}' title='logprob {lp:.3f} (p={math.exp(lp):.3f})'>"
        f"{html.escape(text)}</span>"
        for text, lp in tokens
    )
    return (
        f"<details class='tokens'><summary>{len(tokens)} sampled tokens, "
        f"{sum(lp < LOW_PROBABILITY for _, lp in tokens)} with p &lt; 0.2 highlighted</summary>"
        f"{spans}</details>"
    )


def _member_html(member: Member, reward: str) -> str:
    rewards = "".join(
        f"<li{' class=primary' if r['name'] == reward else ''}><b>{html.escape(str(r['name']))}</b> = "
        f"{r['value']:.3f} <span class='scorer'>({html.escape(str(r['scorer']))})</span>"
        + (f"<div class='why'>{html.escape(r['explanation'])}</div>" if r.get("explanation") else "")
        + "</li>"
        for r in member.rewards
    )
    advantage = f"{member.advantage:+.3f}" if member.advantage is not None else "-"
    final = f"<div class='final'><b>final answer</b> {html.escape(member.final_output or '')}</div>"
    return (
        f"<div class='member' data-trajectory='{html.escape(member.trajectory_id)}'>"
        f"<div class='head'><code>{html.escape(member.trajectory_id)}</code> · advantage <b>{advantage}</b></div>"
        f"<ul class='rewards'>{rewards}</ul>{final}"
        f"<div class='messages'>{''.join(_message_html(m) for m in member.messages)}</div>"
        f"{_tokens_html(member.tokens)}</div>"
    )


def render_groups(view: GroupView) -> str:
    """The viewer's section: filters, then one card per group (largest spread first)."""
    if not view.groups:
        return "<section id='groups'><h2>Groups</h2><p><em>No scored replayed groups.</em></p></section>"
    scenarios = sorted({g.scenario_id for g in view.groups if g.scenario_id})
    policies = list(dict.fromkeys(g.policy for g in view.groups))
    options = "".join(f"<option value='{html.escape(s)}'>{html.escape(s)}</option>" for s in scenarios)
    policy_options = "".join(f"<option value='{html.escape(p)}'>{html.escape(p)}</option>" for p in policies)
    cards = []
    for rank, g in enumerate(view.groups):
        cards.append(
            f"<div class='group' id='group-{html.escape(g.group_id)}' data-rank='{rank}' "
            f"data-spread='{g.spread:.6f}' data-equal='{int(g.equal)}' data-disagree='{int(g.disagree)}' "
            f"data-scenario='{html.escape(g.scenario_id or '')}' data-policy='{html.escape(g.policy)}'>"
            f"<h3>group <code>{html.escape(g.group_id)}</code> · scenario <code>{html.escape(g.scenario_id or '-')}</code>"
            f" · <span class='policy'>{html.escape(g.policy)}</span> · spread {g.spread:.3f}"
            f"{' · all equal' if g.equal else ''}{' · rewards disagree' if g.disagree else ''}</h3>"
            f"<div class='members' style='grid-template-columns:repeat({max(1, len(g.members))},minmax(240px,1fr))'>"
            f"{''.join(_member_html(m, view.reward) for m in g.members)}</div></div>"
        )
    left_out = view.total - len(view.groups)
    return (
        "<section id='groups'><h2>Groups</h2>"
        f"<p>{len(view.groups)} of {view.total} scored replayed groups (<code>{html.escape(view.reward)}</code>): "
        f"the largest reward spreads, all-equal groups, groups where two rewards disagree, and every round of the "
        f"scenarios with the largest spreads{f'; {left_out} left out' if left_out > 0 else ''}.</p>"
        "<div class='filters'>"
        "<button data-filter='all'>All</button><button data-filter='spread'>Largest reward spread</button>"
        "<button data-filter='equal'>All-equal</button><button data-filter='disagree'>Rewards disagree</button>"
        f"<select id='scenario-filter'><option value=''>any scenario</option>{options}</select>"
        f"<select id='policy-filter'><option value=''>any policy</option>{policy_options}</select>"
        "<span id='shown-count'></span></div>"
        f"{''.join(cards)}</section><script>{VIEWER_JS}</script>"
    )


VIEWER_JS = """
(function () {
  const groups = Array.from(document.querySelectorAll('#groups .group'));
  const state = {filter: 'all', scenario: '', policy: ''};
  function apply() {
    let shown = 0;
    const spread = groups.filter(g => +g.dataset.spread > 0).slice(0, 10);
    for (const g of groups) {
      let ok = state.filter === 'all' || (state.filter === 'equal' && g.dataset.equal === '1') ||
        (state.filter === 'disagree' && g.dataset.disagree === '1') || (state.filter === 'spread' && spread.includes(g));
      ok = ok && (!state.scenario || g.dataset.scenario === state.scenario) && (!state.policy || g.dataset.policy === state.policy);
      g.hidden = !ok;
      shown += ok ? 1 : 0;
    }
    for (const b of document.querySelectorAll('#groups .filters button')) b.classList.toggle('on', b.dataset.filter === state.filter);
    document.getElementById('scenario-filter').value = state.scenario;
    document.getElementById('policy-filter').value = state.policy;
    document.getElementById('shown-count').textContent = shown + ' shown';
  }
  function fromHash() {
    // URLSearchParams decodes the parameters itself: decoding the hash first would turn an
    // encoded `+` (policy names have one) into a space
    const hash = location.hash || '';
    if (!hash.startsWith('#groups')) return;
    const params = new URLSearchParams(hash.slice('#groups'.length).replace(/^\\//, ''));
    state.filter = params.get('filter') || 'all';
    state.scenario = params.get('scenario') || '';
    state.policy = params.get('policy') || '';
  }
  function toHash() {
    const params = new URLSearchParams();
    if (state.filter !== 'all') params.set('filter', state.filter);
    if (state.scenario) params.set('scenario', state.scenario);
    if (state.policy) params.set('policy', state.policy);
    history.replaceState(null, '', '#groups/' + params.toString());
  }
  for (const b of document.querySelectorAll('#groups .filters button'))
    b.addEventListener('click', () => { state.filter = b.dataset.filter; toHash(); apply(); });
  document.getElementById('scenario-filter').addEventListener('change', e => { state.scenario = e.target.value; toHash(); apply(); });
  document.getElementById('policy-filter').addEventListener('change', e => { state.policy = e.target.value; toHash(); apply(); });
  window.addEventListener('hashchange', () => { fromHash(); apply(); });
  fromHash();
  apply();
})();
"""

VIEWER_CSS = (
    "#groups .filters{position:sticky;top:0;background:#fff;padding:6px 0;z-index:1}"
    "#groups button{margin-right:4px;padding:3px 8px;border:1px solid #a0aec0;background:#f7fafc;cursor:pointer}"
    "#groups button.on{background:#2b6cb0;color:#fff}#groups select{margin-right:6px}"
    ".group{border-top:2px solid #cbd5e0;margin:14px 0;padding-top:6px}.group h3{font-size:14px;margin:4px 0}"
    ".members{display:grid;gap:8px;overflow-x:auto}.member{border:1px solid #e2e8f0;padding:6px;font-size:12px;"
    "min-width:240px;overflow:hidden;overflow-wrap:anywhere}.member .head{margin-bottom:4px}.rewards{margin:0;padding-left:16px}.rewards .primary{color:#2b6cb0}"
    ".why{color:#4a5568;font-style:italic}.scorer{color:#718096}.final{background:#f0fff4;margin:4px 0;padding:3px}"
    ".msg{margin:3px 0;padding:3px;border-left:3px solid #cbd5e0;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".msg .role{display:block;font-size:10px;color:#718096;text-transform:uppercase}.msg.assistant{border-color:#2b6cb0}"
    ".msg.tool{border-color:#d69e2e}.msg.error{background:#fff5f5}.call{font-family:monospace}"
    ".tokens .tok{font-family:monospace;border-right:1px dotted #e2e8f0}.tokens .tok.low{background:#fed7d7}"
)
