"""`whisperspec bench`'s arithmetic: what acceptance a decode-phase speed-up needs at measured costs."""

from __future__ import annotations

import pytest

from whisperspec.bench.decoder import acceptance_needed, tokens_per_round


def test_tokens_per_round_counts_the_accepted_prefix_and_the_targets_own_token():
    assert tokens_per_round(0.0, 4) == 1
    assert tokens_per_round(1.0, 4) == 5
    assert tokens_per_round(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_the_acceptance_found_gives_the_speed_up_asked_for():
    plain, fixed, n_tokens, round_seconds, k = 10.0, 1.0, 100, 0.2, 4
    acceptance = acceptance_needed(1.5, plain, fixed, n_tokens, round_seconds, k)
    assert 0 < acceptance < 1
    total = fixed + n_tokens / tokens_per_round(acceptance, k) * round_seconds
    assert plain / total == pytest.approx(1.5, rel=1e-6)
    # a higher target needs more
    assert acceptance_needed(1.8, plain, fixed, n_tokens, round_seconds, k) > acceptance


def test_a_speed_up_that_every_token_accepted_would_not_give_is_out_of_reach():
    plain, fixed, n_tokens, round_seconds, k = 10.0, 1.0, 100, 0.2, 4
    # all accepted: 100 / 5 rounds of 0.2 s + 1 s = 5 s, 2x
    assert acceptance_needed(2.0, plain, fixed, n_tokens, round_seconds, k) == pytest.approx(1.0, abs=1e-6)
    assert acceptance_needed(2.5, plain, fixed, n_tokens, round_seconds, k) is None
    assert acceptance_needed(10.0, plain, fixed, n_tokens, round_seconds, k) is None  # the fixed costs alone
