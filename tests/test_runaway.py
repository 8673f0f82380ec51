"""A window that loops is stopped long before the token limit, at the same token with any drafter."""

from __future__ import annotations

import numpy as np
import pytest

from whisperspec import defaults
from whisperspec.whisper.decode import RunawayStop


def text_of(tokens):
    return "".join(chr(ord("a") + t % 26) for t in tokens)


@pytest.mark.parametrize("round_sizes", [[1], [2, 5], [4], [7, 1, 3]])
def test_the_cut_depends_on_the_tokens_not_on_the_rounds(round_sizes):
    varied = list(range(70))  # 70 different letters in a row, then a loop
    tokens = varied + [1, 2, 3] * 100
    stop, seen, cut, sizes = RunawayStop(text_of, 2.4), [], None, iter(round_sizes * 400)
    while cut is None and len(seen) < len(tokens):
        seen += tokens[len(seen):len(seen) + next(sizes)]
        cut = stop(0, seen)
    assert cut is not None and cut % defaults.RUNAWAY_CHECK_EVERY == 0
    reference = RunawayStop(text_of, 2.4)
    assert cut == min(n for n in range(defaults.RUNAWAY_MIN_TOKENS, len(tokens) + 1, defaults.RUNAWAY_CHECK_EVERY)
                      if reference(1, tokens[:n]) is not None)


def test_varied_text_is_never_cut():
    import string

    alphabet = string.ascii_letters + string.digits + " "
    tokens = list(np.random.default_rng(0).integers(0, len(alphabet), 440))
    stop = RunawayStop(lambda ts: "".join(alphabet[t] for t in ts), 2.4)
    assert all(stop(0, tokens[:n]) is None for n in range(1, 441))


@pytest.mark.real
def test_a_runaway_window_costs_a_fraction_and_reads_the_same_with_every_drafter():
    """Low-level noise after a prompt of fillers makes base loop at every temperature; each pass now
    stops after ~64-96 tokens instead of running to the 448-token limit."""
    from whisperspec.transcribe import Transcriber

    noise = (np.random.default_rng(0).standard_normal(16000 * 7) * 0.01).astype(np.float32)
    texts = {}
    for draft in ("none", "auto", "ngram"):
        transcriber = Transcriber("base", draft=draft, language="en", initial_prompt="uh, uh, uh, uh")
        result = transcriber.transcribe(noise)
        texts[draft] = result.text
        passes = len(DEFAULT_TEMPERATURES)
        assert result.stats.speculation.emitted < passes * 160, result.stats
    assert len(set(texts.values())) == 1, texts


DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
