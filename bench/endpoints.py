"""Benchmark: replay throughput over one and over two sampler servers.

    python bench/endpoints.py [--scenarios 32] [--group-size 4] [--max-tokens 48] [--repeats 3]

Starts `trajlake serve-sampler` processes on the tiny model (one torch thread each, so a
second server is a second core's worth of sampling) and runs the replay pipeline
(`training.replay.replay`: scenarios from the lake, rendering, the `vllm-server` backend,
every group written) against one server, then against two (`sampler.base_url` a list:
each request to the server with the fewest in flight). Same scenarios, group size, token
budget; the median of `--repeats` runs. The ratio is what a second endpoint buys here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.replay import print_scaling, scaling_workload  # noqa: E402
from training.replay.rollout.loop import RolloutLimits  # noqa: E402
from training.replay.samplers import SamplerConfig, SamplingParams  # noqa: E402
from training.replay.stage import ReplayConfig, replay  # noqa: E402


def start_server(model: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve-sampler", "--model", model, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    raise TimeoutError(f"serve-sampler on port {port} did not start")


def main() -> None:
    args, model, lake = scaling_workload(__doc__ or "", "trajlake-bench-endpoints-")
    servers = [start_server(model, 18_700 + i) for i in range(2)]
    urls = [f"http://127.0.0.1:{18_700 + i}" for i in range(2)]
    try:

        def config(run: str) -> ReplayConfig:
            return ReplayConfig(
                group_size=args.group_size,
                sampling=SamplingParams(max_tokens=args.max_tokens),
                limits=RolloutLimits(max_turns=1),
                concurrency=args.scenarios,
                run=run,
            )

        rates: dict[int, list[float]] = {1: [], 2: []}
        for i in range(args.repeats + 1):  # the first round warms both servers up
            for count in (1, 2):
                sampler = SamplerConfig(backend="vllm-server", model=model, base_url=urls[:count]).build()
                started = time.perf_counter()
                result = replay(
                    lake,
                    "SELECT scenario_id FROM scenarios",
                    sampler,
                    config(f"b{i}-{count}"),
                    progress=False,
                )
                if i:
                    rates[count].append(result.generated_tokens / (time.perf_counter() - started))
                sampler.close()
    finally:
        for process in servers:
            os.killpg(process.pid, signal.SIGKILL)
    print_scaling(
        f"replay over sampler servers (serve-sampler, tiny model, 1 thread each; {args.scenarios} scenarios "
        f"x G={args.group_size}, {args.max_tokens} tokens; {os.cpu_count()} cores)",
        "servers",
        rates,
    )


if __name__ == "__main__":
    main()
