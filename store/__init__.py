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
  struct (`store.messages`), a replay's metadata and sampling record (`store.documents`),
  each kind of `runs.metrics` (`store.metrics`), the policy name (`store.policy_names`);
  `open_lake` (the checked way to open a configured lake) and `SettingError` (the base of
  configuration errors, with the failing `field`).

The surface is declared once, in `store/__init__.pyi`, for the type checker and for
`lazy_loader` (scientific-python's SPEC 1). Where the lake's libraries are installed, all of it
loads with `import store`, as a plain package would (a first `store.write` from an atexit hook
could no longer import them); where they are not (the GPU machine: bench/gpu.py), each name
loads on first use, so the trainers and their errors use the declarations (`store.metrics`,
`store.errors`) and a lake function fails with the missing library's ImportError.
"""

import importlib.util

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

if importlib.util.find_spec("deltalake") is not None:
    globals().update({name: __getattr__(name) for name in __all__})
