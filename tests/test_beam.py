"""Beam search (`whisperspec.whisper.beam`): a beam of one is greedy decoding, a wider beam is what
a plain beam search over full-sequence passes finds (float64 random models), and on real speech
beam 5 transcribes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tiny_models import random_mel, tiny_runtime
from whisperspec.whisper.beam import beam_search
from whisperspec.whisper.decode import DecodeOptions, RunawayStop, WindowDecoder, forced_prefix
from whisperspec.whisper.rules import WhisperLogitFilter


def window_setup(seed: int, timestamps: bool, vocabulary: str = "tiny.en"):
    runtime = tiny_runtime(seed, vocabulary)
    window = runtime.encode(random_mel(seed))
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=40)
    prefix = forced_prefix(runtime.special, [], "en", options)
    return runtime, window, options, prefix


def logit_filter(runtime, prefix, timestamps):
    return WhisperLogitFilter(runtime.special, len(prefix), timestamps, runtime.vocab_size)


@pytest.mark.parametrize("seed, timestamps", [(0, False), (1, True), (2, False), (2, True)])
def test_a_beam_of_one_is_greedy_decoding(seed, timestamps):
    runtime, window, options, prefix = window_setup(seed, timestamps)
    greedy = WindowDecoder(runtime).decode(window, options)
    runtime.decoder.start(window.hidden)
    stop = RunawayStop(runtime.decode_text, options.compression_ratio_threshold)
    beam = beam_search(runtime.decoder, prefix, options.max_new_tokens, runtime.special.eot,
                       logit_filter(runtime, prefix, timestamps), beam_size=1, stop=stop)
    tokens = beam.tokens[:-1] if beam.tokens[-1:] == [runtime.special.eot] else beam.tokens
    assert tokens == greedy.tokens and len(tokens) > 5
    # the same through the window decoder, whatever patience and length penalty (one hypothesis)
    one = WindowDecoder(runtime).decode(window, replace(options, beam_size=1, patience=2.0, length_penalty=0.5))
    assert one.tokens == greedy.tokens


def ending_sooner(rules, eot: int, bias: float):
    """The rules, and end-of-text made likelier by `bias`: random models never end a text, and a
    beam search's finished hypotheses are half of what it does."""
    def apply(tokens, logits):
        logits = rules(tokens, logits)
        logits[eot] += bias
        return logits

    return apply


@torch.inference_mode()
def reference_beam_search(runtime, window, prefix, rules, beam_size, patience, length_penalty, max_new):
    """openai-whisper's beam search written plainly: every hypothesis rescored from scratch by a
    full transformers pass over its whole sequence, every (hypothesis, token) pair ranked at once."""
    model, eot = runtime.model, runtime.special.eot

    def next_logprobs(tokens: list[int]) -> torch.Tensor:
        hidden = model.model.decoder(input_ids=torch.tensor([tokens]), encoder_hidden_states=window.hidden)
        logits = model.proj_out(hidden.last_hidden_state[0, -1])
        return torch.log_softmax(rules(tokens, logits.double()), dim=-1)

    beams, finished = [((), 0.0)], {}
    for _ in range(max_new):
        scores = torch.stack([score + next_logprobs(prefix + list(tokens)) for tokens, score in beams])
        order = torch.argsort(scores.flatten(), descending=True, stable=True)
        kept, ended = [], []
        for index in order.tolist():
            row, token = divmod(index, scores.shape[1])
            candidate = (beams[row][0] + (token,), float(scores[row, token]))
            (ended if token == eot else kept).append(candidate)
            if len(kept) == beam_size:
                break
        for tokens, score in ended:
            if len(finished) < round(beam_size * patience):
                finished[tokens] = score
        beams = kept
        if len(finished) >= round(beam_size * patience):
            break
    for tokens, score in sorted(beams, key=lambda b: b[1], reverse=True):
        if len(finished) >= beam_size:
            break
        finished[tokens + (eot,)] = score

    def rank(item):
        tokens, score = item
        length = len(tokens) - 1
        return score / (length if length_penalty is None else ((5 + length) / 6) ** length_penalty)

    return list(max(finished.items(), key=rank)[0])


@pytest.mark.parametrize("seed, timestamps, beam_size, patience, length_penalty, eot_bias", [
    (0, False, 2, 1.0, None, 0.0), (0, True, 4, 1.0, None, 2.0), (3, False, 3, 2.0, 0.6, 2.0),
    (3, True, 5, 1.5, 0.2, 2.0)])
def test_beam_search_finds_what_a_plain_beam_search_finds(seed, timestamps, beam_size, patience, length_penalty,
                                                          eot_bias):
    runtime, window, options, prefix = window_setup(seed, timestamps)
    eot, max_new = runtime.special.eot, 24
    rules = ending_sooner(logit_filter(runtime, prefix, timestamps), eot, eot_bias)
    runtime.decoder.start(window.hidden)
    ours = beam_search(runtime.decoder, prefix, max_new, eot, rules, beam_size, patience, length_penalty)
    expected = reference_beam_search(runtime, window, prefix, rules, beam_size, patience, length_penalty, max_new)
    assert ours.tokens == expected or ours.tokens + [eot] == expected  # an unfinished text has no end-of-text
    assert len(ours.logprobs) == len(ours.tokens) and ours.stats.target_passes > 0


def test_window_decoder_decodes_batches_by_beam_one_window_at_a_time():
    runtime = tiny_runtime(5)
    mel = random_mel(5, batch=2)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=20, beam_size=3)
    singles = [WindowDecoder(runtime).decode(runtime.encode(mel[i:i + 1]), options) for i in range(2)]
    batch = WindowDecoder(runtime).decode_batch(runtime.encode(mel), options)
    assert [r.tokens for r in batch] == [r.tokens for r in singles]
    greedy = WindowDecoder(runtime).decode(runtime.encode(mel[:1]), replace(options, beam_size=1))
    assert singles[0].avg_logprob >= greedy.avg_logprob - 0.5  # the same order of likelihood



def test_best_of_keeps_the_likeliest_of_its_samples():
    runtime = tiny_runtime(1)
    window = runtime.encode(random_mel(1))
    options = DecodeOptions(language="en", temperatures=(0.8,), max_new_tokens=20, seed=4)
    samples = [WindowDecoder(runtime).decode(window, replace(options, seed=4 + i)) for i in range(3)]
    assert len({tuple(s.tokens) for s in samples}) > 1

    def rank(result) -> float:  # openai-whisper's: the summed log-probability over the length
        return result.avg_logprob * (len(result.tokens) + 1) / len(result.tokens)

    best = WindowDecoder(runtime).decode(window, replace(options, best_of=3))
    assert best.tokens == max(samples, key=rank).tokens
    assert best.stats.rounds == sum(s.stats.rounds for s in samples)  # all three were decoded


def test_corpus_batches_give_each_file_its_beam_transcript(tmp_path):
    """transcribe_many decodes the windows of several files together; with a beam, each window
    is searched on its own, and each file reads as it does alone."""
    from test_corpus import _same, noise_files, tiny_transcriber

    transcriber = tiny_transcriber(2, timestamps=True, temperatures=(0.0,), beam_size=3)
    paths = noise_files(tmp_path, [3, 41, 9])
    alone = {str(p): transcriber.transcribe(p) for p in paths}
    assert all(r.stats.beam_size == 3 for r in alone.values())
    for result in transcriber.transcribe_many(paths, batch_size=3):
        assert _same(result.transcription, alone[result.source.audio]), result.source.audio


def test_an_interrupt_abandons_a_beam_search():
    """DecodeOptions.interrupt (the demo's cancel and time budget) is called before every pass."""
    runtime, window, options, prefix = window_setup(0, False)
    calls = []

    def interrupt():
        calls.append(len(calls))
        if len(calls) > 3:
            raise TimeoutError("the request's time is up")

    with pytest.raises(TimeoutError):
        WindowDecoder(runtime).decode(window, replace(options, beam_size=2, interrupt=interrupt))
    assert len(calls) == 4

@pytest.mark.real
def test_beam_five_transcribes_real_speech_and_drafts_nothing():
    import json
    from pathlib import Path

    from whisperspec.evaluation.scoring import score
    from whisperspec.transcribe import Transcriber

    clips = Path(__file__).parent / "data"
    references = {r["id"]: r["text"] for r in map(json.loads, (clips / "references.jsonl").read_text().splitlines())}
    transcriber = Transcriber("base", language="en", beam_size=5, draft="auto")
    texts = []
    for name in references:
        result = transcriber.transcribe(clips / f"{name}.flac")
        texts.append(result.text)
        assert result.stats.beam_size == 5
        if set(result.stats.temperatures) == {0.0}:  # windows decoded by beam search are not drafted
            assert result.stats.speculation.proposed == 0
    wer = score(list(references.values()), texts, "en").wer
    print("beam 5 WER", wer, texts)
    assert wer <= 0.05, texts
