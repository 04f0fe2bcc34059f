"""Token selection for the transformers backend: every row draws from its own seeded generator.

`generate(do_sample=True)` draws every row from torch's one global generator, so a row's
sample depends on which rows shared its batch and in what order; with concurrent rollouts
that is an accident of timing, and a seed fixed nothing. Here each row owns a
`torch.Generator` seeded like vLLM seeds the samples of a request (sample `j` of a request
with seed `s` uses `s + j`), and the next token is drawn by inverse CDF: one uniform `u`
from the row's generator a step, and the token where `u` falls in the row's cumulative
distribution (summed in float64), an exact draw from `p`. A row's draw then depends only on
its seed, never on its batch; its logits can still differ in the last bits with the batch's
padding and kernels, so on a GPU in bf16 a near-tie can rarely go the other way.

`SeededSampling` runs as the last logits processor of a greedy `generate`: it applies
temperature, top-k and top-p (transformers' own warpers, in the order `generate` would),
records the log-probability of the token it picks under that processed distribution (what
GRPO's importance ratio needs), and hands `generate` scores whose argmax is that token.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
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
    """Picks each row's next token from its own generator; a row at `temperature == 0` picks the argmax.

    `temperature` is one for every row, or one per row: an evaluation's greedy rows share a
    batch with its sampled ones (a greedy row draws no noise and has no generator).
    After `generate`, `logprobs[r]` holds row `r`'s log-probability of each token picked, step
    by step (rows that already stopped keep getting entries; callers cut at the row's end).
    """

    def __init__(
        self,
        seeds: Sequence[int],
        *,
        temperature: float | Sequence[float],
        top_k: int,
        top_p: float,
        device: Any,
    ) -> None:
        self.top_k, self.top_p, self.device = top_k, top_p, device
        self.temperatures: list[float] = []
        self.greedy_rows: list[bool] = []
        self.generators: list[torch.Generator | None] = []
        self.rows = 0
        self.extend(seeds, temperature)
        self._steps: list[torch.Tensor] = []
        self._buffers: list[torch.Tensor | None] = [None, None]  # `_scratch`

    def extend(self, seeds: Sequence[int], temperature: float | Sequence[float]) -> range:
        """Rows joining a running batch (continuous batching): each with its own generator, as
        if it had been there from the start. Returns the new rows' names."""
        temperatures = (
            [float(temperature)] * len(seeds) if isinstance(temperature, float | int) else list(temperature)
        )
        if len(temperatures) != len(seeds):
            raise ValueError(f"{len(temperatures)} temperatures for {len(seeds)} rows")
        first = self.rows
        self.temperatures += temperatures
        self.greedy_rows += [t == 0 for t in temperatures]
        self.generators += [
            None if t == 0 else torch.Generator(self.device).manual_seed(s)
            for s, t in zip(seeds, temperatures, strict=True)
        ]
        self.rows = len(self.temperatures)
        sampled = sorted({t for t in self.temperatures if t != 0})
        self.warpers: list[LogitsProcessor] = []
        # One sampled temperature is transformers' warper (as `generate` applies it); several
        # divide each row by its own.
        self.row_temperatures: list[float] | None = None
        if len(sampled) == 1 and sampled[0] != 1.0:
            self.warpers.append(TemperatureLogitsWarper(sampled[0]))
        elif len(sampled) > 1:
            self.row_temperatures = [t or 1.0 for t in self.temperatures]
        if self.top_k > 0:
            self.warpers.append(TopKLogitsWarper(self.top_k))
        if self.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(self.top_p))
        return range(first, self.rows)

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
        finished rows still draws each remaining row's token from that row's own generator.
        Rows in `idle` (finished, still in the batch) draw nothing: their pick is discarded, and
        their generators serve no other row. `input_ids` is what the warpers see (none of ours
        reads it). A greedy row's log-probability is under the model's own distribution.
        """
        names = list(range(self.rows)) if rows is None else list(rows)
        greedy = [k for k, r in enumerate(names) if self.greedy_rows[r]]
        if len(greedy) == len(names):
            picked, chosen_logprobs = _argmax(scores.float())
        elif not greedy:
            picked, chosen_logprobs = self._draw(input_ids, scores, names, idle)
        else:  # both kinds in one batch: each part as it would be alone, then back in row order
            drawn = [k for k, r in enumerate(names) if not self.greedy_rows[r]]
            picked = torch.empty(len(names), dtype=torch.long, device=scores.device)
            chosen_logprobs = torch.empty(len(names), dtype=torch.float32, device=scores.device)
            at_max, at_max_logprobs = _argmax(scores[greedy].float())
            at_draw, at_draw_logprobs = self._draw(
                input_ids[drawn] if input_ids is not None else None,
                scores[drawn],
                [names[k] for k in drawn],
                idle,
            )
            picked[greedy], chosen_logprobs[greedy] = at_max, at_max_logprobs
            picked[drawn], chosen_logprobs[drawn] = at_draw, at_draw_logprobs
        if not bool(torch.isfinite(chosen_logprobs).all()):  # NaN logits pick NaN: say so, store nothing
            raise SamplerError(
                "the model produced non-finite logits (NaN or inf); check the weights, adapter and dtype",
                backend="transformers",
                reason="non_finite_logits",
            )
        return picked, chosen_logprobs

    def _draw(
        self, input_ids: Any, scores: torch.Tensor, names: Sequence[int], idle: Collection[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sampled rows' tokens (`names`: which rows `scores` holds) and their processed log-probabilities."""
        warpers = self.warpers
        if self.row_temperatures is not None:
            temperatures = torch.tensor(
                [self.row_temperatures[r] for r in names], dtype=scores.dtype, device=scores.device
            )
            scores = torch.div(scores, temperatures[:, None], out=self._scratch(0, scores))
        elif warpers and isinstance(warpers[0], TemperatureLogitsWarper):  # its `scores / temperature`
            scores = torch.div(scores, warpers[0].temperature, out=self._scratch(0, scores))
            warpers = warpers[1:]
        for warp in warpers:
            scores = warp(input_ids, scores)  # type: ignore[arg-type]  # HF's LongTensor/FloatTensor
        scores = scores.float()
        probs = torch.softmax(scores, dim=-1, out=self._scratch(1, scores))
        picked = inverse_cdf(probs, self._uniforms(names, idle, probs.device))
        return picked, probs.gather(-1, picked[:, None])[:, 0].log()

    def _scratch(self, which: int, like: torch.Tensor) -> torch.Tensor:
        """Buffer `which` (0 or 1) shaped and typed as `like`, kept for the next steps: a step's
        processed scores and probabilities are rows x vocabulary floats (75 MB at 384 SmolLM2
        rows), which a CPU's malloc would map and fault in afresh every step
        (`head_buffer.MMAP_THRESHOLD_MAX`)."""
        held = self._buffers[which]
        if (
            held is None
            or held.dtype != like.dtype
            or held.device != like.device
            or held.numel() < like.numel()
        ):
            held = self._buffers[which] = torch.empty(like.numel(), dtype=like.dtype, device=like.device)
        return held[: like.numel()].view(like.shape)

    def _uniforms(self, rows: Sequence[int], idle: Collection[int], device: Any) -> torch.Tensor:
        """One uniform in [0, 1) from each row's generator (float64); an idle row draws nothing."""
        return torch.cat(
            [
                torch.full((1,), 0.5, dtype=torch.float64, device=device)
                if r in idle or (generator := self.generators[r]) is None
                else torch.rand(1, generator=generator, dtype=torch.float64, device=device)
                for r in rows
            ]
        )

    @property
    def logprobs(self) -> list[list[float]]:
        """Per row, the log-probability of each token picked, in order."""
        if not self._steps:
            return [[] for _ in range(self.rows)]
        return torch.stack(self._steps, dim=1).cpu().tolist()


def _argmax(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The most likely token of each row and its log-probability."""
    picked = scores.argmax(dim=-1)
    return picked, scores.gather(-1, picked[:, None])[:, 0] - torch.logsumexp(scores, dim=-1)


#: Tokens per block of `inverse_cdf`'s first search: ~sqrt of a vocabulary, a multiple of SIMD widths.
BLOCK = 128


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Row `r`'s token: the first whose cumulative probability exceeds `uniforms[r]` of the row's
    mass, an exact draw from `probs[r]` for `u ~ U[0, 1)`; a token of zero mass (masked by top-k
    or top-p) is never picked.

    Exponential races (`argmax(log p - log E)`, one Exp(1) draw per token) are as exact, but
    torch's CPU `exponential_` is one serial Mersenne-Twister stream a call, ~1 ms for SmolLM2's
    49,152-token vocabulary: at 192 rows a third of a decode step. Here a row draws one number,
    and the search is in two levels, so only one pass goes over the whole vocabulary: the
    masses of blocks of `BLOCK` tokens (each summed in float32, ~1e-7 of its mass off; their
    running sum in float64: a float32 running sum over ~50k probabilities drifts by ~1e-4 of
    the mass, enough to shift rare tokens' odds) find the block; the float64 running sum of
    that one block finds the token. A block's rounding moves only its last token's odds.

    >>> p = torch.tensor([[0.5, 0.0, 0.25, 0.25]])
    >>> [inverse_cdf(p, torch.tensor([u], dtype=torch.float64)).item() for u in (0.0, 0.49, 0.5, 0.8)]
    [0, 0, 2, 3]
    """
    rows, vocabulary = probs.shape
    pad = -vocabulary % BLOCK
    blocks = torch.nn.functional.pad(probs, (0, pad)) if pad else probs
    blocks = blocks.view(rows, -1, BLOCK)
    coarse = torch.cumsum(blocks.sum(-1).double(), dim=-1)  # [rows, blocks]
    target = uniforms[:, None] * coarse[:, -1:]
    block = _first_above(coarse, target)
    before = torch.where(block > 0, coarse.gather(-1, (block - 1).clamp_min(0)), 0.0)
    arange = torch.arange(rows, device=probs.device)
    fine = torch.cumsum(blocks[arange, block[:, 0]], dim=-1, dtype=torch.float64)  # [rows, BLOCK]
    token = block * BLOCK + _first_above(fine, target - before)
    # NaN masses find no place: the last token, whose NaN log-probability the caller reports.
    return token[:, 0].clamp_max_(vocabulary - 1)


def _first_above(cumulative: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose cumulative value exceeds `target` (`right=True`: a step of zero
    width is never it), capped at the last step of non-zero width, which a target rounding put at
    the total reaches; `[rows, 1]`."""
    found = torch.searchsorted(cumulative, target, right=True)
    last = torch.searchsorted(cumulative, cumulative[:, -1:].contiguous(), right=False)
    return torch.minimum(found, last).clamp_max_(cumulative.shape[-1] - 1)
