"""Seeded token selection: exact draws from the processed distribution, each row from its own seed."""

from __future__ import annotations

import math

import pytest
import torch

from training.replay.errors import SamplerError
from training.replay.samplers.seeded import BLOCK, SeededSampling, inverse_cdf, sample_seeds

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0])


def processed_probabilities(temperature: float, top_k: int, top_p: float) -> list[float]:
    """The distribution the backends promise, computed by hand: softmax(logits / T), then the k most
    likely tokens, then the smallest most-likely set holding `top_p` of the mass, renormalised."""
    weights = [math.exp(x / temperature) for x in LOGITS.tolist()]
    order = sorted(range(len(weights)), key=lambda i: -weights[i])
    keep = set(order[:top_k] if top_k else order)
    total = sum(weights[i] for i in keep)
    kept, mass = set(), 0.0
    for i in order:
        if i in keep and mass < top_p * total - 1e-12:
            kept.add(i)
            mass += weights[i]
    return [weights[i] / mass if i in kept else 0.0 for i in range(len(weights))]


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.6, 3, 1.0), (1.4, 0, 0.8)])
def test_draws_follow_the_processed_distribution(temperature: float, top_k: int, top_p: float) -> None:
    rows = 20_000
    pick = SeededSampling(range(rows), temperature=temperature, top_k=top_k, top_p=top_p, device="cpu")
    scores = pick(torch.zeros((rows, 1), dtype=torch.long), LOGITS.repeat(rows, 1))
    picked = scores.argmax(-1)
    assert torch.equal(scores.isfinite().sum(-1), torch.ones(rows, dtype=torch.long))  # one token per row
    expected = processed_probabilities(temperature, top_k, top_p)
    counts = torch.bincount(picked, minlength=len(expected)).tolist()
    for token, (p, count) in enumerate(zip(expected, counts, strict=True)):
        if p == 0:
            assert count == 0, f"token {token} is outside top-k/top-p but was drawn {count} times"
        else:  # within 5 standard errors of the binomial count
            assert abs(count - rows * p) <= 5 * math.sqrt(rows * p * (1 - p)), (token, count, rows * p)
    (logprobs,) = zip(*pick.logprobs, strict=True)  # one step: each row's logprob of its token
    assert torch.allclose(torch.tensor(logprobs), torch.tensor(expected).log()[picked], atol=1e-5)


def test_a_rows_draws_depend_on_its_seed_alone() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))

    def draws(seeds: list[int], order: list[int], steps: int = 30) -> dict[int, list[int]]:
        pick = SeededSampling(seeds, temperature=1.0, top_k=0, top_p=1.0, device="cpu")
        out: dict[int, list[int]] = {seed: [] for seed in seeds}
        for _ in range(steps):
            picked = pick(torch.zeros((len(seeds), 1), dtype=torch.long), logits[order]).argmax(-1)
            for seed, token in zip(seeds, picked.tolist(), strict=True):
                out[seed].append(token)
        return out

    alone = draws([11], [0])
    in_batch = draws([5, 11, 12], [2, 0, 0])  # another row first, a different seed on the same logits
    assert in_batch[11] == alone[11]
    assert in_batch[12] != in_batch[11]  # same distribution, another seed: other draws


@pytest.mark.parametrize("sampled", [(0.7,), (0.7, 1.3)])
def test_rows_at_other_temperatures_pick_what_each_picks_alone(sampled: tuple[float, ...]) -> None:
    """Greedy rows beside sampled ones (an evaluation's two passes in one batch), and sampled rows
    at two temperatures: every row picks the token, and logprob, it picks in a batch of its own
    temperature, step after step, with finished rows dropped in between."""
    logits = torch.randn(4, 60, generator=torch.Generator().manual_seed(3))
    temperatures = [0.0, sampled[0], 0.0, sampled[-1]]
    seeds = [0, 21, 0, 22]

    def run(rows: list[int], steps: int = 12) -> dict[int, list[tuple[int, float]]]:
        pick = SeededSampling(
            [seeds[r] for r in rows],
            temperature=[temperatures[r] for r in rows],
            top_k=0,
            top_p=0.9,
            device="cpu",
        )
        out: dict[int, list[tuple[int, float]]] = {r: [] for r in rows}
        live = list(range(len(rows)))
        for step in range(steps):
            if step == 6 and len(live) > 1:
                live = live[1:]  # the first row finished and left the batch
            picked, logprobs = pick.choose(None, logits[[rows[k] for k in live]], rows=live)  # type: ignore[arg-type]
            for k, token, lp in zip(live, picked.tolist(), logprobs.tolist(), strict=True):
                out[rows[k]].append((token, lp))
        return out

    together = run([0, 1, 2, 3])
    for r in range(4):
        alone = run([r])[r]
        assert [t for t, _ in together[r]] == [t for t, _ in alone][: len(together[r])]
        assert [lp for _, lp in together[r]] == pytest.approx(
            [lp for _, lp in alone][: len(together[r])], abs=1e-6
        )
    assert {t for t, _ in together[0]} == {int(logits[0].argmax())}  # greedy: the argmax every step


def test_greedy_picks_the_argmax_and_its_logprob() -> None:
    pick = SeededSampling([0, 1], temperature=0.0, top_k=0, top_p=1.0, device="cpu")
    scores = pick(torch.zeros((2, 1), dtype=torch.long), LOGITS.repeat(2, 1))
    assert scores.argmax(-1).tolist() == [0, 0]
    assert pick.logprobs[0][0] == pytest.approx(torch.log_softmax(LOGITS, -1)[0].item(), abs=1e-6)


def test_sample_seeds_follow_vllm() -> None:
    assert sample_seeds(40, 3) == [40, 41, 42]  # vLLM seeds sample j of a request with seed + j
    torch.manual_seed(1)
    fresh = sample_seeds(None, 3)
    torch.manual_seed(1)
    assert sample_seeds(None, 3) == fresh and len(set(fresh)) == 3


@pytest.mark.parametrize("uniform", [0.0, 1.0 - 2.0**-53, 1.0])
def test_an_extreme_uniform_never_picks_a_masked_token(
    monkeypatch: pytest.MonkeyPatch, uniform: float
) -> None:
    """The draw's ends (u = 0, the largest double below 1, and 1 itself, which rounding of `u x
    total` can reach) land on a token of non-zero mass: with top-k 2, tokens 0 or 1, never a
    masked one beyond them."""
    monkeypatch.setattr(torch, "rand", lambda *_, **kw: torch.full((1,), uniform, dtype=kw["dtype"]))
    pick = SeededSampling([0], temperature=1.0, top_k=2, top_p=1.0, device="cpu")
    scores = pick(torch.zeros((1, 1), dtype=torch.long), LOGITS[None])
    assert scores.argmax(-1).item() == (0 if uniform == 0.0 else 1)
    assert math.isfinite(pick.logprobs[0][0])


def test_non_finite_logits_are_an_error_not_a_stored_nan() -> None:
    pick = SeededSampling([0, 1], temperature=1.0, top_k=0, top_p=1.0, device="cpu")
    scores = LOGITS.repeat(2, 1)
    scores[1] = float("nan")
    with pytest.raises(SamplerError, match="non-finite logits"):
        pick(torch.zeros((2, 1), dtype=torch.long), scores)


def test_idle_rows_draw_nothing_and_leave_the_others_draws_alone() -> None:
    """A finished row still in the batch (`idle`) draws no noise; every other row draws what it
    draws with no idle rows, whichever threads draw it."""
    torch.set_num_threads(max(2, torch.get_num_threads()))
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(3))
    busy = SeededSampling(range(5), temperature=1.0, top_k=0, top_p=1.0, device="cpu")
    some_idle = SeededSampling(range(5), temperature=1.0, top_k=0, top_p=1.0, device="cpu")
    before = some_idle.generators[1].get_state()
    for _ in range(4):
        all_rows, _ = busy.choose(None, logits)
        with_idle, _ = some_idle.choose(None, logits, idle={1, 3})
        assert with_idle[[0, 2, 4]].tolist() == all_rows[[0, 2, 4]].tolist()
    assert torch.equal(some_idle.generators[1].get_state(), before)


@pytest.mark.parametrize("temperature", [0.7, (0.7, 1.3, 0.0, 1.0)])
def test_scratch_reused_across_steps_draws_what_fresh_tensors_draw(
    temperature: float | tuple[float, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step's scores and probabilities go to two buffers kept from step to step, as the batch
    shrinks and grows: the same tokens and logprobs as fresh tensors a step, the caller's
    logits untouched, and no new buffer once the largest step has been seen."""
    temperatures = temperature if isinstance(temperature, tuple) else (temperature,) * 4
    kept = SeededSampling(range(4), temperature=list(temperatures), top_k=0, top_p=1.0, device="cpu")
    fresh = SeededSampling(range(4), temperature=list(temperatures), top_k=0, top_p=1.0, device="cpu")
    monkeypatch.setattr(fresh, "_scratch", lambda which, like: torch.empty_like(like))
    generator = torch.Generator().manual_seed(5)
    buffers = []
    for rows in ([0, 1, 2, 3], [0, 2, 3], [2, 3], [0, 1, 2, 3], [1]):
        logits = torch.randn(len(rows), 500, generator=generator)
        before = logits.clone()
        got = kept.choose(None, logits, rows=rows)
        assert torch.equal(logits, before)
        want = fresh.choose(None, logits, rows=rows)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        buffers.append([b.data_ptr() for b in kept._buffers if b is not None])
    assert buffers[1:] == buffers[:-1]  # the first step's buffers served every later one


def test_the_two_level_search_picks_the_token_at_the_uniform() -> None:
    """Blocks, then a token within its block: the token whose interval of the float64 running sum
    holds u x total, to within 1e-6 of the mass (the block sums are float32), over SmolLM2's
    vocabulary size and one that is not a multiple of the block, with whole blocks and single
    tokens of zero mass, on thousands of uniforms; a masked token never."""
    generator = torch.Generator().manual_seed(0)
    for vocabulary in (7 * BLOCK + 37, 49_152):
        probs = torch.softmax(torch.randn(64, vocabulary, generator=generator) * 3, dim=-1)
        probs[:, BLOCK : 3 * BLOCK] = 0.0  # whole blocks masked
        probs[probs < 1e-6] = 0.0  # scattered masked tokens
        probs[:, -1] = 0.0  # the last token masked: a target at the total must not land on it
        cumulative = torch.cumsum(probs, dim=-1, dtype=torch.float64)
        for _ in range(40):
            uniforms = torch.rand(64, generator=generator, dtype=torch.float64)
            uniforms[:3] = torch.tensor([0.0, 1.0 - 2.0**-53, 1e-12], dtype=torch.float64)
            picked = inverse_cdf(probs, uniforms)[:, None]
            assert bool((probs.gather(-1, picked) > 0).all())
            target = uniforms[:, None] * cumulative[:, -1:]
            upper = cumulative.gather(-1, picked)
            lower = upper - probs.gather(-1, picked).double()
            assert bool(((lower - 1e-6 <= target) & (target <= upper + 1e-6)).all())
