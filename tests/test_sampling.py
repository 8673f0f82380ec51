"""Speculative sampling must reproduce the target model's distribution, whatever the draft."""

from __future__ import annotations

import itertools
from collections import Counter

import torch

from whisperspec.speculative.coupled import GumbelNoise
from whisperspec.speculative.generate import generate
from whisperspec.speculative.lookahead import Fixed
from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal
from whisperspec.speculative.verifier import verify

VOCAB = 4


class BigramModel:
    """A toy causal model: logits depend on the last token only. Cache = a length."""

    def __init__(self, logits: torch.Tensor):
        self.logits, self.length = logits, 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.length += tokens.shape[1]
        return self.logits[tokens]

    def rollback(self, lengths) -> None:
        self.length = min(self.length, int(torch.as_tensor(lengths).reshape(-1)[0]))


class BigramDrafter(Drafter):
    """Samples from its own (different) bigram table and reports the distribution it used."""

    def __init__(self, logits: torch.Tensor, deterministic: bool = False):
        self.logits, self.deterministic = logits, deterministic

    def propose(self, tokens, k, context: DraftContext) -> Proposal:
        drafted, probs, last = [], [], tokens[-1]
        for _ in range(k):
            q = torch.softmax(self.logits[last] / context.temperature, dim=-1)
            last = int(q.argmax()) if self.deterministic else int(torch.multinomial(q, 1, generator=context.generator))
            drafted.append(last)
            probs.append(q)
        return Proposal(drafted, None if self.deterministic else torch.stack(probs), forward_passes=k)


def total_variation(counts: Counter, exact: dict, n: int) -> float:
    return 0.5 * sum(abs(counts.get(key, 0) / n - p) for key, p in exact.items())


def exact_sequence_distribution(logits: torch.Tensor, start: int, length: int, temperature: float) -> dict:
    probs = torch.softmax(logits / temperature, dim=-1)
    result = {}
    for sequence in itertools.product(range(VOCAB), repeat=length):
        p, last = 1.0, start
        for token in sequence:
            p, last = p * float(probs[last, token]), token
        result[sequence] = p
    return result


def test_verifier_first_token_follows_target_distribution():
    generator = torch.Generator().manual_seed(0)
    p_logits = torch.tensor([2.0, 0.5, 0.0, -1.0])
    q = torch.softmax(torch.tensor([-1.0, 0.0, 2.0, 0.5]), dim=-1)  # a deliberately bad draft
    counts, n = Counter(), 20000
    for _ in range(n):
        x = int(torch.multinomial(q, 1, generator=generator))
        verdict = verify([0], Proposal([x], q[None]), torch.stack([p_logits, p_logits]), lambda t, s: s,
                         temperature=1.0, generator=generator)
        counts[x if verdict.accepted else verdict.next_token] += 1
    exact = {i: float(v) for i, v in enumerate(torch.softmax(p_logits, dim=-1))}
    assert total_variation(counts, exact, n) < 0.015
    assert 0.5 * float((torch.softmax(p_logits, -1) - q).abs().sum()) > 0.3  # the test can fail


def test_speculative_sampling_reproduces_sequence_distribution():
    torch.manual_seed(0)
    target_logits, draft_logits = torch.randn(VOCAB, VOCAB) * 1.5, torch.randn(VOCAB, VOCAB) * 1.5
    length, n, temperature = 3, 12000, 0.8
    exact = exact_sequence_distribution(target_logits, 0, length, temperature)
    for drafter in (BigramDrafter(draft_logits), BigramDrafter(draft_logits, deterministic=True), None):
        generator, counts = torch.Generator().manual_seed(1), Counter()
        for _ in range(n):
            model = BigramModel(target_logits)
            out = generate(model, [0], length, None, drafter=drafter, lookahead=Fixed(2),
                           temperature=temperature, generator=generator)
            counts[tuple(out.tokens)] += 1
        assert total_variation(counts, exact, n) < 0.05, drafter


def test_coupled_sampling_draws_the_distribution_and_the_same_tokens_with_any_draft():
    torch.manual_seed(0)
    target_logits, draft_logits = torch.randn(VOCAB, VOCAB) * 1.5, torch.randn(VOCAB, VOCAB) * 1.5
    length, n, temperature = 3, 6000, 0.8
    exact = exact_sequence_distribution(target_logits, 0, length, temperature)
    counts = Counter()
    for seed in range(n):
        noise = GumbelNoise(seed, VOCAB)
        plain = generate(BigramModel(target_logits), [0], length, None, temperature=temperature, noise=noise).tokens
        for drafter in (BigramDrafter(draft_logits), BigramDrafter(draft_logits, deterministic=True)):
            out = generate(BigramModel(target_logits), [0], length, None, drafter=drafter, lookahead=Fixed(2),
                           temperature=temperature, generator=torch.Generator().manual_seed(seed), noise=noise)
            assert out.tokens == plain, seed
        counts[tuple(plain)] += 1
    assert total_variation(counts, exact, n) < 0.05
