"""Langfuse as a source: pull traces and scores from a server, or import export files.

>>> from ingest.langfuse.config import LangfuseConfig, PullFilters  # doctest: +SKIP
>>> from ingest.langfuse.pull import pull_langfuse  # doctest: +SKIP
>>> pull_langfuse("lake", LangfuseConfig(host="https://cloud.langfuse.com",
...               public_key="pk-lf-...", secret_key="sk-lf-..."), PullFilters(environments=("production",)))

Observations become `spans` rows with the Langfuse OTel SDK's attribute names, so the
collector's normaliser and assembler build the trajectories (`source = 'langfuse'`);
scores become `rewards`. Progress lives in the lake's `watermarks` table.

The package imports nothing (its modules load what they use: importing one of them, or
reading a section's settings, does not load the rest); each name is imported from its
module, e.g. `from ingest.langfuse.pull import pull_langfuse`.
"""
