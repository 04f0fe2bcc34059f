"""Fixtures of the training tests. The session-scoped `tiny_model` fixture lives in the root
`tests/conftest.py`, shared by every folder."""
