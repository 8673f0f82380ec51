"""The speculative decoding loop: draft k, verify in one pass, keep the agreed prefix, repeat.

Without a drafter every round drafts nothing and the loop is plain greedy (or sampled) decoding
with a KV cache, one target pass per token: the reference the speculative runs must equal.

Rows of a batch run in lockstep but keep their own accepted lengths: shorter proposals are padded
(the padding is verified away and rolled back), finished rows leave the batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from whisperspec.speculative.coupled import GumbelNoise
from whisperspec.speculative.lookahead import Fixed
from whisperspec.speculative.protocols import (CachedModel, DraftContext, Drafter, LogitFilter, Proposal,
                                               no_filter)
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.speculative.verifier import verify


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)  # new tokens, end-of-sequence included if produced
    logprobs: list[float] = field(default_factory=list)  # target log-probability of each new token
    from_draft: list[bool] = field(default_factory=list)  # True: accepted from the draft
    stats: SpeculationStats = field(default_factory=SpeculationStats)

    @property
    def sum_logprob(self) -> float:
        return sum(self.logprobs)


def generate(target: CachedModel, tokens: list[int], max_new_tokens: int, eos_token_id: int | None, *,
             logit_filter: LogitFilter = no_filter, on_tokens: Callable[[list[int]], None] | None = None,
             **options) -> Generation:
    """Continue one sequence; the target's cache must already hold `tokens[:-1]`.

    options: drafter, lookahead, temperature, generator (see `generate_batch`).
    """
    on_row_tokens = (lambda row, new: on_tokens(new)) if on_tokens else None
    return generate_batch(target, [tokens], max_new_tokens, eos_token_id, logit_filters=[logit_filter],
                          on_tokens=on_row_tokens, **options)[0]


@torch.inference_mode()
def generate_batch(target: CachedModel, sequences: Sequence[list[int]], max_new_tokens: int | Sequence[int],
                   eos_token_id: int | None, *, drafter: Drafter | None = None, lookahead=None,
                   logit_filters: Sequence[LogitFilter] | None = None, temperature: float = 0.0,
                   generator: torch.Generator | None = None, noise: GumbelNoise | None = None,
                   on_tokens: Callable[[int, list[int]], None] | None = None, held: int | Sequence[int] | None = None,
                   on_prefill: Callable[[int, torch.Tensor], None] | None = None,
                   stop: Callable[[int, list[int]], int | None] | None = None,
                   interrupt: Callable[[], None] | None = None, prefill_logits: int | None = None) -> list[Generation]:
    """Continue every sequence; the target's cache row i must hold `sequences[i][:-1]`, or, with `held`,
    just the first `held` tokens of every row (or `held[i]` of row i): the first round then feeds the
    rest together with the first draft, so a prompt is read in the pass that verifies that draft (one
    target pass fewer), and `on_prefill(row, logits)` receives the logits [n, vocab] of the n tokens fed
    for that row; with `prefill_logits`, of the last `prefill_logits` of them only. A first pass that
    reads a prompt asks the target for no other logits than those and the ones it verifies
    (`target.forward(tokens, logits_to_keep=m)`, which a target given `held` must take): the head of a
    long prompt's earlier positions is work nobody reads. Sequences may differ in length: each row's
    tokens sit at its own positions (shorter rows are padded at the end, and the padding is rolled back
    unread). `max_new_tokens`: one limit for every row, or one per row.

    Sampling (temperature > 0) follows the residual rule with `generator`, or with `noise` coupled
    sampling (`whisperspec.speculative.coupled`: the same tokens with or without a drafter).
    `on_tokens(row, tokens)` receives each round's verified tokens (streaming).
    `stop(row, new_tokens)` may end a row early: it returns the number of new tokens to keep, or
    None to go on. It must decide from the tokens alone (not from where rounds happened to end), so
    a row stops at the same token with or without a drafter.
    `interrupt()` is called before every round: whatever it raises abandons the decode there (a
    request cancelled, or over its time budget), leaving the caches to the next start.
    """
    lookahead = lookahead or Fixed(0)
    filters = list(logit_filters or [no_filter] * len(sequences))
    contexts = [DraftContext(f, temperature, lookahead.min_confidence, generator, eos_token_id, noise)
                for f in filters]
    rows = [list(s) for s in sequences]
    outs = [Generation() for _ in rows]
    limits = [max_new_tokens] * len(rows) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    active = list(range(len(rows)))  # original row index of each row still in the batch
    if isinstance(held, int):
        held = [held] * len(rows)
    tails = [1] * len(rows) if held is None else [len(row) - h for row, h in zip(rows, held)]  # the first pass feeds
    if min(tails) < 1:
        raise ValueError(f"every row must leave at least one token to the first pass, not {tails}")
    prefilling = held is not None
    while active:
        if interrupt:
            interrupt()
        t0 = time.perf_counter()
        room = min(limits[r] - len(outs[r].tokens) for r in active)
        k = min(lookahead.k(), room - 1) if drafter else 0
        proposals = _propose(drafter, [rows[r] for r in active], k, [contexts[r] for r in active])
        t1 = time.perf_counter()
        width = max(tails[r] + len(p.tokens) for r, p in zip(active, proposals))
        batch = [[*rows[r][-tails[r]:], *p.tokens, *[rows[r][-1]] * (width - tails[r] - len(p.tokens))]
                 for r, p in zip(active, proposals)]  # padding never verified
        if prefilling:  # this round's pass also reads the rest of the prompt
            read = {r: min(prefill_logits or tails[r], tails[r]) if on_prefill else 1 for r in active}
            keep = width - min(tails[r] - read[r] for r in active)
            logits = target.forward(torch.tensor(batch), logits_to_keep=keep)
        else:
            logits = target.forward(torch.tensor(batch))
        first = width - logits.shape[1]  # the position of the first logits returned
        if prefilling and on_prefill:
            for i, r in enumerate(active):
                on_prefill(r, logits[i, tails[r] - read[r] - first:tails[r] - first])
        verdicts = [verify(rows[r], p, logits[i, tails[r] - 1 - first:], filters[r], temperature, generator, noise)
                    for i, (r, p) in enumerate(zip(active, proposals))]
        target.rollback([len(rows[r]) + v.accepted for r, v in zip(active, verdicts)])  # all but the newest
        t2 = time.perf_counter()

        finished = []
        for r, p, v in zip(active, proposals, verdicts):
            emitted = p.tokens[:v.accepted] + [v.next_token]
            rows[r] += emitted
            if eos_token_id in emitted:  # an accepted draft token may already end the sequence
                emitted = emitted[:emitted.index(eos_token_id) + 1]
            out = outs[r]
            out.tokens += emitted
            out.logprobs += v.logprobs[:len(emitted)]
            out.from_draft += ([True] * v.accepted + [False])[:len(emitted)]
            out.stats.record(len(p.tokens), v.accepted, p.forward_passes, t1 - t0, t2 - t1)
            if on_tokens:
                on_tokens(r, emitted)
            cut = stop(r, out.tokens) if stop else None
            if cut is not None:
                out.tokens, out.logprobs, out.from_draft = out.tokens[:cut], out.logprobs[:cut], out.from_draft[:cut]
            if cut is not None or emitted[-1] == eos_token_id or len(out.tokens) >= limits[r]:
                finished.append(r)
        verify_seconds = None if prefilling else t2 - t1  # a pass that also read a prompt is no verify cost
        for i, (r, p, v) in enumerate(zip(active, proposals, verdicts)) if drafter else ():
            drafter.learn(rows[r], v, logits[i, tails[r] - 1 - first:tails[r] + len(p.tokens) - first], t1 - t0,
                          verify_seconds)
        for v in verdicts if not prefilling else ():  # a pass that also read a prompt is no verify cost
            lookahead.update(v, t1 - t0, t2 - t1)
        tails, prefilling = [1] * len(rows), False
        if finished:
            keep = _survivors(len(active), [i for i, r in enumerate(active) if r in finished])
            active = [active[i] for i in keep]
            if active:
                _drop_rows(target, drafter, keep)
    return outs


def _propose(drafter: Drafter, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
    if k <= 0:
        return [Proposal([]) for _ in rows]
    return drafter.propose_batch(rows, k, contexts)


def _survivors(n: int, finished: list[int]) -> list[int]:
    """The batch positions still decoding, in a new order that moves as few rows as possible: a
    survivor keeps its slot unless the batch shrinks past it, then it fills a finished row's slot
    (caches copy only the rows that move)."""
    size = n - len(finished)
    tail = [i for i in range(size, n) if i not in finished]
    return [tail.pop() if i in finished else i for i in range(size)]


def _drop_rows(target: CachedModel, drafter: Drafter | None, keep: list[int]) -> None:
    rows = torch.tensor(keep)
    target.reorder(rows)
    if drafter:
        drafter.reorder(rows)
