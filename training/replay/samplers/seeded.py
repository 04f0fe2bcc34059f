"""Token selection for the transformers backend: every row draws from its own seeded generator.

`generate(do_sample=True)` draws every row from torch's one global generator, so a row's
sample depends on which rows shared its batch and in what order; with concurrent rollouts
that is an accident of timing, and a seed fixed nothing. Here each row owns a
`torch.Generator` seeded like vLLM seeds the samples of a request (sample `j` of a request
with seed `s` uses `s + j`), and the next token is chosen by the Gumbel-max trick:
`argmax(log p + Gumbel noise)` is an exact draw from `p`. A row's noise then depends only on
its seed, never on its batch; its logits can still differ in the last bits with the batch's
padding and kernels, so on a GPU in bf16 a near-tie can rarely go the other way.

`SeededSampling` runs as the last logits processor of a greedy `generate`: it applies
temperature, top-k and top-p (transformers' own warpers, in the order `generate` would),
records the log-probability of the token it picks under that processed distribution (what
GRPO's importance ratio needs), and hands `generate` scores whose argmax is that token.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from transformers import LogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from training.replay.errors import SamplerError

SEED_BITS = 62


def sample_seeds(seed: int | None, n: int) -> list[int]:
    """The seeds of a request's `n` samples: `seed + j`, as vLLM seeds the children of one request.
    Without a seed, fresh ones from torch's global generator (so `torch.manual_seed` still pins them)."""
    if seed is None:
        return [int(s) for s in torch.randint(0, 2**SEED_BITS, (n,))]
    return [seed + j for j in range(n)]


class SeededSampling(LogitsProcessor):
    """Picks each row's next token from its own generator; `temperature == 0` picks the argmax.

    After `generate`, `logprobs[r]` holds row `r`'s log-probability of each token picked, step
    by step (rows that already stopped keep getting entries; callers cut at the row's end).
    """

    def __init__(
        self, seeds: Sequence[int], *, temperature: float, top_k: int, top_p: float, device: Any
    ) -> None:
        self.greedy = temperature == 0
        self.warpers: list[LogitsProcessor] = []
        if not self.greedy:
            if temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(temperature))
            if top_k > 0:
                self.warpers.append(TopKLogitsWarper(top_k))
            if top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(top_p))
        self.rows = len(seeds)
        self.generators = [] if self.greedy else [torch.Generator(device).manual_seed(s) for s in seeds]
        self._steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        picked, chosen_logprobs = self.choose(input_ids, scores)
        self._steps.append(chosen_logprobs)
        only_picked = torch.full_like(scores, float("-inf"))
        return only_picked.scatter_(-1, picked[:, None], 0.0)  # type: ignore[return-value]  # HF's signature

    def choose(
        self,
        input_ids: torch.Tensor,
        scores: torch.Tensor,
        rows: Sequence[int] | None = None,
        idle: Collection[int] = (),
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's next token and its processed log-probability, without recording them.

        `rows` names the rows `scores` holds (default: all, in order): a decode loop that drops
        finished rows still draws each remaining row's noise from that row's own generator.
        Rows in `idle` (finished, still in the batch) draw nothing: their pick is discarded, and
        their generators serve no other row. `input_ids` is what the warpers see (none of ours
        reads it).
        """
        for warp in self.warpers:
            scores = warp(input_ids, scores)  # type: ignore[arg-type]  # HF's LongTensor/FloatTensor
        logp = torch.log_softmax(scores.float(), dim=-1)
        if self.greedy:
            picked = logp.argmax(dim=-1)
        else:
            # Exponential races: argmax(p / E) = argmax(log p - log E), E ~ Exp(1) per token, one row's
            # noise from that row's generator alone. The CPU kernel can return E = 0 (-log1p(-u), u = 0):
            # clamped, it is a huge finite lead, so a masked token (log p = -inf) still never wins.
            # (An inverse-CDF draw, one uniform per row, is as exact and ~20% of a CPU decode step
            # cheaper, but it changes every seeded stream, and with it every recorded result.)
            names = range(len(self.generators)) if rows is None else rows
            draws = [(i, self.generators[r]) for i, r in enumerate(names) if r not in idle]
            noise = torch.empty_like(logp)
            if len(draws) < len(noise):  # an idle row's race: any finite value, its pick is discarded
                noise[[i for i, r in enumerate(names) if r in idle]] = 1.0
            _exponentials(noise, draws)
            # In place (a - b is a - b): a [rows, vocabulary] allocation less a step.
            races = torch.sub(logp, noise.clamp_min_(torch.finfo(noise.dtype).tiny).log_(), out=noise)
            picked = races.argmax(dim=-1)
        chosen_logprobs = logp.gather(-1, picked[:, None])[:, 0]
        if not bool(torch.isfinite(chosen_logprobs).all()):  # NaN logits pick NaN: say so, store nothing
            raise SamplerError(
                "the model produced non-finite logits (NaN or inf); check the weights, adapter and dtype",
                backend="transformers",
                reason="non_finite_logits",
            )
        return picked, chosen_logprobs

    @property
    def logprobs(self) -> list[list[float]]:
        """Per row, the log-probability of each token picked, in order."""
        if not self._steps:
            return [[] for _ in range(self.rows)]
        return torch.stack(self._steps, dim=1).cpu().tolist()


_POOLS: dict[int, ThreadPoolExecutor] = {}  # by size: made once, kept for the process


def _exponentials(noise: torch.Tensor, draws: Sequence[tuple[int, torch.Generator]]) -> None:
    """Fills row `i` of `noise` with Exp(1) draws from its generator, for each `(i, generator)`.

    torch's CPU `exponential_` is one serial Mersenne-Twister stream a call (~1 ms for a
    49,152-token vocabulary: at 192 rows, a quarter of a SmolLM2 decode step). The rows' streams
    are independent and the kernel releases the GIL, so the rows are split across torch's
    intra-op thread count; each row's values are the ones a call on that row alone draws.
    """
    workers = min(torch.get_num_threads(), len(draws))
    if workers <= 1 or noise.device.type != "cpu":
        for i, generator in draws:
            noise[i].exponential_(generator=generator)
        return
    pool = _POOLS.get(workers - 1) or _POOLS.setdefault(
        workers - 1, ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="trajlake-noise")
    )

    def fill(part: Sequence[tuple[int, torch.Generator]]) -> None:
        with torch.inference_mode(noise.is_inference()):  # the mode is per thread; the tensor's own
            for i, generator in part:
                noise[i].exponential_(generator=generator)

    parts = [draws[k::workers] for k in range(workers)]
    futures = [pool.submit(fill, part) for part in parts[1:]]
    fill(parts[0])
    for future in futures:
        future.result()
