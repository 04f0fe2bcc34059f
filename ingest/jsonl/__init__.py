"""Conversations from files: chat-format JSONL imported as trajectories (`source = 'import'`).

The datasets teams already hold (fine-tuning files, exports of a chat tool, conversations
logged before tracing existed) use OpenAI's chat format, one conversation per line; `trajlake
import FILE` turns each into a trajectory beside the traced ones: SFT can select it, scenarios
can be cut from it, and a `feedback` value becomes its `user_feedback` reward.

- `convert`: one line's object -> a trajectory row (and a reward row), or an error naming what;
- `load`: read files, check every line, redact, write (nothing when any line is bad).
"""

from ingest.jsonl.load import ImportResult, import_files

__all__ = ["ImportResult", "import_files"]
