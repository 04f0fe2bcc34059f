"""Transformers backend specifics: shared prefill for the n samples of a prompt changes nothing but speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from training.replay.samplers import decode_loop, head_buffer, make_sampler
from training.replay.samplers.base import SampleRequest, SamplingParams
from training.replay.samplers.hf import cached_width
from training.replay.samplers.shared_prefix import prefix_groups


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_shared_prefill_matches_per_row_prefill(tiny_model: Path, temperature: float) -> None:
    shared = make_sampler("transformers", str(tiny_model), share_prefill=True)
    plain = make_sampler("transformers", str(tiny_model), share_prefill=False)
    tok = shared.tokenizer
    long = tuple(
        tok.encode("<|im_start|>user\nWhat is 12 * 7? Use the calculator.<|im_end|>\n<|im_start|>assistant\n")
    )
    short = tuple(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    params = SamplingParams(max_tokens=8, temperature=temperature, seed=11)
    requests = [
        SampleRequest(long, 3, params),
        SampleRequest(short, 2, params),
        SampleRequest(long[:-4], 1, params),
    ]
    a, b = shared.generate(requests), plain.generate(requests)
    for group_a, group_b in zip(a, b, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert x.token_ids == y.token_ids  # same seed, same distribution: same samples
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_a_sample_depends_on_its_seed_not_its_batch(tiny_model: Path) -> None:
    """Seeded requests get the same tokens alone or batched with others, and sample `j` of a request
    with seed `s` is the request for one sample with seed `s + j` (vLLM's convention)."""
    sampler = make_sampler("transformers", str(tiny_model))
    tok = sampler.tokenizer
    prompt = tuple(tok.encode("<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n"))
    other = tuple(tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    params = SamplingParams(max_tokens=10, temperature=1.0, seed=21)
    (alone,) = sampler.generate([SampleRequest(prompt, 3, params)])
    batched = sampler.generate(
        [
            SampleRequest(other, 2, params.with_seed(4)),
            SampleRequest(prompt, 3, params),
            SampleRequest(prompt[:-3], 1, params.with_seed(None)),
        ]
    )[1]
    one_by_one = [
        c
        for seed in (21, 22, 23)
        for c in sampler.generate([SampleRequest(prompt, 1, params.with_seed(seed))])[0]
    ]
    for x, y, z in zip(alone, batched, one_by_one, strict=True):
        assert x.token_ids == y.token_ids == z.token_ids
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4) and x.logprobs == pytest.approx(
            z.logprobs, abs=1e-4
        )
    # One prompt, three seeds: three different samples (the diversity a GRPO group needs).
    assert len({c.token_ids for c in alone}) == 3


def test_greedy_leaves_the_global_generator_alone(tiny_model: Path) -> None:
    import torch

    sampler = make_sampler("transformers", str(tiny_model))
    prompt = tuple(sampler.tokenizer.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))
    before = torch.get_rng_state()
    sampler.generate([SampleRequest(prompt, 2, SamplingParams(max_tokens=4, temperature=0.0))])
    assert torch.equal(before, torch.get_rng_state())


def _random_adapter(tiny_model: Path, folder: Path, seed: int, **lora: object) -> Path:
    """A LoRA adapter with random (non-zero) weights: sampling through it changes the output."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(init_lora_weights=False, **lora)
    )
    peft_model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapter_path(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("adapter") / "v1"
    return _random_adapter(
        tiny_model, folder, 0, r=8, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"]
    )


SYSTEM = (
    "<|im_start|>system\nYou are a careful math assistant. Use the calculator tool when needed. "
    "Tools: calculator(expression) evaluates integer arithmetic.<|im_end|>\n"
)


def _turns(tok: object) -> list[tuple[int, ...]]:
    encode = tok.encode  # type: ignore[attr-defined]
    return [
        tuple(encode(f"{SYSTEM}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"))
        for q in ("What is 12 * 7?", "What is 3 + 4 * 2? Use the calculator.", "Hi")
    ]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
@pytest.mark.parametrize("with_adapter", [False, True])
def test_shared_prefix_decode_matches_generate_over_turns(
    tiny_model: Path, adapter_path: Path, temperature: float, with_adapter: bool
) -> None:
    """The shared-prefix decode samples what `generate` samples, ids and logprobs, on a first turn
    (prompts sharing a system prompt, `n` rows each) and on the next turn, whose prompts extend
    the first turn's by its completions and a tool result (the stored prefix reused)."""
    adapter = str(adapter_path) if with_adapter else None
    shared = make_sampler("transformers", str(tiny_model), adapter=adapter)
    plain = make_sampler("transformers", str(tiny_model), adapter=adapter, shared_prefix=False)
    assert shared.shared_prefix and not plain.shared_prefix  # type: ignore[attr-defined]
    tok = shared.tokenizer
    params = SamplingParams(max_tokens=10, temperature=temperature, seed=5)
    first = [
        SampleRequest(p, n, params.with_seed(40 + n)) for p, n in zip(_turns(tok), (3, 2, 1), strict=True)
    ]
    a, b = shared.generate(first), plain.generate(first)
    _assert_same(a, b)
    tool = tuple(
        tok.encode(
            "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
    )
    second = [
        SampleRequest(request.prompt_ids + c.token_ids + tool, 1, params.with_seed(90 + k))
        for request, group in zip(first, a, strict=True)
        for k, c in enumerate(group)
    ]
    _assert_same(shared.generate(second), plain.generate(second))
    assert len(shared.prefixes) == 1  # type: ignore[attr-defined]  # the second turn reused the system prompt's cache


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_batch_under_several_system_prompts_shares_each_prefix(
    tiny_model: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts under two system prompts, interleaved in one batch (a lake of an agent whose prompt
    was edited): each system prompt's rows share its cache (one stored prefix each, where one
    batch-wide prefix would be the chat template's first tokens only), all rows decode in the
    same steps (each run of rows attending its own prefix), and they sample what `generate`
    samples, each row in its request's place."""
    batches: list[int] = []  # the rows of each decode step
    forward = decode_loop.forward

    def recording(model: Any, cache_kwarg: str, cache: Any, **inputs: Any) -> Any:
        if inputs["input_ids"].shape[1] == 1:
            batches.append(inputs["input_ids"].shape[0])
        return forward(model, cache_kwarg, cache, **inputs)

    monkeypatch.setattr(decode_loop, "forward", recording)
    shared = make_sampler("transformers", str(tiny_model))
    plain = make_sampler("transformers", str(tiny_model), shared_prefix=False)
    tok = shared.tokenizer
    other = SYSTEM.replace("You are a careful math assistant.", "Bookkeeping app: check all sums.")
    prompts = [
        tuple(tok.encode(f"{system}<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"))
        for q, system in zip(
            ("What is 12 * 7?", "What is 9 - 4?", "Hi", "What is 3 + 4 * 2?"),
            (SYSTEM, other, SYSTEM, other),
            strict=True,
        )
    ]
    params = SamplingParams(max_tokens=10, temperature=temperature, seed=5)
    requests = [SampleRequest(p, 2, params.with_seed(10 * k)) for k, p in enumerate(prompts)]
    _assert_same(shared.generate(requests), plain.generate(requests))
    assert len(shared.prefixes) == 2  # type: ignore[attr-defined]
    assert batches[0] == 8  # the first step: all 4 requests x 2 samples, under both prompts
    assert len(batches) < 10  # one decode loop of at most 10 tokens, not one per system prompt


def test_the_lm_heads_reused_buffer_samples_what_fresh_logits_sample(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every decode step's logits written into the decoder's one buffer (`HeadBuffer`; here
    at any size, not only past glibc's mmap threshold) each row samples what it samples with
    fresh logits a step, over two turns, rows finishing and joining; the head's own forward is
    back afterwards."""
    made: list[head_buffer.HeadBuffer] = []

    class Recorded(head_buffer.HeadBuffer):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    fresh = make_sampler("transformers", str(tiny_model))
    tok = fresh.tokenizer
    params = SamplingParams(max_tokens=10, temperature=0.9, seed=5)
    first = [
        SampleRequest(p, n, params.with_seed(40 + n)) for p, n in zip(_turns(tok), (3, 2, 1), strict=True)
    ]
    tool = tuple(
        tok.encode(
            "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
    )

    def both_turns(sampler: Any) -> list:
        a = sampler.generate(first)
        second = [
            SampleRequest(request.prompt_ids + c.token_ids + tool, 1, params.with_seed(90 + k))
            for request, group in zip(first, a, strict=True)
            for k, c in enumerate(group)
        ]
        return [*a, *sampler.generate(second)]

    expected = both_turns(fresh)
    monkeypatch.setattr(head_buffer, "MMAP_THRESHOLD_MAX", 0)
    monkeypatch.setattr(decode_loop, "HeadBuffer", Recorded)
    buffered = make_sampler("transformers", str(tiny_model))
    _assert_same(both_turns(buffered), expected)
    assert made and all(head._buffer is not None for head in made)  # every decoder wrote its steps there
    head = buffered._load().get_output_embeddings()  # type: ignore[attr-defined]
    assert "forward" not in vars(head)  # the class's forward again (packing's, too, has left)


def test_prompts_group_by_the_prefix_they_share() -> None:
    system_a, system_b = (1,) * 30, (1, 1, 1, 1, *(2,) * 26)  # the same template head, then apart
    prompts = [(*system_a, 5), (*system_b, 6), (*system_a, 7, 8), (*system_b, 6), system_a[:10]]
    assert prefix_groups(prompts) == [[0, 2], [1, 3], [4]]
    assert prefix_groups([system_a]) == [[0]]


def _assert_same(a: list, b: list) -> None:
    for group_a, group_b in zip(a, b, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert x.token_ids == y.token_ids
            assert x.finish_reason == y.finish_reason
            assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


def test_the_prefix_cache_is_kept_per_adapter(tiny_model: Path, adapter_path: Path) -> None:
    """The base model and an adapter never share a prefix's cache: each call samples what a
    fresh sampler samples, and the store holds one entry per adapter."""
    sampler = make_sampler("transformers", str(tiny_model))
    params = SamplingParams(max_tokens=8, temperature=0.9, seed=2)
    prompts = _turns(sampler.tokenizer)
    base = [SampleRequest(p, 2, params) for p in prompts]
    tuned = [SampleRequest(p, 2, params, str(adapter_path)) for p in prompts]
    base_out = sampler.generate(base)
    tuned_out = sampler.generate(tuned)
    assert len(sampler.prefixes) == 2  # type: ignore[attr-defined]
    assert [c.token_ids for g in tuned_out for c in g] != [c.token_ids for g in base_out for c in g]
    fresh = make_sampler("transformers", str(tiny_model))
    _assert_same(tuned_out, fresh.generate(tuned))
    _assert_same(sampler.generate(base), base_out)  # the base model after the adapter: its own cache


def test_batches_are_bounded_by_rows_and_kv_cache_slots(tiny_model: Path) -> None:
    short = [(0, (1,) * 10, 0)] * 6  # 10 + 10 tokens a row: the row limit binds
    long = [(1, (2,) * 40, 0)] * 3  # 40 + 10 a row: two rows fill 100 slots
    former = make_sampler(
        "transformers", str(tiny_model), max_batch_rows=4, max_batch_tokens=100, shared_prefix=False
    )
    chunks = former._chunks(short + long, 10)  # type: ignore[attr-defined]
    assert [len(c) for c in chunks] == [4, 2, 2, 1]  # a long row joins no batch it would overfill
    assert all(len(c) * (max(len(r[1]) for r in c) + 10) <= 100 for c in chunks)

    # Cascade attention: a row's cache holds its prompt past the prefix its batch shares, so
    # three rows of one 40-token prompt hold ~9 tokens each (their prefix is read once)...
    shared = make_sampler("transformers", str(tiny_model), max_batch_rows=4, max_batch_tokens=100)
    chunks = shared._chunks(short + long, 10)  # type: ignore[attr-defined]
    assert [len(c) for c in chunks] == [4, 4, 1]
    assert all(len(c) * (cached_width(list({r[1]: 0 for r in c})) + 10) <= 100 for c in chunks)
    # ... while prompts that part after 30 shared tokens hold their own 10 and the 8 a stored
    # prefix may lack: 3 rows of 18 + 10 fit in 100 slots, a 4th does not
    parting = [(k, (7,) * 30 + tuple(range(100 * k, 100 * k + 10)), 0) for k in range(4)]
    assert cached_width([r[1] for r in parting]) == 18
    assert [len(c) for c in shared._chunks(parting, 10)] == [3, 1]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def second_adapter_path(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another random adapter, on the MLP as well: a switch between two adapters."""
    folder = tmp_path_factory.mktemp("adapter") / "v2"
    return _random_adapter(
        tiny_model, folder, 1, r=4, lora_alpha=32, target_modules=["q_proj", "gate_proj", "down_proj"]
    )


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_a_merged_adapter_samples_what_peft_samples(
    tiny_model: Path, adapter_path: Path, second_adapter_path: Path, shared_prefix: bool
) -> None:
    """Sampling through an adapter merged into copies of the weights gives PEFT's own forward's
    ids and logprobs, greedy and sampled, whichever adapter (or none) was selected before."""
    merged = make_sampler("transformers", str(tiny_model), shared_prefix=shared_prefix)
    peft = make_sampler("transformers", str(tiny_model), shared_prefix=shared_prefix, merge_adapters=False)
    prompts = _turns(merged.tokenizer)
    for temperature in (0.0, 0.9):
        params = SamplingParams(max_tokens=10, temperature=temperature, seed=3)
        for adapter in (str(adapter_path), None, str(second_adapter_path), str(adapter_path)):
            requests = [SampleRequest(p, 2, params, adapter) for p in prompts]
            _assert_same(merged.generate(requests), peft.generate(requests))
    assert merged._merged.selected is not None  # type: ignore[attr-defined]  # the merge ran
    assert peft._merged.selected is None  # type: ignore[attr-defined]


def test_merging_never_writes_the_base_weights(tiny_model: Path, adapter_path: Path) -> None:
    """After sampling through two adapters in turn, the base weights are the loaded ones bit for
    bit (a merge and unmerge in place would leave rounding behind), and no adapter's delta is
    left in the model while another, or none, is selected."""
    import torch
    from transformers import AutoModelForCausalLM

    sampler = make_sampler("transformers", str(tiny_model))
    prompt = _turns(sampler.tokenizer)[0]
    params = SamplingParams(max_tokens=4, temperature=0.0)
    base_before = sampler.generate([SampleRequest(prompt, 1, params)])
    for _ in range(3):
        sampler.generate([SampleRequest(prompt, 1, params, str(adapter_path))])
        after = sampler.generate([SampleRequest(prompt, 1, params)])
        assert after[0][0].logprobs == base_before[0][0].logprobs  # exactly: the base weights are back
    loaded = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    for name, weight in sampler._peft.get_base_model().state_dict().items():  # type: ignore[attr-defined]
        key = name.replace(".base_layer", "")
        if "lora_" not in name:
            assert torch.equal(weight, loaded[key]), name


def test_16_bit_weights_stack_the_adapter_and_sample_what_peft_samples(
    tiny_model: Path, adapter_path: Path
) -> None:
    """In bfloat16 the adapter is stacked under the weights, not merged into their last bit: the
    stacked forward's logits stay within a tenth of the adapter's effect of PEFT's own forward, on
    every prompt teacher-forced on what PEFT sampled, and deselecting it gives the base model's
    logprobs back exactly.

    Not the sampled tokens themselves: the tiny model's logits are nearly flat, and where two
    tokens tie to within bfloat16's rounding, AMX (Intel) and AVX512-BF16 (AMD) kernels break
    the tie differently (greedy token 101 against 423 on a Xeon with AMX)."""
    import torch

    stacked = make_sampler("transformers", str(tiny_model), dtype="bfloat16")
    peft = make_sampler("transformers", str(tiny_model), dtype="bfloat16", merge_adapters=False)
    prompts = _turns(stacked.tokenizer)
    params = SamplingParams(max_tokens=6, temperature=0.0)
    tuned = [SampleRequest(p, 1, params, str(adapter_path)) for p in prompts]
    base = [SampleRequest(p, 1, params) for p in prompts]
    base_before = stacked.generate(base)
    ours, theirs = stacked.generate(tuned), peft.generate(tuned)
    assert stacked._merged.selected is not None  # type: ignore[attr-defined]  # the stacking ran
    assert stacked._peft.get_base_model().model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16  # type: ignore[attr-defined]
    for a, plain in zip(ours, base_before, strict=True):
        assert a[0].token_ids != plain[0].token_ids or a[0].logprobs != plain[0].logprobs
    _assert_exact(stacked.generate(base), base_before)  # hooks and stacked weights are gone
    # teacher-forced on PEFT's tokens: the stacked delta is the adapter's, not rounded into W
    for prompt, sampled in zip(prompts, theirs, strict=True):
        sequence = torch.tensor([list(prompt) + list(sampled[0].token_ids)])
        with torch.inference_mode():
            model, context = stacked._model_for(str(adapter_path))  # type: ignore[attr-defined]
            with context:
                stacked_logits = model(input_ids=sequence).logits.float()
            model, context = peft._model_for(str(adapter_path))  # type: ignore[attr-defined]
            with context:
                peft_logits = model(input_ids=sequence).logits.float()
            model, context = stacked._model_for(None)  # type: ignore[attr-defined]
            with context:
                base_logits = model(input_ids=sequence).logits.float()
        gap = (stacked_logits - peft_logits).abs().max().item()
        assert gap < 0.1 * (peft_logits - base_logits).abs().max().item()


def _assert_exact(a: list, b: list) -> None:
    for group_a, group_b in zip(a, b, strict=True):
        for x, y in zip(group_a, group_b, strict=True):
            assert (x.token_ids, x.logprobs) == (y.token_ids, y.logprobs)


def test_the_configured_dtype_is_the_one_the_model_samples_in(tiny_model: Path) -> None:
    """`sampler.dtype` reaches the transformers backend; unset, a CPU samples in float32."""
    from training.replay.samplers import SamplerConfig

    assert SamplerConfig(model=str(tiny_model), dtype="bfloat16").build().dtype == "bfloat16"
    assert SamplerConfig(model=str(tiny_model)).build().dtype == "float32"


def test_a_16_bit_dtype_this_cpu_only_emulates_is_warned_about(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bfloat16 on a CPU without AVX512-BF16 or AMX is emulated (0.3 GFLOP/s on a Zen 3 EPYC):
    the sampler says so at load, and still samples; float32 and native bfloat16 say nothing."""
    import platform
    import warnings

    import torch

    from training.replay.samplers import SamplerConfig

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")  # judged on x86 only
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    with pytest.warns(UserWarning, match=r"sampler\.dtype bfloat16: this CPU has no bfloat16 matmul"):
        assert SamplerConfig(model=str(tiny_model), dtype="bfloat16").build().dtype == "bfloat16"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="sampler.dtype")
        assert SamplerConfig(model=str(tiny_model), dtype="float32").build().dtype == "float32"
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
        assert SamplerConfig(model=str(tiny_model), dtype="bfloat16").build().dtype == "bfloat16"
