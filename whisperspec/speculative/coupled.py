"""Coupled sampling: target and draft share one Gumbel noise per sequence position.

argmax(logits / T + g), with g standard Gumbel noise, is an exact sample of softmax(logits / T)
(the Gumbel-max trick). If the target's token at position i is always chosen that way, with noise
that depends only on the seed and i, then:

* the output is an exact sample of the target model, as with any sampling;
* it is the *same* sample whether or not anything was drafted: verification becomes an argmax
  comparison, as in greedy decoding, so plain and speculative decoding give identical text for a
  seed (the residual rule of Leviathan et al. keeps the distribution but not the draw);
* a draft that picks argmax(its logits / T + g) with the same noise proposes the target's token
  whenever the two distributions agree closely, so acceptance stays close to the residual rule's.

Whisper uses it for its temperature fallback, so that a window re-decoded by sampling reads the same
with or without a draft.
"""

from __future__ import annotations

import functools

import torch


class GumbelNoise:
    def __init__(self, seed: int, vocab_size: int):
        self.seed, self.vocab_size = seed, vocab_size
        self._noise = functools.lru_cache(maxsize=64)(self._draw)  # positions are asked again and again

    def __call__(self, position: int) -> torch.Tensor:
        """Noise [vocab] for the token at `position` of the sequence (prefix included)."""
        return self._noise(position)

    def _draw(self, position: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + position)
        uniform = torch.rand(self.vocab_size, generator=generator, dtype=torch.float64).clamp_(1e-300, 1.0)
        return (-torch.log(-torch.log(uniform))).float()


def coupled_choice(scores: torch.Tensor, temperature: float, noise: GumbelNoise, position: int) -> int:
    """The token coupled sampling picks at `position` from (filtered) `scores` [vocab]."""
    return int((scores / temperature + noise(position)).argmax())


def sampling_noise(sampling: str, seed: int, vocab_size: int) -> GumbelNoise | None:
    """The `noise` a generation samples with: "coupled" (this module) or "residual" (None: the
    verifier's residual rule with a random generator)."""
    if sampling not in ("coupled", "residual"):
        raise ValueError(f"sampling {sampling!r}: coupled or residual")
    return GumbelNoise(seed, vocab_size) if sampling == "coupled" else None
