"""The rows a replay writes: a group's id and one rollout's `trajectories` row, pure functions.

A group's id hashes what makes its samples comparable (scenario, policy, run, size, sampling
distribution), so a re-run computes the same ids; a rollout's row carries its typed replay
columns (`replay_run`, `sampling`, `scenario_split`) and the rest of its provenance as JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from store.sampling import SamplingRecord
from training.replay.rollout.loop import Episode
from training.replay.samplers.base import Sampler, SamplingParams
from training.replay.scenarios import Scenario

if TYPE_CHECKING:  # `stage` imports these functions; they need only its config's type
    from training.replay.stage import ReplayConfig


def sampling_record(params: SamplingParams) -> SamplingRecord:
    """What a replayed trajectory records of how it was sampled (`trajectories.sampling`)."""
    return SamplingRecord(
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        seed=params.seed,
        stop_token_ids=tuple(params.stop_token_ids),
    )


def group_id_for(
    scenario_id: str, policy: str, run: str, group_size: int, sampling: SamplingParams | None = None
) -> str:
    """A new group's id: the scenario, policy, run, size and sampling distribution (temperature,
    top-p, top-k: `SamplingRecord.distribution`) hashed, so a change of any samples new groups
    rather than reusing ones GRPO would train on at the old temperature; the seed and token
    budget are not part of it. Groups already in the lake are found by their columns, whatever
    id they were given (`sampled_groups`)."""
    distribution = sampling_record(sampling or SamplingParams()).distribution
    key = "\x00".join((scenario_id, policy, run, str(group_size), json.dumps(distribution)))
    return "g-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def episode_row(
    episode: Episode,
    *,
    scenario: Scenario,
    group_id: str,
    index: int,
    sampler: Sampler,
    config: ReplayConfig,
    tools: str,
) -> dict[str, Any]:
    """One `trajectories` row for one rollout."""
    record = sampling_record(config.sampling)
    return {
        "trajectory_id": f"{group_id}-{index:03d}",
        "source": "replay",
        "agent_name": scenario.metadata.get("agent_name"),
        "model": sampler.model,
        "started_at": episode.started_at,
        "ended_at": episode.ended_at or episode.started_at,
        "messages": episode.messages,
        "tools": json.dumps(scenario.tools) if scenario.tools is not None else None,
        "final_output": episode.final_output,
        "input_tokens": episode.input_tokens,
        "output_tokens": episode.output_tokens,
        "scenario_id": scenario.scenario_id,
        "group_id": group_id,
        "policy": sampler.policy,
        "turns": episode.turns,
        "status": episode.status,
        "has_content": True,
        "replay_run": config.run,
        "scenario_split": scenario.split,
        "sampling": record.to_column(),
        # The rest of the rollout's provenance, as JSON text (what has a column above is not repeated).
        "metadata": json.dumps(
            {
                "index": index,
                "group_size": config.group_size,
                "backend": sampler.backend,
                "dtype": sampler.dtype,
                "adapter": sampler.adapter,
                "limits": dataclasses.asdict(config.limits),
                "tools": tools,
                "finish_reason": episode.finish_reason,
                "error": episode.error,
                "tool_calls": episode.tool_calls,
                "tool_errors": episode.tool_errors,
                "source_trajectory_id": scenario.source_trajectory_id,
                "expected": scenario.expected,
            }
        ),
    }
