"""Assembly: spans -> trajectories (one per agent run) and rewards, as pure functions.

- `traces`: the entry, `assemble(spans)` over a `spans` table;
- `runs`: which spans form which agent run;
- `normalize/`: one span -> one LLM call or tool call, per telemetry convention;
- `conversation`: the calls of a run -> one conversation;
- `trajectory`: a run -> a `trajectories` row;
- `feedback`: evaluation events and annotations -> `rewards` rows.
"""

from ingest.assembly.traces import Assembled, assemble, assemble_trace, span_dicts

__all__ = ["Assembled", "assemble", "assemble_trace", "span_dicts"]
