"""The ingest tests' collector fixtures (`tests/ingest/conftest.py`), for the suites here that drive a
running collector; the reaper stops every collector process a test started, however it ended."""

from tests.ingest.conftest import collector, reap_collector_processes, start_collector

__all__ = ["collector", "reap_collector_processes", "start_collector"]
