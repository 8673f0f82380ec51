"""Word timestamps: the DTW, the word rules, the alignment pass (against transformers' attention),
the same words and times with any drafter, and faster-whisper's times on real speech."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from tiny_models import random_mel, real_vocabulary, tiny_runtime, tiny_whisper
from whisperspec import defaults
from whisperspec.whisper.alignment import (WordTiming, alignment_heads, attention_to_audio, dtw, merge_punctuations,
                                           split_words)

CLIPS = Path(__file__).parent / "data"


def cell_by_cell_dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """openai-whisper's dtw_cpu recursion and backtrace, one cell at a time."""
    rows, columns = cost.shape
    total = np.full((rows + 1, columns + 1), np.inf)
    total[0, 0] = 0
    trace = -np.ones((rows + 1, columns + 1))
    for j in range(1, columns + 1):
        for i in range(1, rows + 1):
            c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            total[i, j], trace[i, j] = cost[i - 1, j - 1] + c, t
    trace[0, :], trace[:, 0] = 2, 1
    path, i, j = [], rows, columns
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        i, j = {0: (i - 1, j - 1), 1: (i - 1, j), 2: (i, j - 1)}[trace[i, j]]
    return tuple(np.array(path[::-1]).T)


@pytest.mark.parametrize("seed", range(6))
def test_dtw_takes_the_path_of_the_cell_by_cell_recursion(seed):
    rng = np.random.default_rng(seed)
    rows, columns = rng.integers(1, 30), rng.integers(1, 80)
    for cost in (rng.normal(size=(rows, columns)), rng.integers(0, 3, size=(rows, columns)).astype(float)):  # ties
        token_rows, frames = dtw(cost)
        expected_rows, expected_frames = cell_by_cell_dtw(cost)
        assert np.array_equal(token_rows, expected_rows) and np.array_equal(frames, expected_frames)
        assert (token_rows[0], frames[0], token_rows[-1], frames[-1]) == (0, 0, rows - 1, columns - 1)


def test_words_split_at_spaces_punctuation_and_whole_characters():
    tokenizer, generation_config, _ = real_vocabulary("base")
    eot = generation_config.eos_token_id
    tokens = tokenizer.encode(' Hello, world! "Quoted" (it\'s) fine... -- yes.', add_special_tokens=False) + [eot]
    words, word_tokens = split_words(tokenizer, tokens, eot, "en")
    assert words == [" Hello", ",", " world", "!", ' "Quoted', '"', " (it's", ")", " fine...", " --", " yes", ".",
                     "<|endoftext|>"]
    assert sum(word_tokens, []) == tokens
    timings = [WordTiming(word, ids, 0.0, 0.0, 1.0) for word, ids in zip(words, word_tokens)]
    merge_punctuations(timings, defaults.PREPEND_PUNCTUATIONS, defaults.APPEND_PUNCTUATIONS)
    assert [t.word for t in timings if t.word] == [" Hello,", " world!", ' "Quoted"', " (it's)", " fine...", " --",
                                                   " yes.", "<|endoftext|>"]
    assert sum((t.tokens for t in timings), []) == tokens  # every token still belongs to one word
    # without spaces between words: every whole character is a word (，is three byte-level tokens)
    tokens = tokenizer.encode(" 你好，世界。", add_special_tokens=False) + [eot]
    words, word_tokens = split_words(tokenizer, tokens, eot, "zh")
    assert "".join(words[:-1]) == " 你好，世界。" and "\ufffd" not in "".join(words)
    assert any(len(ids) > 1 for ids in word_tokens)


def test_alignment_heads_come_from_the_checkpoint_or_openai_whispers_default():
    _, base_config, _ = real_vocabulary("base")
    assert alignment_heads(base_config, 6, 8) == [(3, 1), (4, 2), (4, 3), (4, 7), (5, 1), (5, 2), (5, 4), (5, 6)]
    assert alignment_heads(base_config, 4, 4) == [(layer, head) for layer in (2, 3) for head in range(4)]  # not ours


def test_the_alignment_pass_reads_the_attention_transformers_computes():
    """Cross-attention of every head and the logits of one teacher-forced pass equal those of
    transformers' own decoder on the same encoder output (float64), whether the pass reuses the
    window's keys and values or projects them again."""
    runtime = tiny_runtime(11)
    model = tiny_whisper(11)
    window = runtime.encode(random_mel(11))
    tokens = runtime.special.prefix("en", "transcribe", timestamps=False) + [1000, 2000, 3000, 4000, 5000]
    heads = [(layer, head) for layer in range(runtime.decoder.n_layers) for head in range(runtime.decoder.n_heads)]
    runtime.decoder.start(window.hidden)
    scores, logits = attention_to_audio(runtime.decoder, window.hidden, tokens, heads)
    runtime.decoder.start(runtime.encode(random_mel(12)).hidden)  # another window: the pass must project again
    scores_again, logits_again = attention_to_audio(runtime.decoder, window.hidden, tokens, heads)
    assert torch.equal(scores, scores_again) and torch.equal(logits, logits_again)
    assert int(runtime.decoder.lengths.max()) == 0  # its cache was scratch space, left empty

    implementation = model.config._attn_implementation
    model.set_attn_implementation("eager")  # transformers returns attention weights from eager attention only
    try:
        with torch.inference_mode():
            out = model(encoder_outputs=(window.hidden,), decoder_input_ids=torch.tensor([tokens]),
                        output_attentions=True)
    finally:
        model.set_attn_implementation(implementation)
    theirs = torch.stack([out.cross_attentions[layer][0, head] for layer, head in heads])
    torch.testing.assert_close(torch.softmax(scores, dim=-1), theirs, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(logits, out.logits[0], rtol=1e-9, atol=1e-9)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A random tiny model as a transformers folder (tiny.en's vocabulary and generation config)."""
    from transformers import WhisperFeatureExtractor

    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer, generation_config, _ = real_vocabulary("tiny.en")
    tiny_whisper(6, dtype=torch.float32).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    generation_config.save_pretrained(folder)
    WhisperFeatureExtractor().save_pretrained(folder)
    return folder


def word_times(result) -> list:
    return [(s.start, s.end, s.tokens, [(w.word, w.start, w.end, w.probability) for w in s.words])
            for s in result.segments]


def test_drafters_give_the_same_words_and_times(tiny_model_dir):
    """Long-form on a random model: words in every window, windows moved by the last word's end;
    the shipped draft on real speech, without timestamps too, is checked below."""
    from whisperspec.transcribe import Transcriber

    seconds = 45
    audio = np.random.default_rng(0).normal(0, 0.1, 16000 * seconds).astype(np.float32)
    options = dict(language="en", temperature=0, timestamps=True, word_timestamps=True)
    plain = Transcriber(str(tiny_model_dir), draft="none", **options).transcribe(audio)
    words = [w for s in plain.segments for w in s.words]
    assert len(words) > 10 and plain.stats.windows >= 2
    assert all(0 <= w.start <= w.end <= seconds and w.word for w in words)
    for draft in ("ngram", "early-exit:2"):
        fast = Transcriber(str(tiny_model_dir), draft=draft, lookahead="3", **options).transcribe(audio)
        assert word_times(fast) == word_times(plain), draft
        assert fast.stats.speculation.accepted > 0, draft


# ------------------------------------------------------------------ real speech
@pytest.fixture(scope="module")
def base():
    from whisperspec.transcribe import Transcriber

    return Transcriber("base", language="en", draft="none", word_timestamps=True)


@pytest.mark.real
@pytest.mark.parametrize("draft", ["auto", "trained"])
def test_words_with_a_draft_are_the_plain_ones_on_real_speech(base, draft):
    """`auto` as users get it, and the shipped draft itself (which `auto` may not build for short
    files), on a clip without timestamps and one with them."""
    from test_transcribe import with_drafter

    speculative = with_drafter(base, draft, "3")
    accepted = 0
    for clip, timestamps in (("ss-noservice", False), ("vm-options", True)):
        plain = base.transcribe(CLIPS / f"{clip}.flac", timestamps=timestamps)
        fast = speculative.transcribe(CLIPS / f"{clip}.flac", timestamps=timestamps)
        assert word_times(fast) == word_times(plain), clip
        accepted += fast.stats.speculation.accepted
        assert "".join(w.word for s in plain.segments for w in s.words) == "".join(s.text for s in plain.segments)
        assert plain.segments[0].avg_logprob < 0 and 0 <= plain.segments[0].no_speech_prob <= 1
    assert accepted > 0 or draft == "auto"


@pytest.mark.real
def test_word_times_are_close_to_faster_whispers_on_real_speech(tmp_path):
    """The clips in tests/data one by one (no timestamps, one window each) and joined into one
    file of three windows (long-form), against faster-whisper on the same checkpoint. The median
    distance measured is 0.00 s for starts and ends (docs/WORDS.md); the bound leaves a margin."""
    from whisperspec.evaluation.manifest import Utterance
    from whisperspec.evaluation.word_times import compare_word_times

    clips = sorted(CLIPS.glob("*.flac"))
    pause = np.zeros(16000, dtype=np.float32)
    joined = np.concatenate([part for clip in clips for part in (sf.read(clip, dtype="float32")[0], pause)])
    sf.write(tmp_path / "joined.flac", joined, 16000)
    utterances = [Utterance(clip.stem, str(clip), "", "en", sf.info(clip).duration) for clip in clips]
    utterances.append(Utterance("joined", str(tmp_path / "joined.flac"), "", "en", len(joined) / 16000))
    summary = compare_word_times(utterances, draft="none").summary()
    assert summary["matched"] >= 0.9 * max(summary["words_ours"], summary["words_faster_whisper"]), summary
    assert summary["median_start_s"] < 0.1 and summary["median_end_s"] < 0.1
    assert summary["p90_start_s"] < 0.3 and summary["p90_end_s"] < 0.3
