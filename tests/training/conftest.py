"""Fixtures of the training tests: one tiny model per test session, built offline in seconds.

The `tiny_model` fixture itself lives in the root `tests/conftest.py`, shared by every folder.
"""

from __future__ import annotations



