"""Langfuse export files: `records` reads a file's records (traces, observations, scores; JSON,
JSONL or a saved API response, plain or compressed), `importer` writes them into the lake
(`import_langfuse_export`). Callers import from those modules; this package imports nothing.
"""
