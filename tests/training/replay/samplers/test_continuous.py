"""Continuous batching on the transformers backend: a rollout's next turn joins the batch that is
running, samples exactly what it would alone, and every request is answered as soon as it is done."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from training.replay.samplers import make_sampler
from training.replay.samplers.base import Completion, MicroBatcher, SampleRequest, SamplingParams

SYSTEM = (
    "<|im_start|>system\nYou are a careful math assistant. Use the calculator tool when needed.<|im_end|>\n"
)


def _prompt(sampler: Any, text: str) -> tuple[int, ...]:
    return tuple(sampler.tokenizer.encode(SYSTEM + text))


class _Queue:
    """The batcher's side of `stream`: hands `joining` over at the `at`-th call of `more`, and
    records what `stream` delivered, with the number of `more` calls (decode steps) by then."""

    def __init__(self, joining: dict[int, SampleRequest], at: int) -> None:
        self.joining, self.at, self.calls = dict(joining), at, 0
        self.taken: list[int] = []
        self.delivered: dict[int, tuple[int, list[Completion]]] = {}
        self.on_call: Callable[[int], None] = lambda calls: None

    def more(self, select: Callable[[Sequence[SampleRequest]], list[int]]) -> list[tuple[int, SampleRequest]]:
        self.calls += 1
        self.on_call(self.calls)
        if self.calls < self.at or not self.joining:
            return []
        keys = list(self.joining)
        chosen = [keys[i] for i in select([self.joining[k] for k in keys])]
        self.taken += chosen
        return [(k, self.joining.pop(k)) for k in chosen]

    def deliver(self, key: int, completions: list[Completion]) -> None:
        self.delivered[key] = (self.calls, completions)


def test_a_next_turn_joins_the_running_batch_and_samples_what_it_would_alone(tiny_model: Path) -> None:
    sampler = make_sampler("transformers", str(tiny_model))
    params = SamplingParams(max_tokens=40, temperature=1.0, seed=5)
    first = SampleRequest(_prompt(sampler, "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n"), 6, params)
    # the next turn of a rollout: the first turn's prompt, an answer and a tool result after it
    follow_up = SampleRequest(
        first.prompt_ids
        + _prompt(sampler, "<|im_start|>assistant\n84<|im_end|>\n<|im_start|>user\nAnd 84 + 1?<|im_end|>\n")[
            len(_prompt(sampler, "")) :
        ],
        2,
        params.with_seed(9),
    )
    other_params = SampleRequest(follow_up.prompt_ids, 1, params.with_max_tokens(7))
    queue = _Queue({1: follow_up, 2: other_params}, at=3)
    sampler.stream([(0, first)], queue.more, queue.deliver)

    assert queue.taken == [1]  # the follow-up joined; a request of other parameters waits for its own batch
    (alone_first,), (alone_follow_up,) = sampler.generate([first]), sampler.generate([follow_up])
    for (_, got), alone in ((queue.delivered[0], alone_first), (queue.delivered[1], alone_follow_up)):
        assert [c.token_ids for c in got] == [c.token_ids for c in alone]
        for x, y in zip(got, alone, strict=True):
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
    assert sum(len(c.token_ids) for c in queue.delivered[1][1]) > 2  # it decoded in the batch's steps


def test_each_request_is_answered_when_done_not_when_the_batch_ends(tiny_model: Path) -> None:
    sampler = make_sampler("transformers", str(tiny_model))
    params = SamplingParams(max_tokens=30, temperature=1.0, seed=3)
    leaving = threading.Event()  # its client leaves at the 2nd step: it ends at its next token
    short = SampleRequest(_prompt(sampler, "<|im_start|>user\nHi<|im_end|>\n"), 1, params, cancel=leaving)
    long = SampleRequest(_prompt(sampler, "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n"), 4, params)
    queue = _Queue({}, at=1)
    queue.on_call = lambda calls: leaving.set() if calls == 2 else None
    sampler.stream([(0, short), (1, long)], queue.more, queue.deliver)

    answered_short, answered_long = queue.delivered[0][0], queue.delivered[1][0]
    assert answered_short <= 3 < answered_long  # answered while the other request still decoded
    assert max(len(c.token_ids) for c in queue.delivered[1][1]) > answered_short


def test_the_batcher_hands_a_running_stream_what_arrives_meanwhile() -> None:
    """`MicroBatcher` with a continuous backend: the second request, sent only once the first was
    answered, is taken by the same `run_stream` call (a rollout's next turn joining its batch)."""
    calls: list[list[int]] = []

    def run_stream(requests: list[tuple[int, SampleRequest]], more: Any, deliver: Any) -> None:
        calls.append([len(r.prompt_ids) for _, r in requests])
        for key, request in requests:
            deliver(key, [Completion((1,), (-0.5,), "stop")] * request.n)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for key, request in more(lambda waiting: list(range(len(waiting)))):
                calls[-1].append(len(request.prompt_ids))
                deliver(key, [Completion((2,), (-0.5,), "stop")] * request.n)
                return
            time.sleep(0.01)

    batcher = MicroBatcher(None, run_stream=run_stream)

    async def rollout() -> tuple[list[Completion], list[Completion]]:
        first = await batcher.submit(SampleRequest((1, 2, 3), 2))
        second = await batcher.submit(SampleRequest((1, 2, 3, 4, 5), 1))
        return first, second

    first, second = asyncio.run(rollout())
    batcher.close()
    assert calls == [[3, 5]]  # one stream: the second request joined it
    assert [c.token_ids for c in first] == [(1,), (1,)] and second[0].token_ids == (2,)


def test_a_backend_that_does_not_batch_continuously_streams_its_batch_whole(tiny_model: Path) -> None:
    from tests.training.helpers import ScriptedSampler, calculator_script

    sampler = ScriptedSampler(str(tiny_model), calculator_script)
    prompt = _prompt(sampler, "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n")
    requests = [(7, SampleRequest(prompt, 2)), (9, SampleRequest(prompt[:-1], 1))]
    queue = _Queue({}, at=1)
    sampler.stream(requests, queue.more, queue.deliver)
    assert queue.calls == 0  # it asks for no request while it runs
    assert {key: len(c) for key, (_, c) in queue.delivered.items()} == {7: 2, 9: 1}
    assert queue.delivered[7][1] == sampler.generate([requests[0][1]])[0]
