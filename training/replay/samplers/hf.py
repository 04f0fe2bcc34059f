"""The `transformers` backend: batched decoding on CPU or GPU, the embedded default.

Requests that share sampling parameters (the seed and temperature aside: each row draws at its
own, greedy rows beside sampled ones) and adapter are run as one batch,
each prompt repeated `n` times (up to `max_batch_rows` rows and `max_batch_tokens` KV-cache
slots a batch). By default the batch
runs the shared-prefix decode (`shared_prefix.py`): the prefix each group of rows shares (a
system prompt and tool definitions) is forwarded once and its KV cache kept for the next
batches, each distinct prompt's rest once for its `n` rows, and finished rows leave the
batch: each request is answered as soon as its samples are done, and a request that arrives
meanwhile (a rollout's next turn) joins the running batch (continuous batching,
`Sampler.stream`). `shared_prefix=False` runs the former path (`generate_path.py`), one left-padded `generate` call whose
rows of one prompt share its prefill (`share_prefill`). Both sample the same tokens: every
row draws from its own seeded generator (`seeded.SeededSampling`): sample `j` of a request
with seed `s` uses `s + j`, as vLLM does, and draws the same noise whatever else shares its
batch (the same tokens, up to floating-point differences of batched logits). Log-probabilities
are the processed ones, of the distribution each token was drawn from (after temperature,
top-k and top-p). A finished row is cut right after its first EOS (the EOS is kept: it was
sampled); padding is never returned.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from training.models.known import resolve_model
from training.models.precision import sampling_dtype
from training.replay.errors import SamplerError
from training.replay.samplers.base import (
    Completion,
    Deliver,
    More,
    Sampler,
    SampleRequest,
    SamplingParams,
    adapter_name,
)

if TYPE_CHECKING:
    from training.replay.samplers.decode_loop import Joiner

# One row of a batch: the request it answers, its prompt, its seed, its temperature.
Row = tuple[int, tuple[int, ...], int, float]


# transformers' loading is not thread-safe (its meta-device init is process-wide): two samplers
# loading at once in one process (replay shards on a thread runner) got meta tensors.
LOADING = threading.Lock()


class TransformersSampler(Sampler):
    """Sample with a Hugging Face causal LM (`AutoModelForCausalLM`), optionally through PEFT LoRA adapters."""

    backend = "transformers"
    # Requests gathered into one batch: rows and KV-cache slots bound what runs at once
    # (`_chunks`), so the micro-batcher may hand over more than 64 requests (an evaluation's
    # 64 sampled groups and their 64 greedy samples, decoded in the same steps).
    max_batch_requests = 256

    def __init__(
        self,
        model: str,
        *,
        adapter: str | None = None,
        tokenizer: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_rows: int = 512,
        max_batch_tokens: int = 131_072,
        share_prefill: bool = True,
        shared_prefix: bool = True,
        merge_adapters: bool = True,
        pack_weights: bool = True,
    ) -> None:
        super().__init__(model, adapter=adapter, tokenizer=tokenizer)
        self.share_prefill = share_prefill
        self.shared_prefix = shared_prefix
        self.continuous = shared_prefix  # `generate`'s batches cannot take rows while they run
        # Sample through a LoRA adapter with its delta merged into copies of float32 base weights,
        # or stacked under 16-bit ones (`merged.py`); False: PEFT's forward, base and adapter apart.
        self.merge_adapters = merge_adapters
        # Float32 linear layers on a CPU multiply through weights packed once for MKL (`packed.py`),
        # on the shared-prefix path; False: `F.linear`, which packs each weight on every call.
        self.pack_weights = pack_weights
        self._packed: Any = None  # a `packed.PackedLinears`, made with the first batch
        self.prefixes: Any = (
            None  # a `shared_prefix.PrefixStore`, made with the first batch (torch loads then)
        )
        self.device_name = device
        self.dtype_name = dtype
        self.max_batch_rows = max_batch_rows
        # KV-cache slots a batch may hold: 256 rows of ~500 tokens (SmolLM2: ~6 GB in fp32); a round of
        # 24 scenarios x 16 samples of ~300 tokens (384 rows) is one batch.
        self.max_batch_tokens = max_batch_tokens
        self._model: Any = None
        self._peft: Any = None
        self._merged: Any = None  # a `merged.MergedAdapters` over `_peft`
        self._loaded_adapters: dict[str, str] = {}
        self._cache_kwarg = "cache"  # the KV-cache argument's name in this transformers (set on load)
        # generate() is not re-entrant on one model; the micro-batcher already serialises, direct callers may not.
        self._lock = threading.Lock()

    @property
    def dtype(self) -> str:  # type: ignore[override]  # the base's field, loaded lazily here
        """The loaded model's precision (loads it)."""
        return str(self._load().dtype).removeprefix("torch.")

    # --- loading ------------------------------------------------------------------------

    def _load(self) -> Any:
        if self._model is None:
            import torch
            from transformers import AutoModelForCausalLM

            device = self.device_name or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype = sampling_dtype(self.dtype_name, device)
            try:
                with LOADING:
                    model = AutoModelForCausalLM.from_pretrained(resolve_model(self.model), dtype=dtype)
            except OSError as exc:
                raise SamplerError(
                    f"cannot load model `{self.model}`: {exc}; pass a local model folder "
                    "(e.g. one built by `trajlake tiny-model PATH`)",
                    backend=self.backend,
                    reason="model_not_found",
                ) from exc
            self._model = model.to(device).eval()  # type: ignore[arg-type]  # transformers' stub wants a model
            self._cache_kwarg = cache_kwarg(self._model)
        return self._model

    def _model_for(self, adapter: str | None) -> tuple[Any, Any]:
        """The module to call generate on, and a context manager selecting the adapter."""
        import contextlib

        model = self._load()
        if adapter is None:
            if self._peft is None:
                return model, contextlib.nullcontext()
            self._merged.select(None)
            return self._peft, self._peft.disable_adapter()
        name = adapter_name(adapter)
        if name not in self._loaded_adapters:
            try:
                from training.models.adapters import peft_wrapping

                with peft_wrapping():  # PEFT probes a deprecated transformers property here
                    if self._peft is None:
                        from peft import PeftModel

                        from training.replay.samplers.merged import MergedAdapters

                        self._peft = PeftModel.from_pretrained(model, adapter, adapter_name=name).eval()
                        self._merged = MergedAdapters(self._peft)
                    else:
                        self._peft.load_adapter(adapter, adapter_name=name)
            except (OSError, ValueError) as exc:
                raise SamplerError(
                    f"cannot load LoRA adapter `{adapter}`: {exc}; it should be a folder with "
                    "`adapter_config.json` and `adapter_model.safetensors`",
                    backend=self.backend,
                    reason="adapter_not_found",
                ) from exc
            self._loaded_adapters[name] = adapter
        self._peft.set_adapter(name)
        if self.merge_adapters and self._merged.mergeable(name):  # one large matmul a layer, not three
            self._merged.select(name)
            return self._peft, self._peft.disable_adapter()
        self._merged.select(None)
        return self._peft, contextlib.nullcontext()

    # --- sampling -----------------------------------------------------------------------

    def _generate(self, requests: Sequence[SampleRequest]) -> list[list[Completion]]:
        results: dict[int, list[Completion]] = {}
        self._stream(list(enumerate(requests)), lambda select: [], results.__setitem__)
        return [results[i] for i in range(len(requests))]

    def _stream(self, requests: Sequence[tuple[int, SampleRequest]], more: More, deliver: Deliver) -> None:
        """Sample `requests` (by key) and answer each through `deliver` as soon as its samples
        are done; while the last batch decodes, waiting requests it can take (`more`: a
        rollout's next turn, with the same parameters and adapter) join it (continuous batching,
        on the shared-prefix path with cascade attention)."""
        groups: dict[tuple[SamplingParams, str | None], list[tuple[int, SampleRequest]]] = {}
        for key, request in requests:  # seeds and temperatures are per row: they never split a batch
            groups.setdefault((_batch_key(request), request.adapter), []).append((key, request))
        answers = _Answers(deliver)
        with self._lock:
            for number, ((params, adapter), members) in enumerate(groups.items()):
                asked = dict(members)
                rows: list[Row] = []
                samples: list[int] = []
                for key, request in members:
                    answers.expect(key, request.n)
                    for j, seed in enumerate(_row_seeds(request)):
                        rows.append((key, request.prompt_ids, seed, request.params.temperature))
                        samples.append(j)
                chunks = self._chunks(rows, params.max_tokens)
                start = 0
                for place, chunk in enumerate(chunks):
                    last = number == len(groups) - 1 and place == len(chunks) - 1
                    self._run(
                        chunk,
                        params,
                        adapter,
                        [asked[key].cancel for key, *_ in chunk],
                        answers=answers,
                        samples=samples[start : start + len(chunk)],
                        more=more if last else None,
                    )
                    start += len(chunk)

    def _chunks(self, rows: list[Row], max_tokens: int) -> list[list[Row]]:
        """Consecutive rows, at most `max_batch_rows` a batch and at most `max_batch_tokens` KV-cache
        slots (rows x (the widest row's cached tokens + `max_tokens`)): long prompts make smaller
        batches. Where the shared-prefix decode attends one copy of each shared prefix (cascade
        attention), a row's cache holds only what follows its prefix (`cached_width`); counting
        whole prompts there split a round's 384 rows of ~280-token prompts in two batches, the
        second of 8 rows decoding alone after the first."""
        suffixes = self._holds_suffixes()

        def fits(rows: int, width: int) -> bool:
            return rows * (width + max_tokens) <= self.max_batch_tokens

        chunks: list[list[Row]] = []
        chunk: list[Row] = []
        distinct: dict[tuple[int, ...], None] = {}
        longest = 0  # the chunk's longest prompt: a bound on any row's cached tokens
        exact, exact_of = 0, -1  # the cached width, and for how many distinct prompts it was found
        for row in rows:
            new = row[1] not in distinct
            wider = max(longest, len(row[1]))
            if suffixes and chunk and not fits(len(chunk) + 1, wider):  # the bound is not enough: count
                if exact_of != len(distinct) + new:
                    exact, exact_of = (
                        cached_width([*distinct, *([row[1]] if new else [])]),
                        len(distinct) + new,
                    )
                wider = exact
            if chunk and (len(chunk) >= self.max_batch_rows or not fits(len(chunk) + 1, wider)):
                chunks.append(chunk)
                chunk, distinct, exact_of = [], {}, -1
                wider = len(row[1])
            chunk.append(row)
            distinct[row[1]] = None
            longest = max(longest, len(row[1])) if len(chunk) > 1 else len(row[1])
        return [*chunks, chunk] if chunk else chunks

    def _holds_suffixes(self) -> bool:
        """Whether a batch's cache holds only its rows' tokens past their shared prefix: the
        shared-prefix decode with cascade attention (a full-attention model on `sdpa`)."""
        from training.replay.samplers.cascade import cascades

        return self.shared_prefix and cascades(self._load())

    def _run(
        self,
        rows: list[Row],
        params: SamplingParams,
        adapter: str | None,
        cancels: Sequence[threading.Event | None],
        *,
        answers: _Answers,
        samples: Sequence[int],
        more: More | None,
    ) -> None:
        """One batch: `rows` (`samples`: each one's sample index in its request), each completion
        handed to `answers` as it is done; `more`: requests may join the batch while it runs."""
        import contextlib

        import torch

        from training.replay.samplers import packed
        from training.replay.samplers.seeded import SeededSampling
        from training.replay.samplers.shared_prefix import PrefixStore, sample_rows

        model, adapter_ctx = self._model_for(adapter)
        base = self._load()
        eos = base.generation_config.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        eos_ids += [t for t in params.stop_token_ids if t not in eos_ids]
        pad = base.generation_config.pad_token_id
        pad = pad if pad is not None else eos_ids[0]
        if not self.shared_prefix:
            from training.replay.samplers.generate_path import run_generate

            completions = run_generate(
                model,
                base,
                rows,
                params,
                adapter_ctx,
                eos_ids,
                pad,
                cancels,
                share_prefill=self.share_prefill,
                cache_kwarg=self._cache_kwarg,
            )
            for (key, *_), j, completion in zip(rows, samples, completions, strict=True):
                answers.add(key, j, completion)
            return
        if self.prefixes is None:
            self.prefixes = PrefixStore()
        packing: Any = contextlib.nullcontext()
        if self.pack_weights and packed.available():
            self._packed = self._packed or packed.PackedLinears()
            packing = self._packed.forwarding(model)
        pick = SeededSampling(
            [seed for _, _, seed, _ in rows],
            temperature=[temperature for *_, temperature in rows],
            top_k=params.top_k,
            top_p=params.top_p,
            device=base.device,
        )
        sample_of = {name: (key, j) for name, ((key, *_), j) in enumerate(zip(rows, samples, strict=True))}

        def finished(name: int, completion: Completion) -> None:
            answers.add(*sample_of[name], completion)

        def admit(fits: Callable[[Sequence[int]], bool], room: int, at_least: int) -> list[Joiner]:
            """Waiting requests of this batch's kind whose prompt `fits`: all of `room` rows at
            most, and none unless at least `at_least` rows would join."""

            def select(waiting: Sequence[SampleRequest]) -> list[int]:
                chosen, taken = [], 0
                for i, request in enumerate(waiting):
                    if (
                        (_batch_key(request), request.adapter) == (params, adapter)
                        and taken + request.n <= room
                        and fits(request.prompt_ids)
                    ):
                        chosen.append(i)
                        taken += request.n
                return chosen if taken >= at_least else []

            joiners: list[Joiner] = []
            for key, request in more(select) if more is not None else []:
                answers.expect(key, request.n)
                names = pick.extend(_row_seeds(request), request.params.temperature)
                for j, name in enumerate(names):
                    sample_of[name] = (key, j)
                    joiners.append((name, request.prompt_ids, request.cancel))
            return joiners

        with torch.inference_mode(), adapter_ctx, packing:
            sample_rows(
                model,
                [prompt for _, prompt, *_ in rows],
                pick,
                max_tokens=params.max_tokens,
                eos_ids=eos_ids,
                pad=pad,
                store=self.prefixes,
                adapter=None if adapter is None else adapter_name(adapter),
                cache_kwarg=self._cache_kwarg,
                cancels=cancels,
                admit=admit if more is not None else None,
                finished=finished,
                max_rows=self.max_batch_rows,
            )


class _Answers:
    """What a stream of requests has been answered so far: each request's samples, by key, handed
    to `deliver` (in sample order) the moment its last one is done."""

    def __init__(self, deliver: Deliver) -> None:
        self.deliver = deliver
        self.asked: dict[int, int] = {}
        self.samples: dict[int, dict[int, Completion]] = {}

    def expect(self, key: int, n: int) -> None:
        self.asked[key], self.samples[key] = n, {}

    def add(self, key: int, sample: int, completion: Completion) -> None:
        got = self.samples[key]
        got[sample] = completion
        if len(got) == self.asked[key]:
            del self.samples[key]
            self.deliver(key, [got[j] for j in range(self.asked.pop(key))])


def _batch_key(request: SampleRequest) -> SamplingParams:
    """What rows of one batch share: the sampling parameters but each row's seed and temperature."""
    return dataclasses.replace(request.params, seed=None, temperature=1.0)


def cached_width(prompts: Sequence[tuple[int, ...]]) -> int:
    """The widest of `prompts`' caches in one shared-prefix batch with cascade attention: each
    holds its prompt past its group's shared prefix (`shared_prefix.prefix_groups`), which a
    stored prefix may make up to `max(8, length / 16)` tokens shorter (`prefix_kv`).

    >>> cached_width([(1,) * 40 + (2, 3), (1,) * 40 + (4,)]), cached_width([(5, 6, 7)])
    (10, 3)
    """
    from training.replay.samplers.shared_prefix import MIN_SHARED, common_prefix, prefix_groups

    width = 0
    for group in prefix_groups(prompts):
        members = [prompts[i] for i in group]
        shared = min(common_prefix(members), min(len(p) for p in members) - 1)
        shared = shared - max(8, shared // 16) if shared >= MIN_SHARED else 0
        width = max(width, max(len(p) for p in members) - max(shared, 0))
    return width


def cache_kwarg(model: Any) -> str:
    """The name `forward` and `generate` take the KV cache under: `cache` from transformers 5.2x on.

    The old name, `past_key_values`, warns there (removed in 5.40 for `forward`); older
    releases (vLLM's environment holds transformers below 5.20) know only the old name,
    and would not take a `cache` they do not know for the KV cache.
    """
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _row_seeds(request: SampleRequest) -> list[int]:
    """One seed per sample of `request`; greedy draws no noise, so it leaves torch's generator alone."""
    from training.replay.samplers.seeded import sample_seeds  # torch, loaded with the model

    if request.params.temperature == 0:
        return [0] * request.n
    return sample_seeds(request.params.seed, request.n)
