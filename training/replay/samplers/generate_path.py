"""The transformers backend's former path (`shared_prefix=False`): one left-padded `generate`
call a batch, each prompt prefilled once for its `n` rows (`share_prefill`), each token chosen
by `seeded.SeededSampling` as a logits processor. The bench keeps it as the baseline the
shared-prefix decode is measured against."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from training.replay.samplers.base import Completion, SamplingParams

if TYPE_CHECKING:
    from training.replay.samplers.hf import Row


def run_generate(
    model: Any,
    base: Any,
    rows: Sequence[Row],
    params: SamplingParams,
    adapter_ctx: Any,
    eos_ids: list[int],
    pad: int,
    cancels: Sequence[threading.Event | None],
    *,
    share_prefill: bool,
    cache_kwarg: str,
) -> list[Completion]:
    """One `generate` call over left-padded `rows` (`model`: what to call, the PEFT wrapper
    with an adapter; `base`: the loaded model), each prompt prefilled once for its rows with
    `share_prefill`."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    from training.replay.samplers.seeded import SeededSampling

    width = max(len(prompt) for _, prompt, *_ in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (_, prompt, *_) in enumerate(rows):  # left padding: every row's next token is at `width`
        input_ids[r, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention[r, width - len(prompt) :] = 1
    device = base.device
    pick = SeededSampling(
        [seed for _, _, seed, _ in rows],
        temperature=[temperature for *_, temperature in rows],
        top_k=params.top_k,
        top_p=params.top_p,
        device=device,
    )
    kwargs: dict[str, Any] = {
        # Greedy on the scores `pick` returns: it has chosen each row's token already. The
        # model's own sampling defaults (generation_config) are off; `pick` applies ours.
        "do_sample": False,
        "temperature": None,
        "top_p": None,
        "top_k": None,
        "logits_processor": LogitsProcessorList([pick]),
        "max_new_tokens": params.max_tokens,
        "eos_token_id": eos_ids,
        "pad_token_id": pad,
    }
    if any(cancel is not None for cancel in cancels):
        kwargs["stopping_criteria"] = StoppingCriteriaList([_Abandoned(cancels)])
    input_ids, attention = input_ids.to(device), attention.to(device)
    with torch.inference_mode(), adapter_ctx:
        if share_prefill:
            shared = prefill_once(model, rows, input_ids, attention, cache_kwarg)
            if shared is not None:
                kwargs[cache_kwarg] = shared
        sequences = model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
    generated = sequences[:, width:].tolist()
    logprobs = pick.logprobs
    completions = []
    eos_set = set(eos_ids)
    for tokens, lps in zip(generated, logprobs, strict=True):
        end = next((j + 1 for j, t in enumerate(tokens) if t in eos_set), None)
        if end is None:  # never stopped: every position is a sampled token
            completions.append(Completion(tuple(tokens), tuple(lps[: len(tokens)]), "length"))
        else:
            completions.append(Completion(tuple(tokens[:end]), tuple(lps[:end]), "stop"))
    return completions


def prefill_once(model: Any, rows: Sequence[Row], input_ids: Any, attention: Any, cache_kwarg: str) -> Any:
    """Prefill each distinct prompt once and copy its KV cache to its `n` rows (what vLLM's `n` does).

    `generate` repeats a prompt per sample and would prefill it `n` times. Here the rows of
    one prompt (adjacent: a request's `n` rows) share one forward pass over all but the last
    prompt token; `generate` then starts from that cache and feeds only the last token. Returns
    None when no prompt repeats or the model's cache cannot be re-indexed.
    """
    import torch
    from transformers import DynamicCache

    firsts = [r for r in range(len(rows)) if r == 0 or rows[r][1] != rows[r - 1][1]]
    if (
        len(firsts) == len(rows)
        or input_ids.shape[1] < 2
        or not hasattr(DynamicCache, "batch_select_indices")
    ):
        return None
    owner, current = [], -1
    for r in range(len(rows)):
        current += r == 0 or rows[r][1] != rows[r - 1][1]
        owner.append(current)
    unique_ids, unique_mask = input_ids[firsts, :-1], attention[firsts, :-1]
    positions = (unique_mask.long().cumsum(-1) - 1).clamp(min=0)  # left padding: count real tokens only
    cache = DynamicCache(config=model.config)
    model(
        input_ids=unique_ids,
        attention_mask=unique_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_kwarg: cache},
    )
    cache.batch_select_indices(torch.tensor(owner, device=input_ids.device))
    return cache


class _Abandoned:
    """A stopping criterion: a row whose request was cancelled (its client left, the server
    stops) is finished now, so a batch of abandoned requests ends at the next token."""

    def __init__(self, cancels: Sequence[threading.Event | None]) -> None:
        self.cancels = list(cancels)

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        gone = [cancel is not None and cancel.is_set() for cancel in self.cancels]
        return torch.tensor(gone, dtype=torch.bool, device=input_ids.device)
