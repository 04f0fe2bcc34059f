"""Reading the judge's answer: a tolerant parser, then strict validation.

Tolerant about form, strict about content. Accepted forms: the schema's
`{"scores": {"t1": {...}}}`, `{"scores": [...]}`, a bare list of entries, or a mapping `{"t1": {...}}` /
`{"t1": 0.7}`; JSON inside a ```json fence or surrounded by prose; `id` or
`trajectory_id`, `score` or `value`, `explanation` or `reason`; numeric strings.
Not tolerated (each is an invalid answer, retried, then a recorded failure with this
reason): no JSON at all (`invalid_json`), an id missing (`missing_ids`), an id we did
not send (`unknown_ids`), an id twice (`duplicate_ids`), a score that is not a number
(`invalid_score`) or outside [0, 1] (`score_out_of_range`). Answers are matched to
trajectories by id only, never by their position in the list.

>>> parse_verdicts('Sure! ```json\\n{"scores": [{"id": "t2", "score": "0.5", "reason": "ok"},'
...                ' {"trajectory_id": "t1", "score": 1, "explanation": "best"}]}\\n```', ["t1", "t2"])
{'t1': (1.0, 'best'), 't2': (0.5, 'ok')}
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from judging.errors import JudgeCallError

_ID_KEYS = ("trajectory_id", "id", "trajectory", "label")
_SCORE_KEYS = ("score", "value", "reward", "rating")
_EXPLANATION_KEYS = ("explanation", "reason", "reasoning", "rationale", "justification")
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def _invalid(reason: str, detail: str) -> JudgeCallError:
    return JudgeCallError(reason, detail, retryable=True)


def extract_json(text: str) -> Any:
    """The first JSON object or array in `text` (fenced, bare, or inside prose)."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        stripped = candidate.strip()
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
        for start, char in enumerate(stripped):
            if char in "{[":
                try:
                    value, _ = decoder.raw_decode(stripped, start)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, (dict, list)):
                    return value
    raise _invalid("invalid_json", f"no JSON object in the answer: {text[:200]!r}")


def _first(entry: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in entry:
            return entry[key]
    return None


def _entries(payload: Any) -> list[tuple[Any, Any, Any]]:
    """(id, score, explanation) triples from any accepted shape."""
    if isinstance(payload, dict):
        for key in ("scores", "results", "trajectories", "ratings"):
            if key in payload:
                if isinstance(payload[key], dict):  # keyed by id, as the schema asks
                    return _entries(payload[key])
                if not isinstance(payload[key], list):
                    raise _invalid(
                        "invalid_json", f"`{key}` should be a list, got {type(payload[key]).__name__}"
                    )
                payload = payload[key]
                break
        else:
            if _first(payload, _ID_KEYS) is not None and _first(payload, _SCORE_KEYS) is not None:
                payload = [payload]  # a single entry for a single trajectory
            else:
                triples = []
                for key, value in payload.items():
                    if isinstance(value, dict):
                        triples.append((key, _first(value, _SCORE_KEYS), _first(value, _EXPLANATION_KEYS)))
                    else:
                        triples.append((key, value, None))
                return triples
    if not isinstance(payload, list):
        raise _invalid("invalid_json", f"expected a list of scores, got {type(payload).__name__}")
    triples = []
    for entry in payload:
        if not isinstance(entry, dict):
            raise _invalid(
                "invalid_json", f"a score entry is a {type(entry).__name__}, not an object: {entry!r:.80}"
            )
        triples.append(
            (_first(entry, _ID_KEYS), _first(entry, _SCORE_KEYS), _first(entry, _EXPLANATION_KEYS))
        )
    return triples


def _normalise_id(raw: Any, labels: set[str]) -> str:
    text = str(raw).strip() if raw is not None else ""
    if text in labels:
        return text
    # "1" or 1 for "t1": same id, written without its prefix.
    if f"t{text}" in labels:
        return f"t{text}"
    return text


def _score(label: str, raw: Any) -> float:
    try:
        value = float(raw.strip().rstrip("%")) if isinstance(raw, str) else float(raw)
    except (TypeError, ValueError):
        raise _invalid("invalid_score", f"score for `{label}` is not a number: {raw!r}") from None
    if isinstance(raw, bool) or not math.isfinite(value):
        raise _invalid("invalid_score", f"score for `{label}` is not a number: {raw!r}")
    if not 0.0 <= value <= 1.0:
        raise _invalid("score_out_of_range", f"score for `{label}` is {value}, outside [0, 1]")
    return value


def parse_verdicts(text: str | None, labels: list[str]) -> dict[str, tuple[float, str]]:
    """Map each label to (score, explanation), or raise a retryable `JudgeCallError` with a reason."""
    if not text or not text.strip():
        raise _invalid("empty_answer", "the judge returned no content")
    expected = set(labels)
    verdicts: dict[str, tuple[float, str]] = {}
    unknown: list[str] = []
    duplicates: list[str] = []
    for raw_id, raw_score, explanation in _entries(extract_json(text)):
        label = _normalise_id(raw_id, expected)
        if label not in expected:
            unknown.append(label or repr(raw_id))
            continue
        if label in verdicts:
            duplicates.append(label)
            continue
        verdicts[label] = (_score(label, raw_score), "" if explanation is None else str(explanation))
    if unknown:
        raise _invalid("unknown_ids", f"ids we did not send: {', '.join(unknown)}; sent: {', '.join(labels)}")
    if duplicates:
        raise _invalid("duplicate_ids", f"ids scored twice: {', '.join(duplicates)}")
    missing = [label for label in labels if label not in verdicts]
    if missing:
        raise _invalid(
            "missing_ids", f"no score for {', '.join(missing)} (got {len(verdicts)} of {len(labels)})"
        )
    return {label: verdicts[label] for label in sorted(verdicts, key=labels.index)}
