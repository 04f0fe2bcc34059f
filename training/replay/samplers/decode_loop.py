"""The shared-prefix decode loop, and continuous batching: rows join a batch while it runs.

`shared_prefix.sample_rows` plans a batch (its rows' prefixes, forwarded once and kept) and
hands it to a `Decoder`: the batch's distinct prompts are forwarded once each beside their
prefix (`start`), then every unfinished row gets one token a step (`run`), and finished rows
leave the batch a quarter of it at a time (each drop copies the cache).

Between steps, rows whose prompt extends one of the batch's prefixes (a rollout's next
turn) join it (`admit`): each such group of rows is a cohort of its own, prefilled beside the
running batch, with a cache as wide as its own rows need; a step then writes each cohort's
rows into their own buffers (`buffered_cache.cohort_cache`) and attention reads each cohort
apart (`cascade.cascade_attention`'s `cascade_cohorts`), so no row is ever copied to a common
width. A round's later turns thus decode in the steps of its first, where they decoded after
it in small batches of their own, at 1-9 rows a step costing what ~100 rows do (the weights
are read whatever the rows). Each row's completion is handed on as soon as it is done
(`finished`), so its request is answered, and its rollout goes on, while the batch runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from training.replay.samplers.base import Completion
from training.replay.samplers.buffered_cache import cohort_cache, preallocated_cache
from training.replay.samplers.cascade import PromptRests
from training.replay.samplers.head_buffer import HeadBuffer

KV = list[tuple[Any, Any]]  # per layer: keys and values, [1, kv heads, tokens, head dim]


def forward(model: Any, cache_kwarg: str, cache: Any, head: HeadBuffer | None = None, **inputs: Any) -> Any:
    """The last position's logits (float32) of a forward that fills `cache`; with `head`, the LM
    head writes them into its buffer where they are large (valid until the next such forward)."""
    with head.writing(model) if head is not None else contextlib.nullcontext():
        return model(use_cache=True, logits_to_keep=1, **{cache_kwarg: cache}, **inputs).logits[:, -1].float()


#: A row that joins a running batch: its name (`pick`'s), its prompt, its cancel event.
Joiner = tuple[int, Sequence[int], threading.Event | None]
#: Rows joining a running batch between decode steps (continuous batching):
#: `admit(fits, room, at_least)` takes up to `room` waiting rows whose prompt `fits`, all of a
#: request or none, and only when at least `at_least` such rows wait (else none).
Admit = Callable[[Callable[[Sequence[int]], bool], int, int], list[Joiner]]
#: Told each row's completion as soon as the row finishes.
Finished = Callable[[int, Completion], None]


@dataclass
class _Cohort:
    """Rows that entered a batch together (the batch's own, or rows that joined it at one step):
    their cache (`preallocated_cache`), next positions, `pick`'s names for them in batch order;
    with cascade attention each row's prefix run and its prompt's rest (`PromptRests`), the cache
    holding what the rows sampled; without, the padding mask over the cache's whole rows."""

    cache: Any
    mask: torch.Tensor | None  # without cascade: [rows, tokens], 1 for a real token
    positions: torch.Tensor  # [rows]: the position of each row's next token
    names: list[int]
    prefixes: list[KV]  # cascade: the prefix of each run of rows, in order
    run_of: list[int]  # cascade: each row's run
    rests: PromptRests | None = None  # cascade: the distinct prompts' rests, and each row's

    @property
    def layers(self) -> list[Any]:
        return self.cache.layers  # type: ignore[no-any-return]

    def runs(self) -> list[tuple[KV, int]]:
        """Each prefix with the count of rows attending it (rows lie in runs, one per prefix)."""
        counts = [0] * len(self.prefixes)
        for run in self.run_of:
            counts[run] += 1
        return list(zip(self.prefixes, counts, strict=True))

    def keep(self, kept: list[int]) -> None:
        """Only the rows at `kept` (in order) stay."""
        index = torch.tensor(kept, device=self.positions.device)
        self.cache.batch_select_indices(index)
        self.positions = self.positions[index]
        if self.mask is not None:
            self.mask = self.mask[index]
        self.names = [self.names[i] for i in kept]
        self.run_of = [self.run_of[i] for i in kept] if self.run_of else []
        if self.rests is not None:
            self.rests = self.rests.keep(kept)


class Decoder:
    """A batch's decode loop: its rows' prompts forwarded once per distinct prompt beside their
    prefixes (`start`), then one token per unfinished row a step (`run`), rows joining between
    steps as cohorts of their own (`_join`)."""

    def __init__(
        self,
        model: Any,
        pick: Any,
        *,
        cascade: bool,
        max_tokens: int,
        eos_ids: Sequence[int],
        pad: int,
        cache_kwarg: str,
        cancels: dict[int, threading.Event | None],
        finished: Finished | None,
        prefixes: Sequence[tuple[tuple[int, ...], KV]] = (),
    ) -> None:
        self.model, self.pick, self.cascade = model, pick, cascade
        self.max_tokens, self.eos, self.pad = max_tokens, set(eos_ids), pad
        self.cache_kwarg, self.cancels, self.finished = cache_kwarg, cancels, finished
        # the prefixes rows may join under (cascade): each one's tokens and its cache
        self.prefixes = list(prefixes)
        self.cohorts: list[_Cohort] = []
        self.logits: Any = None  # the next token's logits of every row the cohorts hold, in order
        self.head = HeadBuffer()  # a step's logits; a step's are read before the next overwrites them
        self.tokens: dict[int, list[int]] = {}
        self.logprobs: dict[int, list[float]] = {}
        self.done: dict[int, Completion] = {}

    def start(
        self,
        rows: Sequence[Sequence[int]],
        names: Sequence[int],
        prefixes: Sequence[tuple[list[int], KV | None]],
        prompts: Sequence[tuple[int, ...]],
    ) -> None:
        """The batch's first cohort: `rows` (named `names` for `pick`) under `prefixes` (each
        group of distinct prompts with its prefix's cache; several only with cascade attention),
        `prompts` the distinct prompts in the groups' order, which `rows` follows."""
        index = {prompt: u for u, prompt in enumerate(prompts)}
        owner = [index[tuple(r)] for r in rows]
        cohort, logits = self._prefill(
            prompts, [len(group) for group, _ in prefixes], [kv for _, kv in prefixes]
        )
        self._add(cohort, logits, owner, names, rows)

    def _prefill(
        self, prompts: Sequence[tuple[int, ...]], counts: Sequence[int], kvs: Sequence[KV | None]
    ) -> tuple[_Cohort, Any]:
        """A cohort of the distinct `prompts`, in runs of `counts` under the prefixes `kvs`, with
        each prompt's rest forwarded beside its prefix: the cohort, and each prompt's logits."""
        model, config = self.model, self.model.config
        device = model.device
        # each prompt's shared length: its run's prefix, which a stored one may make a little shorter than asked
        shared_of = [
            0 if kv is None else kv[0][0].shape[-2]
            for kv, n in zip(kvs, counts, strict=True)
            for _ in range(n)
        ]
        width = max(len(p) - s for p, s in zip(prompts, shared_of, strict=True))
        # cascade: the prompts' rests, once each (`PromptRests`); the rows' own cache comes in `_add`
        cache = preallocated_cache(config, width if self.cascade else width + self.max_tokens)
        extra: dict[str, Any] = {}
        # Cascade attention: the cache holds each prompt's rest only, and each prefix's one copy is
        # attended beside it. Otherwise (one group) the prefix's cache is copied to every row and the
        # mask covers it.
        masked = 0
        if self.cascade:
            extra["cascade_prefixes"] = list(zip(kvs, counts, strict=True))
        elif (kv := kvs[0]) is not None:
            masked = shared_of[0]
            cache = preallocated_cache(config, masked + width + self.max_tokens)
            for layer, (k, v) in enumerate(kv):
                cache.update(k.expand(len(prompts), -1, -1, -1), v.expand(len(prompts), -1, -1, -1), layer)
        input_ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), masked + width), dtype=torch.long)
        mask[:, :masked] = 1
        positions = torch.zeros((len(prompts), width), dtype=torch.long)
        for u, (prompt, shared) in enumerate(zip(prompts, shared_of, strict=True)):
            suffix = prompt[shared:]  # [shared | padding | suffix]: position ids count real tokens
            input_ids[u, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[u, masked + width - len(suffix) :] = 1
            positions[u] = shared
            positions[u, width - len(suffix) :] = torch.arange(shared, len(prompt))
        input_ids, mask, positions = input_ids.to(device), mask.to(device), positions.to(device)
        logits = forward(
            model,
            self.cache_kwarg,
            cache,
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            **extra,
        )
        run_of = [run for run, n in enumerate(counts) for _ in range(n)] if self.cascade else []
        prefixes = [kv for kv in kvs if kv is not None] if self.cascade else []
        return _Cohort(cache, mask, positions[:, -1] + 1, [], prefixes, run_of), logits

    def _add(
        self,
        cohort: _Cohort,
        logits: Any,
        owner: Sequence[int],
        names: Sequence[int],
        rows: Sequence[Sequence[int]],
    ) -> None:
        """`cohort` (one row per distinct prompt) as the rows `names` (`owner`: each one's
        prompt, a prompt's rows consecutive). With cascade attention the prompts' cache becomes
        the cohort's rests and the rows get a cache of their own for what they sample; without,
        each prompt's cache is copied to its rows."""
        if self.cascade and cohort.mask is not None:
            cohort.rests = PromptRests(
                cohort.cache.layers, _bias(cohort.mask, self.model.dtype)[:, None, None], list(owner)
            )
            cohort.cache, cohort.mask = preallocated_cache(self.model.config, self.max_tokens), None
        if max(owner) + 1 < len(owner):  # each prompt's logits (and without cascade, its cache) to its rows
            index = torch.tensor(owner, device=logits.device)
            logits = logits[index]
            if cohort.mask is not None:
                cohort.cache.batch_select_indices(index)
                cohort.mask = cohort.mask[index]
        cohort.positions = torch.tensor([len(r) for r in rows], device=logits.device)
        cohort.names = list(names)
        cohort.run_of = [cohort.run_of[u] for u in owner] if cohort.run_of else []
        self.cohorts.append(cohort)
        self.logits = logits if self.logits is None else torch.cat([self.logits, logits])
        for name in names:
            self.tokens[name], self.logprobs[name] = [], []

    def run(self, admit: Admit | None, max_rows: int) -> dict[int, Completion]:
        """Decode until every row is done (and, with `admit`, no waiting row fits): each row's completion by name."""
        cohort_cache_ = cohort_cache(self.model.config, self.cohorts) if self.cascade else None
        since_join = 0
        while True:
            live = [name for cohort in self.cohorts for name in cohort.names]
            picked, chosen = self.pick.choose(None, self.logits, rows=live, idle=self.done.keys())
            for name, token, lp in zip(live, picked.tolist(), chosen.tolist(), strict=True):
                if name in self.done:
                    continue
                self.tokens[name].append(token)
                self.logprobs[name].append(lp)
                if (
                    token in self.eos
                    or len(self.tokens[name]) >= self.max_tokens
                    or _is_set(self.cancels.get(name))
                ):
                    tokens = self.tokens[name]
                    self.done[name] = Completion(
                        tuple(tokens),
                        tuple(self.logprobs[name]),
                        "stop" if tokens[-1] in self.eos else "length",
                    )
                    if self.finished is not None:
                        self.finished(name, self.done[name])
            fed = self._drop_finished(picked)
            unfinished = sum(name not in self.done for cohort in self.cohorts for name in cohort.names)
            joiners: list[Joiner] = []
            if admit is not None and (room := max_rows - sum(len(c.names) for c in self.cohorts)) > 0:
                # a join forwards its rows apart from the step: worth it for a few rows, or after a while
                at_least = 1 if since_join >= JOIN_AFTER_STEPS or not unfinished else max(1, unfinished // 8)
                joiners = admit(self._fits, room, at_least)
            if not unfinished and not joiners:
                return self.done
            self.logits = self._step(fed, cohort_cache_) if unfinished else None
            if not unfinished:
                self.cohorts.clear()
            since_join += 1
            if joiners:
                self._join(joiners)
                since_join = 0

    def _drop_finished(self, picked: Any) -> Any:
        """Rows that finished leave their cohort once a quarter of it has (each drop copies its
        cache); a cohort whose rows all finished goes. Returns the tokens the rows left feed next."""
        fed, at = [], 0
        for cohort in list(self.cohorts):
            tokens = picked[at : at + len(cohort.names)]
            at += len(cohort.names)
            finished = [i for i, name in enumerate(cohort.names) if name in self.done]
            if len(finished) == len(cohort.names):
                self.cohorts.remove(cohort)
                continue
            if len(finished) >= max(1, len(cohort.names) // 4):
                kept = [i for i, name in enumerate(cohort.names) if name not in self.done]
                cohort.keep(kept)
                tokens = tokens[torch.tensor(kept, device=tokens.device)]
            fed.append(tokens)
        return torch.cat(fed) if fed else picked[:0]

    def _step(self, fed: Any, cohort_cache_: Any) -> Any:
        """One decode step of every row the cohorts hold: the next token's logits."""
        positions = torch.cat([cohort.positions for cohort in self.cohorts])
        if self.cascade:
            logits = forward(
                self.model,
                self.cache_kwarg,
                cohort_cache_,
                head=self.head,
                input_ids=fed[:, None],
                position_ids=positions[:, None],
                cascade_cohorts=[(cohort.runs(), cohort.rests) for cohort in self.cohorts],
            )
        else:  # one cohort, never joined
            (cohort,) = self.cohorts
            assert cohort.mask is not None
            cohort.mask = torch.cat([cohort.mask, cohort.mask.new_ones((len(cohort.names), 1))], dim=1)
            logits = forward(
                self.model,
                self.cache_kwarg,
                cohort.cache,
                head=self.head,
                input_ids=fed[:, None],
                attention_mask=cohort.mask,
                position_ids=positions[:, None],
            )
        for cohort in self.cohorts:
            cohort.positions = cohort.positions + 1
        return logits

    def _fits(self, prompt: Sequence[int]) -> bool:
        """Whether a waiting row may join: its prompt extends one of the batch's prefixes."""
        return self._prefix_of(prompt) is not None

    def _prefix_of(self, prompt: Sequence[int]) -> int | None:
        """The longest of the batch's prefixes that `prompt` extends (by at least one token)."""
        best: tuple[int, int] | None = None
        for i, (ids, _) in enumerate(self.prefixes):
            if (
                len(ids) < len(prompt)
                and tuple(prompt[: len(ids)]) == ids
                and (best is None or len(ids) > best[1])
            ):
                best = (i, len(ids))
        return None if best is None else best[0]

    def _join(self, joiners: list[Joiner]) -> None:
        """Rows that join the running batch: a cohort of their own, in runs by prefix, each
        distinct prompt's rest forwarded once beside its prefix; their first token is picked
        with the batch's next."""
        unique: dict[tuple[int, ...], int] = {}
        for _, prompt, _ in joiners:
            unique.setdefault(tuple(prompt), len(unique))
        # runs, by prefix; within one, each prompt's rows together
        joiners = sorted(joiners, key=lambda j: (self._prefix_of(j[1]) or 0, unique[tuple(j[1])]))
        runs = [self._prefix_of(prompt) or 0 for _, prompt, _ in joiners]
        unique = {}
        owner = [unique.setdefault(tuple(prompt), len(unique)) for _, prompt, _ in joiners]
        prompts = list(unique)
        used = sorted(set(runs))
        first_run: dict[tuple[int, ...], int] = {}
        for run, prompt in zip(runs, (tuple(p) for _, p, _ in joiners), strict=True):
            first_run.setdefault(prompt, run)
        counts = [sum(first_run[p] == run for p in prompts) for run in used]
        cohort, logits = self._prefill(prompts, counts, [self.prefixes[run][1] for run in used])
        for name, _, cancel in joiners:
            self.cancels[name] = cancel
        self._add(
            cohort, logits, owner, [name for name, _, _ in joiners], [prompt for _, prompt, _ in joiners]
        )


#: Steps after which one waiting row joins a running batch of any size (sooner, with more).
JOIN_AFTER_STEPS = 8


def _bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A padding mask (1 for a real token) as the attention bias cascade attention adds: 0 or -inf."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask == 0, float("-inf"))


def _is_set(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()
