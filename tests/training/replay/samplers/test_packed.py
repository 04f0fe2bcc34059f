"""Linear layers on MKL-packed weights: the products `F.linear` gives, and the sampler's tokens unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from training.replay.samplers import make_sampler, packed
from training.replay.samplers.base import SampleRequest, SamplingParams

pytestmark = pytest.mark.skipif(
    not packed.available(), reason="this torch build has no MKL (packed weights are an x86 MKL feature)"
)


@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_layer_multiplies_any_number_of_rows_as_f_linear_does(bias: bool) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(96, 320, bias=bias)
    packs = packed.PackedLinears()
    for rows in (1, 7, 300):
        x = torch.randn(rows, 2, 96)  # [rows, tokens, features]: rows x 2 products
        with torch.inference_mode():
            want = torch.nn.functional.linear(x, layer.weight, layer.bias)
            with packs.forwarding(layer):
                got = layer(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert layer.weight in packs._packs  # the product came from the pack
    assert "forward" not in vars(layer)  # the class's forward is back after the context


def test_a_weight_written_in_place_is_packed_again() -> None:
    torch.manual_seed(1)
    layer = torch.nn.Linear(64, 64, bias=False)
    packs = packed.PackedLinears()
    x = torch.randn(5, 64)
    with torch.inference_mode(), packs.forwarding(layer):
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2)  # an optimizer step would write the same tensor
    with torch.inference_mode(), packs.forwarding(layer):
        after = layer(x)
    torch.testing.assert_close(after, 2 * before, rtol=1e-5, atol=1e-5)


def test_with_gradients_on_a_layer_keeps_f_linear() -> None:
    """Packs are for sampling: under autograd the layer runs `F.linear`, and its weight gets a gradient."""
    layer = torch.nn.Linear(16, 8)
    packs = packed.PackedLinears()
    with packs.forwarding(layer):
        layer(torch.randn(3, 16)).sum().backward()
    assert layer.weight.grad is not None and not packs._packs


@pytest.mark.parametrize("adapter", [False, True])
def test_the_sampler_draws_the_same_tokens_on_packed_weights(
    tiny_model: Path, tmp_path: Path, adapter: bool
) -> None:
    """Packed or not, the shared-prefix decode samples the same ids with the same logprobs (up to
    the rounding of another summation order), through the base model and a merged adapter, whose
    merged weights are packed as new tensors."""
    from tests.training.replay.samplers.test_hf import _random_adapter, _turns

    path = (
        str(_random_adapter(tiny_model, tmp_path / "a", 3, r=8, target_modules=["q_proj", "down_proj"]))
        if adapter
        else None
    )
    on = make_sampler("transformers", str(tiny_model), adapter=path)
    off = make_sampler("transformers", str(tiny_model), adapter=path, pack_weights=False)
    params = SamplingParams(max_tokens=12, temperature=0.9, seed=7)
    requests = [SampleRequest(p, 3, params.with_seed(20 + i)) for i, p in enumerate(_turns(on.tokenizer))]
    a, b = on.generate(requests), off.generate(requests)
    for group_a, group_b in zip(a, b, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert x.token_ids == y.token_ids
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
    model = on._load()  # type: ignore[attr-defined]
    packs = on._packed._packs  # type: ignore[attr-defined]
    assert off._packed is None and model.lm_head.weight in packs  # type: ignore[attr-defined]
    q_proj = model.model.layers[0].self_attn.q_proj
    if adapter:  # the merged weight (not the base's) was multiplied through its pack
        assert on._merged.selected is not None and q_proj.weight in packs  # type: ignore[attr-defined]
    else:
        assert q_proj.weight in packs
