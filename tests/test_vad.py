"""VAD (`whisperspec.vad`): Silero's speech probabilities, computed for a whole file at once, are
the package's own; only speech is transcribed and its times are those of the original audio."""

from __future__ import annotations

from dataclasses import replace

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from whisperspec.evaluation.asterisk import room_noise
from whisperspec.evaluation.scoring import score
from whisperspec.vad import SAMPLE_RATE, SpeechDetector, SpeechMap, VadOptions

CLIPS = Path(__file__).parent / "data"
REFERENCES = {r["id"]: r["text"] for r in map(json.loads, (CLIPS / "references.jsonl").read_text().splitlines())}


def clip(name: str) -> np.ndarray:
    return sf.read(CLIPS / f"{name}.flac", dtype="float32")[0]


def noise(seconds: float, seed: int, level: float = 0.003) -> np.ndarray:
    """A quiet room, well above digital silence (peak ~0.015)."""
    return room_noise(seconds, level, np.random.default_rng(seed))


def test_whole_file_probabilities_are_silero_vads_own():
    from silero_vad import load_silero_vad

    audio = np.concatenate([noise(1.5, 0), clip("tt-weasels"), noise(2.2, 1), clip("agent-newlocation")])
    threads = torch.get_num_threads()
    ours = SpeechDetector().probabilities(audio)
    assert torch.get_num_threads() == threads  # silero_vad's import sets 1 thread for the process; put back
    model = load_silero_vad()
    torch.set_num_threads(threads)
    model.reset_states()
    with torch.inference_mode():
        theirs = model.audio_forward(torch.from_numpy(audio), SAMPLE_RATE)[0].double().numpy()
    assert ours.shape == theirs.shape == (-(-len(audio) // 512),)
    assert np.abs(ours - theirs).max() < 1e-4
    assert ours[:40].max() < 0.2 and ours.max() > 0.9  # noise, then speech


def test_regions_follow_faster_whispers_options():
    audio = np.concatenate([noise(3, 2), clip("tt-weasels"), noise(1, 3), clip("agent-newlocation"), noise(3, 4)])
    speech_start, speech_end = 3.0, 3 + (len(audio) / SAMPLE_RATE - 6)
    regions = SpeechDetector().regions(audio)  # 1 s pause < 2 s minimum silence: one region
    assert len(regions) == 1
    start, end = (r / SAMPLE_RATE for r in regions[0])
    assert speech_start - 0.6 < start < speech_start and speech_end < end < speech_end + 0.6
    short_silences = SpeechDetector(VadOptions(min_silence_duration_ms=300, speech_pad_ms=30)).regions(audio)
    assert len(short_silences) == 2


def test_speech_map_puts_times_back_where_they_were():
    second = SAMPLE_RATE
    speech = SpeechMap([(1 * second, 2 * second), (4 * second, 5 * second)])
    audio = np.arange(6 * second, dtype=np.float32)
    joined = speech.join(audio)
    assert len(joined) == 2 * second and joined[0] == second and joined[second] == 4 * second
    assert speech.speech_seconds == 2.0
    assert [speech.original_time(t) for t in (0, 0.5, 1.0, 1.5)] == [1.0, 1.5, 4.0, 4.5]
    assert speech.original_time(1.0, is_end=True) == 2.0  # the seam: end of the first region
    assert speech.original_time(2.0, is_end=True) == 5.0


@pytest.fixture(scope="module")
def with_vad():
    from whisperspec.transcribe import Transcriber

    return Transcriber("base", language="en", timestamps=True, vad=True)


@pytest.mark.real
def test_speech_between_long_noisy_pauses_gives_the_same_words_at_the_original_times(with_vad, tmp_path):
    names = ["ss-noservice", "tt-weasels", "privacy-prompt"]
    pauses = [noise(seconds, seed) for seed, seconds in enumerate((4.0, 8.0, 6.0, 5.0))]
    pieces, spans, cursor = [], [], 0.0
    for pause, name in zip(pauses, names):
        cursor += len(pause) / SAMPLE_RATE
        spans.append((cursor, cursor + len(clip(name)) / SAMPLE_RATE))
        cursor = spans[-1][1]
        pieces += [pause, clip(name)]
    path = tmp_path / "pauses.flac"
    sf.write(path, np.concatenate([*pieces, pauses[-1]]), SAMPLE_RATE)
    result = with_vad.transcribe(path)
    assert result.duration > 30 and result.stats.vad.regions == 3
    assert dict(result.stats_rows())["VAD"].endswith("ms") and 11 < result.stats.vad.speech_s < 17

    # corpus mode (windows of several files batched) gives the same segments
    batched = [r.transcription for r in with_vad.transcribe_many([str(path), str(path)], batch_size=2)]
    assert all([(s.start, s.end, s.text) for s in b.segments] == [(s.start, s.end, s.text) for s in result.segments]
               for b in batched)

    # the words of the speech alone (joined with short pauses, no noise, no VAD), but for a word or
    # two: Whisper hears the 0.4 s of noise VAD keeps around each region
    plain = copy.copy(with_vad)
    plain.speech_detector, plain.options = None, replace(with_vad.options, vad=None)
    joined = tmp_path / "joined.flac"
    pause = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    sf.write(joined, np.concatenate([x for name in names for x in (clip(name), pause)]), SAMPLE_RATE)
    speech_only = plain.transcribe(joined).text
    references = " ".join(REFERENCES[name] for name in names)
    assert score([speech_only], [result.text], "en").wer <= 0.1, (result.text, speech_only)
    assert score([references], [result.text], "en").wer <= 0.1, result.text

    # every segment starts and ends on speech, in the original file's time. A segment may start in
    # the speech before the pause it follows: Whisper's timestamps put it at the seam of the joined
    # regions, which maps to the end of the earlier one (faster-whisper's segments do the same).
    pad = 0.45  # speech_pad_ms, and the 20-ms steps of Whisper's timestamps

    def span_of(time: float) -> int | None:
        return next((i for i, (start, end) in enumerate(spans) if start - pad <= time <= end + pad), None)

    assert all(span_of(s.start) is not None and span_of(s.end) is not None for s in result.segments), \
        ([(s.start, s.end) for s in result.segments], spans)
    assert abs(result.segments[0].start - spans[0][0]) < 0.5
    for index, name in enumerate(names):  # each clip's words end on its own speech
        ending_here = " ".join(s.text for s in result.segments if span_of(s.end) == index)
        assert score([REFERENCES[name]], [ending_here], "en").wer <= 0.25, (name, ending_here)


@pytest.mark.real
def test_noise_without_speech_gives_an_empty_result(with_vad, tmp_path):
    path = tmp_path / "room.flac"
    sf.write(path, noise(12, 7, level=0.01), SAMPLE_RATE)
    result = with_vad.transcribe(path)
    assert result.text == "" and result.segments == [] and result.stats.vad.regions == 0
    silent = with_vad.transcribe(np.zeros(10 * SAMPLE_RATE, dtype=np.float32))
    assert silent.text == "" and silent.segments == []
