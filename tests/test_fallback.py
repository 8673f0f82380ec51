"""The temperature fallback when every temperature fails its checks: faster-whisper's choice of the
likeliest try (not openai-whisper's last, hottest sample), the same with or without a drafter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tiny_models import random_mel, tiny_runtime
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, WindowResult, _kept_when_all_fail
from whisperspec.whisper.drafters import make_drafter


def _result(temperature: float, avg_logprob: float, compression_ratio: float) -> WindowResult:
    return WindowResult(tokens=[int(temperature * 10)], language="en", temperature=temperature,
                        avg_logprob=avg_logprob, compression_ratio=compression_ratio, no_speech_prob=0.0)


def test_the_likeliest_try_under_the_ratio_threshold_is_kept_and_reports_the_last_temperature():
    cool, hot = _result(0.0, -1.5, 1.2), _result(1.0, -2.5, 1.3)
    kept = _kept_when_all_fail(cool, hot, 2.4)
    assert kept.tokens == cool.tokens and kept.temperature == 1.0
    # a likelier try that is too repetitive loses to one that is not
    looping = _result(0.0, -0.5, 3.0)
    assert _kept_when_all_fail(looping, hot, 2.4).tokens == hot.tokens
    # both too repetitive: the likelier; a tie: the earlier
    assert _kept_when_all_fail(looping, replace(hot, compression_ratio=2.9), 2.4).tokens == looping.tokens
    assert _kept_when_all_fail(cool, replace(hot, avg_logprob=-1.5), 2.4).tokens == cool.tokens
    assert _kept_when_all_fail(looping, hot, None).tokens == looping.tokens  # no ratio check: likeliest


@pytest.mark.parametrize("draft, ratio_threshold", [(None, None), (None, 2.4), ("int8", 2.4), ("ngram", None)])
def test_when_every_temperature_fails_the_window_keeps_its_likeliest_try(draft, ratio_threshold):
    runtime = tiny_runtime(4)
    window = runtime.encode(random_mel(7))
    temperatures = (0.0, 0.4, 0.8)
    # an average log-probability below 0 always fails: every temperature is tried
    failing = DecodeOptions(language="en", temperatures=temperatures, max_new_tokens=30, logprob_threshold=0.0,
                            compression_ratio_threshold=ratio_threshold)
    plain = WindowDecoder(runtime)
    tries = [plain.decode(window, replace(failing, temperatures=(t,))) for t in temperatures]
    varied = [r for r in tries if ratio_threshold is None or r.compression_ratio <= ratio_threshold]
    likeliest = max(varied or tries, key=lambda r: r.avg_logprob)  # the first of equals, as faster-whisper's max
    # this window's tries make the choice a real one: not the last try, and with the ratio
    # threshold not the likeliest of all (greedy loops here)
    assert likeliest is not tries[-1]
    assert (likeliest is tries[0]) == (ratio_threshold is None)
    decoder = WindowDecoder(runtime, make_drafter(draft, runtime), make_lookahead("3")) if draft else plain
    kept = decoder.decode(window, failing)
    assert kept.tokens == likeliest.tokens and kept.avg_logprob == likeliest.avg_logprob
    assert kept.temperature == temperatures[-1]
    if draft is None:  # it carries the work of every try
        assert kept.stats.target_passes == sum(r.stats.target_passes for r in tries)
