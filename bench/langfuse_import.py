"""Benchmark: traces/s for `trajlake ingest langfuse --file` on a generated Langfuse export.

Generates a JSONL export of N traces in the `TraceWithFullDetails` shape (a tool-using
agent per trace: agent span, generation with a tool call, tool observation, final
generation; one score per trace), imports it into a fresh lake, and prints a table.

    python bench/langfuse_import.py                  # 100,000 traces
    python bench/langfuse_import.py --traces 10000 --keep /tmp/lf-bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ingest.langfuse.export.importer import import_langfuse_export
from store.catalog.connection import connect
from store.lake import Lake

SYSTEM = {"role": "system", "content": "You are a weather assistant. Use tools."}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CITIES = ("Paris", "Oslo", "Lima", "Cairo", "Perth", "Quito", "Seoul", "Accra")


def make_trace(n: int, t0: datetime) -> dict:
    """One agent run as a `TraceWithFullDetails` export record (4 observations, 1 score)."""
    tid = f"{n:016x}{n * 2654435761 % (1 << 64):016x}"
    start = t0 + timedelta(seconds=n)
    city = CITIES[n % len(CITIES)]
    at = lambda s: (start + timedelta(seconds=s)).isoformat().replace("+00:00", "Z")  # noqa: E731
    ids = [f"{n:012x}{k:04x}" for k in range(1, 5)]
    call_id = f"call_{n}"
    user = {"role": "user", "content": f"Weather in {city}? (request {n})"}
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": call_id, "content": f"{10 + n % 20}C, cloudy"}
    answer = f"It is {10 + n % 20}C and cloudy in {city}."
    observations = [
        {
            "id": ids[0],
            "traceId": tid,
            "type": "AGENT",
            "name": "weather-agent",
            "startTime": at(0),
            "endTime": at(4),
            "input": {"question": user["content"]},
            "output": answer,
        },
        {
            "id": ids[1],
            "traceId": tid,
            "type": "GENERATION",
            "name": "chat",
            "parentObservationId": ids[0],
            "startTime": at(0.1),
            "endTime": at(1),
            "model": "gpt-4o-mini",
            "modelParameters": {"temperature": 0.2},
            "input": {"messages": [SYSTEM, user], "tools": [TOOL]},
            "output": call,
            "usage": {"input": 90, "output": 18, "total": 108, "unit": "TOKENS"},
        },
        {
            "id": ids[2],
            "traceId": tid,
            "type": "TOOL",
            "name": "get_weather",
            "parentObservationId": ids[0],
            "startTime": at(1.1),
            "endTime": at(1.4),
            "input": {"city": city},
            "output": result["content"],
            "metadata": {"tool_call_id": call_id},
        },
        {
            "id": ids[3],
            "traceId": tid,
            "type": "GENERATION",
            "name": "chat",
            "parentObservationId": ids[0],
            "startTime": at(2),
            "endTime": at(3.5),
            "model": "gpt-4o-mini",
            "input": {"messages": [SYSTEM, user, call, result], "tools": [TOOL]},
            "output": {"role": "assistant", "content": answer},
            "usageDetails": {"input": 130, "output": 14},
        },
    ]
    return {
        "id": tid,
        "timestamp": at(0),
        "name": "weather-agent",
        "userId": f"u-{n % 97}",
        "sessionId": f"s-{n // 3}",
        "tags": ["bench"],
        "environment": "production",
        "observations": observations,
        "scores": [
            {
                "id": f"sc-{n}",
                "traceId": tid,
                "name": "resolved",
                "dataType": "BOOLEAN",
                "value": float(n % 2),
                "stringValue": "True" if n % 2 else "False",
                "source": "ANNOTATION",
                "timestamp": at(60),
            }
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", type=int, default=100_000, help="Traces in the generated export.")
    parser.add_argument(
        "--workers", type=int, default=1, help="Assembly processes (see --workers of the CLI)."
    )
    parser.add_argument("--keep", type=Path, default=None, help="Keep the export and lake in this folder.")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="lf-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    export, lake = work / "export.jsonl", Lake(str(work / "lake"))
    console = Console()
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    started = time.perf_counter()
    with export.open("w") as handle:
        for n in range(args.traces):
            handle.write(json.dumps(make_trace(n, t0)) + "\n")
    generated = time.perf_counter() - started
    console.print(
        f"generated {args.traces:,} traces ({export.stat().st_size / 1e6:.0f} MB) in {generated:.1f}s"
    )

    report = import_langfuse_export(lake, export, show_progress=True, workers=args.workers)
    con = connect(lake)
    check = con.sql(
        "SELECT count(*), count(*) FILTER (WHERE len(messages) = 5) FROM trajectories"
    ).fetchall()[0]
    rewards = con.sql("SELECT count(*) FROM rewards").fetchall()[0][0]

    table = Table(title=f"Langfuse export import ({args.traces:,} traces, {args.workers} assembly worker(s))")
    for column in ("metric", "value"):
        table.add_column(column)
    rows = [
        ("export size", f"{export.stat().st_size / 1e6:.0f} MB JSONL"),
        ("observations -> spans", f"{report.spans_written:,}"),
        ("trajectories (5 messages each)", f"{check[0]:,} ({check[1]:,})"),
        ("rewards", f"{rewards:,}"),
        *((f"phase: {k}", f"{v:.1f} s") for k, v in report.phases_s.items()),
        ("import wall time", f"{report.elapsed_s:.1f} s"),
        ("traces/s", f"{report.traces / report.elapsed_s:,.0f}"),
        ("observations/s", f"{report.observations / report.elapsed_s:,.0f}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
