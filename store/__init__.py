"""The trajectory lake: Delta Lake tables with one schema module, a writer, DuckDB views and maintenance.

Imports nothing else of trajlake. Public surface:

- `write(lake, table, data)`: validate and commit, one row per key (`store.writer`);
- `connect(lake)`, `refresh`, `run_read_only`, `scan(lake, table)`: SQL and polars over a
  snapshot, on connections that cannot open a file; `query_lake`: `trajlake sql`'s user SQL
  (local files readable where the kernel forbids it to write: `store.sandbox`); `snapshot(lake, versions)`: table versions, for lineage and time travel;
- `compact(lake)`: OPTIMIZE + Z-order + VACUUM (`store.maintenance`); `migrate(lake)`:
  the Parquet-files release to Delta (`store.migrate`);
- `TABLES`, `table_spec`, `empty_table`: the schemas (`store.schema`); `Lake`;
- the vocabularies (`store.vocabulary`) and the default selections (`store.selections`);
- the shapes other packages write into the lake and read back, declared once: the message
  struct (`store.messages`), a replay's sampling record and temperature rule (`store.sampling`),
  each kind of `runs.metrics` (`store.metrics`), the policy name (`store.policy_names`);
  `open_lake` (the checked way to open a configured lake) and `SettingError` (the base of
  configuration errors, with the failing `field`).

The surface is declared once, in `store/__init__.pyi`, for the type checker and for
`lazy_loader` (scientific-python's SPEC 1): each name loads its module on first use. So
`import store.errors` (the CLI's option parsing, the trainers' errors) costs that module
alone, and `trajlake sql` loads the SQL path without the writer's or maintenance's
libraries; where the lake's libraries are not installed (the GPU machine: bench/gpu.py),
the declarations still load and a lake function fails with the missing library's
ImportError. A first `store.write` may come from an exit hook (OTel exporters flush there),
when a library that registers a thread exit hook as it is imported (`concurrent.futures.thread`,
which polars imports) can no longer be imported: that module is imported here (tests/store/
test_shutdown_write.py), and the collector loads the whole surface when it starts.
"""

import concurrent.futures.thread  # noqa: F401 (see above: registers its exit hook now, not at exit)

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
