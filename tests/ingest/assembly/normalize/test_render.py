"""Tool results as the model was shown them: structured values rendered as Python frameworks render them."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ingest.assembly.normalize.types import as_text

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON_VALUES.filter(lambda v: not isinstance(v, (str, list)) and v is not None))
def test_structured_tool_results_render_as_python_frameworks_render_them(value: Any) -> None:
    # What a Python framework shows the model: `json.dumps` (unicode kept, NaN as NaN).
    assert as_text(value) == json.dumps(value, ensure_ascii=False)
