"""Benchmark: replay throughput on one and two Dask workers (what a second worker buys).

    python bench/dask_replay.py [--scenarios 32] [--group-size 4] [--max-tokens 48] [--repeats 3]

The replay stage (`training.replay.replay`, transformers backend, the tiny model, one torch
thread per worker) over the same scenarios split into two shards
(`training.replay.shard_selection`, what `pipeline.replay_shards = 2` does), submitted to a
`distributed.LocalCluster` of one worker process and of two. Each task loads its sampler and
writes its groups to the lake (Delta commits from both workers); tokens/s is the tokens
generated over the wall time of both tasks; the first run of each cluster warms it up.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from bench.replay import print_scaling, scaling_workload  # noqa: E402
from training.replay.rollout.loop import RolloutLimits  # noqa: E402
from training.replay.samplers import make_sampler  # noqa: E402
from training.replay.samplers.base import SamplingParams  # noqa: E402
from training.replay.scenario_io import shard_selection  # noqa: E402
from training.replay.stage import ReplayConfig, replay  # noqa: E402


def replay_shard(lake: str, model: str, shard: int, shards: int, run: str, args: dict) -> int:
    """One task: replay shard `shard` of `shards` of every scenario; returns the tokens generated."""
    import torch

    torch.set_num_threads(1)
    config = ReplayConfig(
        group_size=args["group_size"],
        sampling=SamplingParams(max_tokens=args["max_tokens"]),
        limits=RolloutLimits(max_turns=1),
        concurrency=64,
        run=run,
    )
    with make_sampler("transformers", model) as sampler:
        result = replay(
            lake,
            shard_selection("SELECT scenario_id FROM scenarios", shard, shards),
            sampler,
            config,
            progress=False,
        )
    return result.generated_tokens


def main() -> None:
    import distributed

    args, model, lake = scaling_workload(__doc__ or "", "trajlake-bench-dask-")
    options = {"group_size": args.group_size, "max_tokens": args.max_tokens}
    rates: dict[int, list[float]] = {}
    for workers in (1, 2):
        rates[workers] = []
        env = {"OMP_NUM_THREADS": "1"}
        with (
            distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env=env
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            for i in range(args.repeats + 1):
                started = time.perf_counter()
                futures = [
                    client.submit(
                        replay_shard, lake.root, model, k, 2, f"w{workers}-{i}", options, pure=False
                    )
                    for k in range(2)
                ]
                tokens = sum(client.gather(futures))
                if i:  # the first run warms the workers up (imports)
                    rates[workers].append(tokens / (time.perf_counter() - started))
    print_scaling(
        f"replay on Dask workers (LocalCluster processes, 1 thread each, tiny model; {args.scenarios} "
        f"scenarios x G={args.group_size}, {args.max_tokens} tokens, 2 shards; {os.cpu_count()} cores)",
        "workers",
        rates,
    )


if __name__ == "__main__":
    main()
