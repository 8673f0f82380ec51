"""Online learning: a trained draft that keeps training between windows on what the main model
verified. The transcript must stay plain greedy's (or the same sample) whatever the draft learns,
and the draft must actually learn: its acceptance rises on audio it has seen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import random_mel, real_vocabulary, tiny_runtime, tiny_whisper
from whisperspec.models.draft_layout import draft_from_main
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, forced_prefix
from whisperspec.whisper.drafters.online import OnlineDrafter, OnlineSchedule
from whisperspec.whisper.drafters.trained import distilled_drafter

EVERY_WINDOW = OnlineSchedule(warmup_windows=1, min_gain=-1.0, episode=10 ** 6)  # an update after every window


def online_drafter(runtime, schedule: OnlineSchedule = EVERY_WINDOW, int8: bool = True) -> OnlineDrafter:
    """A distilled draft of the main model's first layer, learning online."""
    draft = draft_from_main(runtime.model, [0])
    return distilled_drafter(runtime, draft, None, int8=int8, online_learning=True, schedule=schedule)


@pytest.mark.parametrize("int8", [True, False])
def test_a_learning_draft_changes_no_token_and_learns(int8):
    runtime = tiny_runtime(0)  # float64: plain greedy is exact
    drafter = online_drafter(runtime, int8=int8)
    windows = [runtime.encode(random_mel(seed)) for seed in range(3)]
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=60)
    plain = [WindowDecoder(runtime).decode(w, options).tokens for w in windows]
    acceptance = []
    for _ in range(4):  # the same windows again: what it learnt there should show
        accepted = proposed = 0
        for window, reference in zip(windows, plain):
            result = WindowDecoder(runtime, drafter, make_lookahead("3")).decode(window, options)
            assert result.tokens == reference
            accepted, proposed = accepted + result.stats.accepted, proposed + result.stats.proposed
        acceptance.append(accepted / proposed)
    assert drafter.updates == 11  # after every window but the first
    assert acceptance[-1] > acceptance[0] + 0.2, acceptance
    # a sampled window reads the same with the draft it has become (coupled sampling)
    sampled = DecodeOptions(language="en", temperatures=(0.8,), max_new_tokens=40, seed=3)
    assert (WindowDecoder(runtime, drafter, make_lookahead("3")).decode(windows[0], sampled).tokens
            == WindowDecoder(runtime).decode(windows[0], sampled).tokens)


def test_what_a_window_leaves_to_learn_from():
    runtime = tiny_runtime(1)
    drafter = online_drafter(runtime, OnlineSchedule(warmup_windows=10 ** 6))  # collects, never trains
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    prompt = runtime.tokenizer.encode(" what the previous window said", add_special_tokens=False)
    decoder = WindowDecoder(runtime, drafter, make_lookahead("2"))
    result = decoder.decode(runtime.encode(random_mel(1)), options, prompt=prompt)
    decoder.decode(runtime.encode(random_mel(2)), options)  # starting a window closes the last one
    record = drafter.memory[0]
    special = runtime.special
    # what the draft reads (no previous-text prompt), and one row of main-model scores per emitted token
    assert record.tokens[:record.first] == forced_prefix(special, [], "en", options)
    assert record.tokens[record.first:] in (result.tokens + [special.eot], result.tokens)  # or the token limit
    assert sum(len(s) for s in record.top_scores) == record.emitted == len(record.tokens) - record.first
    assert all(s.shape[1] == drafter.schedule.top_k for s in record.top_scores)
    # the main model's best raw score at each position is the first of its top scores
    window = runtime.encode(random_mel(1))
    runtime.decoder.start(window.hidden)
    full = [special.sot_prev, *prompt, *record.tokens]
    logits = runtime.decoder.forward(torch.tensor([full[:-1]]))[0, -record.emitted:]
    assert torch.equal(torch.cat([c[:, 0] for c in record.top_columns]), logits.argmax(-1))
    assert drafter.updates == 0 and drafter.windows_seen == 1


def test_rows_decoded_together_each_leave_their_own_window():
    runtime = tiny_runtime(2)
    drafter = online_drafter(runtime, OnlineSchedule(warmup_windows=10 ** 6))
    reorders = []
    reorder = drafter.reorder
    drafter.reorder = lambda rows: (reorders.append(rows.tolist()), reorder(rows))
    # random models repeat themselves: each row stops at the first runaway check (64 tokens), and
    # rows drafted at their own pace get there in different rounds, so the batch shrinks
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=160)
    window = runtime.encode(random_mel(2, batch=3))
    plain = WindowDecoder(runtime).decode_batch(window, options)
    together = WindowDecoder(runtime, drafter, make_lookahead("3")).decode_batch(window, options)
    assert [r.tokens for r in together] == [r.tokens for r in plain]
    assert reorders
    drafter.start_window(runtime.encode(random_mel(3)))  # closes the batch's window
    assert len(drafter.memory) == 3 and not any(r.broken for r in drafter.memory)
    for record, result in zip(drafter.memory, plain):  # the round that crossed the check is kept whole
        assert record.tokens[record.first:][:len(result.tokens)] == result.tokens
        assert sum(len(s) for s in record.top_scores) == record.emitted


@pytest.mark.parametrize("covered", [True, False])
def test_under_auto_the_draft_learns_from_every_round_whoever_drafts(covered):
    """`auto`'s trained candidate watches once built: it learns from the rounds n-gram lookup and
    plain steps decode too, and nothing from windows in a language it does not cover."""
    from whisperspec.speculative.drafters.ngram import NgramDrafter
    from whisperspec.speculative.drafters.select import Candidate, SelectingDrafter

    runtime = tiny_runtime(5)
    learner = online_drafter(runtime, OnlineSchedule(warmup_windows=10 ** 6))
    selector = SelectingDrafter([
        Candidate("trained", lambda: learner, acceptance=0.9, step_cost=0.0, watches=True,
                  applies=lambda tokens: covered),
        Candidate("ngram", lambda: NgramDrafter(3), acceptance=0.95, step_cost=0.0)], probe_every=2)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    windows = [runtime.encode(random_mel(seed)) for seed in range(3)]
    for window in windows:
        reference = WindowDecoder(runtime).decode(window, options).tokens
        assert WindowDecoder(runtime, selector, make_lookahead("2")).decode(window, options).tokens == reference
    selector.start_window(runtime.encode(random_mel(9)))  # closes the last window
    if covered:  # built in the first window; from the next on, every token is learnt, whoever drafted it
        assert "trained" in selector.built and learner.windows_seen == len(windows)
        assert [r.emitted for r in learner.memory][1:] == [40, 40]
        assert 0 < selector.chosen_rounds["trained"] < sum(selector.chosen_rounds.values()) - 20
    else:
        assert "trained" not in selector.built and learner.windows_seen == 0


def test_long_form_with_online_learning_matches_plain(tmp_path):
    """Windows seeking by timestamps, prompts from the previous window, and a draft file trained
    for the model that keeps learning from window to window and from file to file."""
    from transformers import WhisperFeatureExtractor

    from whisperspec.models.draft_file import save_draft
    from whisperspec.transcribe import Transcriber

    tokenizer, generation_config, _ = real_vocabulary("tiny.en")
    model = tiny_whisper(6, dtype=torch.float32)
    for item in (model, tokenizer, generation_config, WhisperFeatureExtractor()):
        item.save_pretrained(tmp_path)
    draft = draft_from_main(model, [0, 3])
    path = save_draft(tmp_path / "draft.safetensors", model, draft.model.decoder, torch.arange(model.config.vocab_size), {})
    audio = np.random.default_rng(0).normal(0, 0.1, 16000 * 75).astype(np.float32)
    options = dict(language="en", temperature=0, timestamps=True)
    plain = Transcriber(str(tmp_path), **options).transcribe(audio)
    assert plain.stats.windows >= 3
    learning = Transcriber(str(tmp_path), draft=str(path), online_learning="on", **options)
    for _ in range(2):
        fast = learning.transcribe(audio)
        assert [(s.start, s.end, s.tokens) for s in fast.segments] == [(s.start, s.end, s.tokens) for s in plain.segments]
    assert learning.drafter.updates >= 2  # after the second window, the third, the fifth ...
    assert fast.stats.speculation.accepted > 0


def test_learning_rests_where_it_does_not_pay():
    runtime = tiny_runtime(3)
    # no draft can be right on every token more than before: every check fails
    drafter = online_drafter(runtime, OnlineSchedule(warmup_windows=1, min_gain=1.0, checks=2, rest_windows=2))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=20)
    updated_after, shipped = [], []  # windows seen when each update came; whether the shipped draft drafted
    for seed in range(13):
        updates = drafter.updates
        WindowDecoder(runtime, drafter, make_lookahead("3")).decode(runtime.encode(random_mel(seed)), options)
        if drafter.updates > updates:
            updated_after.append(drafter.windows_seen)  # it trained as this window started
        shipped.append(drafter.drafter.model is drafter.shipped)
    # an update after every window; the second check fails: the adapters go, and learning rests 2
    # windows, then 4
    assert updated_after == [1, 2, 5, 6, 11, 12]
    assert shipped == [True, False, False, True, True, False, False, True, True, True, True, False, False]
    assert any(a.b.any() for a in drafter.adapters.values())  # learning again since window 11


def test_after_an_episode_the_draft_keeps_what_it_learnt_without_training():
    runtime = tiny_runtime(3)
    drafter = online_drafter(runtime, OnlineSchedule(warmup_windows=1, min_gain=-1.0, episode=3, rest_windows=4))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=20)
    updated_after = []
    for seed in range(12):
        updates = drafter.updates
        WindowDecoder(runtime, drafter, make_lookahead("3")).decode(runtime.encode(random_mel(seed)), options)
        if drafter.updates > updates:
            updated_after.append(drafter.windows_seen)
        assert drafter.drafter.model is (drafter.shipped if seed == 0 else drafter.adapted)
    assert updated_after == [1, 2, 3, 7, 8, 9]


def test_a_window_decoded_again_is_not_learnt_from():
    runtime = tiny_runtime(4)
    drafter = online_drafter(runtime, OnlineSchedule(warmup_windows=10 ** 6))
    # an average log-probability below 0 always fails: every window falls back to temperature 0.4
    fallback = DecodeOptions(language="en", temperatures=(0.0, 0.4), max_new_tokens=30, logprob_threshold=0.0,
                             compression_ratio_threshold=None)
    decoder = WindowDecoder(runtime, drafter, make_lookahead("3"))
    assert decoder.decode(runtime.encode(random_mel(4)), fallback).temperature == 0.4
    decoder.decode(runtime.encode(random_mel(5)), DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=30))
    decoder.decode(runtime.encode(random_mel(6)), DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=30))
    assert drafter.windows_seen == 1  # the plain window before the last; neither try of the first


def test_going_back_to_a_saved_state_repeats_the_same_learning():
    """What `evaluate --repeats` relies on: each timed repeat meets the draft the first one met."""
    runtime = tiny_runtime(6)
    drafter = online_drafter(runtime)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    windows = [runtime.encode(random_mel(seed)) for seed in range(4)]

    def decode(window):
        return WindowDecoder(runtime, drafter, make_lookahead("3")).decode(window, options).stats.accepted

    for window in windows[:2]:
        decode(window)
    saved = drafter.state()
    first = [decode(w) for w in windows[2:]]
    adapters = [p.detach().clone() for p in drafter.trainer.trainable()]
    assert drafter.updates == 3 and decode(windows[2]) != first[0]  # it has learnt from them
    drafter.restore(saved)
    assert [decode(w) for w in windows[2:]] == first
    assert all(torch.equal(p, q) for p, q in zip(drafter.trainer.trainable(), adapters))
    drafter.restore(drafter.initial)
    assert all(not p.any() for name, p in drafter.trainer.decoder.named_parameters() if name.endswith(".b"))


def test_online_learning_is_checked_before_the_model_loads(monkeypatch):
    from whisperspec.transcribe import Transcriber

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded for an option that does not parse")

    monkeypatch.setattr("whisperspec.transcribe.load_whisper", no_load)
    with pytest.raises(ValueError, match="online learning 'maybe': one of off, on"):
        Transcriber("base", online_learning="maybe")
