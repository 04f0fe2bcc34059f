"""OTLP: the collector (HTTP endpoints, spool, Parquet flusher, assembler thread), the
in-process exporter, and one-call instrumentation of an agent.

- `decode`: request bodies (protobuf or JSON, gzip) -> OTLP messages;
- `convert`: OTLP messages -> `spans` rows (log records as rows of kind LOG);
- `spool`: the write-ahead spool that makes a 200 durable;
- `app`: the Starlette endpoints; `collector`: the `Collector` threads; `http`: auth and bounded reads;
- `exporter`: `LakeSpanExporter`, an OpenTelemetry exporter writing straight into a lake;
- `instrument`: `instrument(...)`, tracing set-up for an agent in one call.
"""
