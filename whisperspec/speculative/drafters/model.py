"""A draft *model* proposing tokens one forward pass at a time, its KV cache kept in sync.

*Drafter* is what proposes; *draft model* is the network a drafter may run. Any small causal
model can draft once it answers the `DraftModel` calls: a shared-encoder Whisper draft decoder, the
first layers of the target itself (early exit), an int8 copy (in the target's own cache), a
separate LM.
The drafter never needs to be told what was rejected: before proposing it compares the tokens its
cache holds with the sequence and rolls back to the common prefix (as transformers' assisted
generation crops its cache). Rows of a batch draft together in one forward pass per step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import torch

from whisperspec.speculative.coupled import coupled_choice
from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal


class DraftModel(ABC):
    """A network with a KV cache that a `ModelDrafter` runs. The start and reorder hooks do nothing
    here: a draft model whose cache belongs to another (an early exit) or that needs no set-up
    leaves them as they are."""

    vocab_ids: torch.Tensor | None = None  # full-vocabulary ids of the logits' columns (reduced head), or None
    # In the target's own cache (`target_held`): how many tokens the target has not read yet it
    # reads by itself (a window's start sequence); a row with more (a long prompt) waits for the
    # target's first pass. None: any number (a cache of its own).
    reads_alone: int | None = None
    # True: its cache is the target's, which holds whatever was verified: it never catches up
    in_target_cache: bool = False

    @abstractmethod
    def held_tokens(self, row: int) -> list[int]:
        """The tokens whose keys/values the cache holds for `row`, in order."""

    @abstractmethod
    def rollback(self, lengths: list[int]) -> None:
        """Keep only the first `lengths` cached positions of each row."""

    @abstractmethod
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [batch, n] -> logits [batch, n, vocab or len(vocab_ids)]."""

    def target_held(self, row: int) -> int:
        """In the target's cache: how many of `row`'s first positions the target holds. The draft
        reads them and must never write them: the target reads them next with its own bits."""
        return 0

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows, in this order."""

    def start(self, sequences: list[list[int]]) -> None:
        """A new batch, one row per sequence (a draft model holding a fixed number of rows)."""

    def start_window(self, window) -> None:
        """New conditioning input for every row (Whisper: a window's encoder output)."""

    def see_rows(self, rows: list[list[int]]) -> None:
        """The sequences a round is about to draft from, one per row (a head that scores what they
        need: Whisper's int8 self-draft scores their language's frequent tokens)."""


class ModelDrafter(Drafter):
    """`view`: the part of a sequence the draft model reads (default: all of it), e.g. a shorter
    context than the target's, closer to what the draft was trained on. The verifier still sees
    the whole sequence, so output is unchanged; only acceptance can move. It must let new tokens
    through: view(tokens + new) == view(tokens) + new."""

    def __init__(self, model: DraftModel, vocab_size: int,
                 view: Callable[[list[int]], list[int]] | None = None):
        self.model, self.vocab_size = model, vocab_size
        self.view = view

    @property
    def catches_up(self) -> bool:
        return not self.model.in_target_cache

    def can_draft(self, rows: list[list[int]]) -> bool:
        """In the target's cache, unless a row holds more the target has not read than the model
        reads alone: a long prompt, which the target's first pass reads with the first draft, and
        which the draft then reads from the target's cache for nothing."""
        limit = self.model.reads_alone
        return limit is None or all(len(row) - 1 - self.model.target_held(b) <= limit for b, row in enumerate(rows))

    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        if not self.can_draft(rows):
            return [Proposal([]) for _ in rows]
        self.model.see_rows(rows)
        feed, ends = self._sync(rows)
        drafted, probs = [[] for _ in rows], [[] for _ in rows]
        drafting = [True] * len(rows)
        for step in range(k):
            logits = self.full_vocab(self._forward_last(feed, ends if step == 0 else None))
            for b, context in enumerate(contexts):
                sequence = rows[b] + drafted[b]
                token, q, confidence = _pick(context.logit_filter(sequence, logits[b]), context, len(sequence))
                feed[b] = [token]
                if not drafting[b]:
                    continue  # this row stopped; it rides along until the batch step is over
                if step and confidence < context.min_confidence:
                    drafting[b] = False  # unsure: a likely rejection costs more than it could bring
                    continue
                drafted[b].append(token)
                if q is not None:
                    probs[b].append(q)
                drafting[b] = token != context.eos_token_id
            if not any(drafting):
                break
        passes = step + 1 if k else 0
        return [Proposal(d, torch.stack(p) if p else None, forward_passes=passes) for d, p in zip(drafted, probs)]

    # learn: nothing to do, `propose` re-syncs the cache with whatever the sequence has become

    def reorder(self, rows: torch.Tensor) -> None:
        self.model.reorder(rows)

    def start(self, sequences: list[list[int]]) -> None:
        self.model.start([self.view(s) for s in sequences] if self.view else sequences)

    def start_window(self, window) -> None:
        self.model.start_window(window)

    def _sync(self, rows: list[list[int]]) -> tuple[list[list[int]], list[int]]:
        """Roll each row's cache back to its longest prefix of the row (last token excluded) and
        return the tokens to feed, and each row's cache length once they are fed. Rows are aligned
        to one width by re-feeding tokens the cache already held (recomputing them gives the same
        keys and values); a row too short for that (rows of different lengths, at the start of a
        window), or whose earlier positions are the target's, is fed as it is and padded
        (`_forward_last`)."""
        if self.view:
            rows = [self.view(row) for row in rows]
        common = [_common_prefix(self.model.held_tokens(b), row[:-1]) for b, row in enumerate(rows)]
        width = max(len(row) - c for row, c in zip(rows, common))
        # in the target's cache, no row is re-fed below what the target holds: it is padded instead
        starts = [max(len(row) - width, self.model.target_held(b)) for b, row in enumerate(rows)]
        self.model.rollback(starts)
        return [row[start:] for row, start in zip(rows, starts)], [len(row) for row in rows]

    def _forward_last(self, feed: list[list[int]], ends: list[int] | None) -> torch.Tensor:
        """The draft's logits after each row's last fed token. Shorter rows are padded at the end
        with their last token; the padding's cache entries are rolled back to `ends` at once,
        unread (a row's keys sit at its own positions, and a query never sees later ones)."""
        width = max(len(f) for f in feed)
        if all(len(f) == width for f in feed):
            return self.model.forward(torch.tensor(feed))[:, -1]
        logits = self.model.forward(torch.tensor([f + f[-1:] * (width - len(f)) for f in feed]))
        self.model.rollback(ends)
        return logits[torch.arange(len(feed)), torch.tensor([len(f) - 1 for f in feed])]

    def full_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        """The draft model's scores [batch, its vocabulary] as scores over the whole vocabulary (-inf
        where a reduced head scores nothing)."""
        ids = self.model.vocab_ids
        if ids is None:
            return logits.float()
        full = torch.full((logits.shape[0], self.vocab_size), float("-inf"))
        full[:, ids] = logits.float()
        return full


def _pick(scores: torch.Tensor, context: DraftContext, position: int) -> tuple[int, torch.Tensor | None, float]:
    """(token, distribution it was drawn from or None if deterministic, the draft's confidence in it)."""
    if context.temperature > 0 and context.noise is not None:  # coupled: the target's rule, the draft's scores
        token = coupled_choice(scores, context.temperature, context.noise, position)
        return token, None, float(torch.softmax(scores / context.temperature, dim=-1)[token])
    if context.temperature > 0:
        q = torch.softmax(scores / context.temperature, dim=-1)
        token = int(torch.multinomial(q, 1, generator=context.generator))
        return token, q, float(q[token])
    token = int(scores.argmax())
    confidence = float(torch.softmax(scores, dim=-1)[token]) if context.min_confidence else 1.0
    return token, None, confidence


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
