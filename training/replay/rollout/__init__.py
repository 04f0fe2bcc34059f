"""Rollouts: the token-level agent loop, tool-call parsing, tool sources, and an OpenAI-compatible app."""
