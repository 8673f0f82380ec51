"""The two roles the speculative loop talks to, and what passes between them.

The loop and the verifier only know these shapes: a *target* model with a KV cache it can roll
back, and a *drafter* that proposes tokens and learns from the verdict (transformers'
CandidateGenerator: get_candidates / update_candidate_strategy). Nothing here is Whisper-specific:
Whisper's prefix, logit rules and timestamps arrive as a `LogitFilter` and plain token lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import torch

# Applies the task's rules (suppressed tokens, timestamp grammar, ...) to the logits [vocab] that
# follow `tokens` (the whole sequence so far, prefix included). May modify `logits` in place.
LogitFilter = Callable[[Sequence[int], torch.Tensor], torch.Tensor]


def no_filter(tokens: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
    return logits


class CachedModel(Protocol):
    """A causal model whose cache holds a prefix of the sequence."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append tokens [batch, n] to the cache; logits [batch, n, vocab] for the next positions.
        A target that `generate_batch` reads prompts into (`held`) also takes `logits_to_keep=m`:
        the logits of the last m positions only, [batch, m, vocab] (transformers' name)."""

    def rollback(self, lengths: int | Sequence[int]) -> None:
        """Keep only the first `lengths` cached positions (per row)."""

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows, in this order (batched decoding drops finished rows)."""


@dataclass
class DraftContext:
    """What a drafter needs to know about the current generation, fixed for its duration."""

    logit_filter: LogitFilter = no_filter
    temperature: float = 0.0
    min_confidence: float = 0.0  # stop drafting when the draft's top probability falls below this
    generator: torch.Generator | None = None
    eos_token_id: int | None = None
    # coupled sampling: the target picks argmax(scores / T + noise(position)); a draft that does
    # the same proposes what the target will pick whenever their distributions agree
    noise: Callable[[int], torch.Tensor] | None = None


@dataclass
class Proposal:
    tokens: list[int]
    # Draft distribution each token was drawn from [k, vocab] (speculative sampling needs it);
    # None means the proposal is deterministic (n-gram lookup, greedy drafts).
    probs: torch.Tensor | None = None
    forward_passes: int = 0  # draft model passes spent on it


@dataclass
class Verdict:
    proposed: int
    accepted: int
    next_token: int  # the target model's own token after the accepted prefix (correction or bonus)
    # log-probability of each emitted token under the target (accepted draft tokens, then next_token)
    logprobs: list[float] = field(default_factory=list)


class Drafter:
    """What proposes tokens (transformers' CandidateGenerator: get_candidates / update_candidate_strategy).

    A drafter answers `propose` (one row) or `propose_batch` (rows drafted together); each is by
    default the other one, row by row. Every other hook does nothing here, so the loop calls each
    of them on any drafter, and a drafter overrides only what it needs.
    """

    # True: `learn` reads every one of the target's scores (a draft learning from them), so the
    # target must not leave out those it can tell cannot be its argmax
    reads_scores: bool = False
    # True: after rounds it did not draft, its next round first reads what was decoded meanwhile
    # (a cache of its own catching up), so that round costs more than its others
    catches_up: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.propose is Drafter.propose and cls.propose_batch is Drafter.propose_batch:
            raise TypeError(f"{cls.__name__} must define propose or propose_batch")

    def propose(self, tokens: list[int], k: int, context: DraftContext) -> Proposal:
        """Up to k tokens likely to follow `tokens` (the whole sequence so far)."""
        return self.propose_batch([tokens], k, [context])[0]

    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        """`propose` for every row of a batch."""
        return [self.propose(row, k, context) for row, context in zip(rows, contexts)]

    def can_draft(self, rows: list[list[int]]) -> bool:
        """Whether it drafts for these rows this round (else it proposes nothing: a plain step)."""
        return True

    def learn(self, tokens: list[int], verdict: Verdict, logits: torch.Tensor | None = None,
              draft_seconds: float = 0.0, verify_seconds: float | None = None) -> None:
        """After each round: `tokens` is the row's sequence after the verdict; `logits` [k + 1,
        vocab] the target's raw scores at the positions it verified (after the sequence before
        this round's tokens, then after each drafted token: what the draft should have said);
        the round's drafting and verifying wall time (shared by the rows of a batch; no verify
        time for a pass that also read a prompt). A drafter that re-syncs with the sequence when
        it next proposes needs none of it."""

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep only these batch rows, in this order, as the target does (finished rows leave)."""

    def start(self, sequences: list[list[int]]) -> None:
        """A new generation over these sequences begins (one row each)."""

    def start_window(self, window) -> None:
        """New conditioning input for every row (Whisper: a 30-s window's encoder output)."""
