"""A file's log-mel streamed window by window is the whole file's log-mel, bit for bit, and a
transcription reads it so: the same transcript as from the samples, every other file going on when
one goes away between its two reads."""

from __future__ import annotations

import os
from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
import torch

from whisperspec.audio import N_FRAMES, N_SAMPLES, SAMPLE_RATE, AudioError, load_audio, log_mel_spectrogram
from whisperspec.streamed_mel import StreamedLogMel

from test_corpus import _same, noise_files, tiny_transcriber


def speech_like(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    """Noise under a tone whose loudness changes, with a quiet stretch: the loudest bin is far from
    the start, and quiet frames sit near the dynamic-range floor."""
    t = np.arange(int(rate * seconds)) / rate
    envelope = 0.05 + 0.4 * (np.sin(2 * np.pi * t / 23.0) ** 2) * (t > seconds / 3)
    noise = np.random.default_rng(seed).normal(0, 0.02, t.size)
    return (envelope * np.sin(2 * np.pi * 440 * t) + noise).astype(np.float32)


def write_m4a(path: Path, samples: np.ndarray, rate: int) -> Path:
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="fltp", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


@pytest.mark.parametrize("name, rate, seconds, n_mels", [
    ("clip.flac", 16000, 100.3, 80),  # several blocks, the last one partial
    ("clip.wav", 44100, 75.0, 128),  # resampled while it streams
    ("clip.m4a", 22050, 40.0, 80),  # FFmpeg's decoder, a length the container only estimates
    ("tiny.flac", 16000, 0.005, 80),  # shorter than the STFT's reflection: centred at the end
])
def test_every_window_is_that_slice_of_the_whole_file_features(tmp_path, name, rate, seconds, n_mels):
    path = tmp_path / name
    samples = speech_like(rate, seconds)
    if name.endswith(".m4a"):
        write_m4a(path, samples, rate)
    else:
        sf.write(path, samples, rate)
    whole = log_mel_spectrogram(load_audio(path), n_mels, padding=N_SAMPLES)
    streamed = StreamedLogMel(path, n_mels)
    assert streamed.shape == tuple(whole.shape)
    assert streamed.duration == len(load_audio(path)) / SAMPLE_RATE
    assert streamed.peak == float(np.abs(load_audio(path)).max())
    content = whole.shape[1] - N_FRAMES
    # the long-form walk's reads: a window again (a fallback), windows that overlap, one across blocks
    for seek in [0, 0] + sorted({s for s in [1234, 2999, 3000, 4470, 6000, 8999, content - 1] if 0 < s <= content}):
        assert torch.equal(streamed[:, seek:seek + N_FRAMES], whole[:, seek:seek + N_FRAMES]), seek


def test_a_stream_is_read_forward_by_column_ranges_and_may_skip_ahead(tmp_path):
    path = tmp_path / "clip.flac"
    sf.write(path, speech_like(16000, 160.0), 16000)
    whole = log_mel_spectrogram(load_audio(path), 80, padding=N_SAMPLES)
    streamed = StreamedLogMel(path)
    streamed[:, 6100:9100]
    assert torch.equal(streamed[:, 6000:9000], whole[:, 6000:9000])  # back within the block the last read started in
    assert torch.equal(streamed[:, 6100:6200], whole[:, 6100:6200])
    assert torch.equal(streamed[:, 12500:15500], whole[:, 12500:15500])  # blocks jumped over are read past
    with pytest.raises(IndexError, match="read forward"):
        streamed[:, 2000:5000]
    with pytest.raises(IndexError, match="column ranges"):
        streamed[0, 6000:9000]


def test_a_file_gone_between_its_two_reads_is_an_error_naming_it(tmp_path):
    path = tmp_path / "gone.flac"
    sf.write(path, speech_like(16000, 5.0), 16000)
    streamed = StreamedLogMel(path)
    os.remove(path)
    with pytest.raises(AudioError, match="gone.flac"):
        streamed[:, :N_FRAMES]


def test_a_file_that_changed_length_between_its_two_reads_is_an_error_naming_it(tmp_path):
    path = tmp_path / "changed.flac"
    sf.write(path, speech_like(16000, 5.0), 16000)
    streamed = StreamedLogMel(path)
    sf.write(path, speech_like(16000, 4.0), 16000)
    with pytest.raises(AudioError, match="changed.flac: the file changed while it was being read"):
        streamed[:, :N_FRAMES]


@pytest.mark.parametrize("timestamps", [False, True])
def test_a_file_transcribes_as_its_samples_do(tmp_path, timestamps):
    """The file streams its windows; its samples, given as an array, are featurised whole."""
    transcriber = tiny_transcriber(4, "int8", timestamps=timestamps, temperatures=(0.0,))
    for path in noise_files(tmp_path, [7, 95]):
        from_file = transcriber.transcribe(path)
        assert isinstance(transcriber.prepare(path).mel, StreamedLogMel)
        assert from_file.stats.windows >= (4 if timestamps and "95" in path.name else 1)
        assert _same(from_file, transcriber.transcribe(load_audio(path)))


def test_in_a_folder_a_file_gone_before_its_windows_are_read_fails_alone(tmp_path):
    transcriber = tiny_transcriber(5, timestamps=True, temperatures=(0.0,))
    paths = noise_files(tmp_path, [3, 47, 9])
    alone = {str(p): transcriber.transcribe(p) for p in paths}
    gone, prepare = paths[1], transcriber.prepare

    def prepare_then_delete(audio, **options):
        prepared = prepare(audio, **options)
        if str(audio) == str(gone):
            os.remove(gone)
        return prepared

    transcriber.prepare = prepare_then_delete
    results = {r.source.audio: r for r in transcriber.transcribe_many(paths, batch_size=2)}
    assert not results[str(gone)].ok and gone.name in results[str(gone)].error
    for path in paths:
        if path != gone:
            assert _same(results[str(path)].transcription, alone[str(path)])
