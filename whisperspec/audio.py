"""Any audio (file or samples) → float32 mono 16 kHz → Whisper's log-mel spectrogram."""

from __future__ import annotations

import errno
import math
import os
import stat
from functools import lru_cache
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torch.nn.functional as F

from whisperspec.options import finite_number

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in one 30-s window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in one window

DEFAULT_MAX_SECONDS = 4 * 3600.0
# Sample rates real audio comes at; a header outside them is a broken or hostile file (a "1 Hz"
# WAV of 28 KB would resample to hours of audio).
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 2000, 768000
# Peak below -60 dBFS: digital silence, dither or codec noise floor, never speech.
SILENCE_PEAK = 1e-3

READ_BLOCK_SECONDS = 30  # a file is read (and resampled) this much at a time

# Headerless formats: nothing in the file tells FFmpeg what it is, so the extension must.
RAW_FORMATS = {".g722": "g722", ".gsm": "gsm"}


class AudioError(ValueError):
    """The input cannot be used as audio; the message names the file and what is wrong."""


def load_audio(source, sample_rate: int | None = None, *, max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
    """Float32 mono 16-kHz samples in [-1, 1] from a file path or from samples.

    source: a path (str / PathLike), or a numpy array / torch tensor of samples, 1-D or 2-D with
    channels on the smaller dimension, at `sample_rate` Hz (default 16000; ignored for files).
    Raises AudioError for a missing, empty, undecodable, sample-less, non-finite or too long input.
    """
    if isinstance(source, (str, os.PathLike)):
        samples = _read_file(Path(source), max_seconds)
    else:
        name = "audio array"
        rate = _array_rate(sample_rate, name)
        array = _array_to_mono(source, name)
        _check_duration(name, len(array), rate, max_seconds)
        samples = MonoAt16k(name, rate, len(array)).add(array).finish()
    # Float files may exceed full scale, and the resampler's ringing can overshoot it slightly
    # (in place: `finish` gave an array of our own)
    return np.clip(samples, -1.0, 1.0, out=samples)


class MonoAt16k:
    """Collects mono chunks at `rate` as 16-kHz samples, checking each chunk as it comes.

    A file is read and resampled block by block (soxr's stream, librosa's default resampler: the
    same samples as resampling it whole), each block written into one array sized from the input's
    length where it is known (`frames`), so a long file at another rate costs memory for its 16-kHz
    samples once: not for its whole decoded input, nor for the resampled blocks and their joined copy.
    """

    def __init__(self, name: str, rate: int, frames: int | None = None):
        import soxr

        self.name, self.rate, self.n_input, self.length = name, rate, 0, 0
        self.samples = np.empty(math.ceil((frames or 0) * SAMPLE_RATE / rate) + 64, dtype=np.float32)
        self.stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32",
                                                                            quality="HQ")

    def add(self, chunk: np.ndarray) -> "MonoAt16k":
        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        if not np.isfinite(chunk).all():
            raise AudioError(f"{self.name}: contains NaN or infinite samples")
        self.n_input += chunk.size
        self._append(chunk if self.stream is None else self.stream.resample_chunk(chunk))
        return self

    def _append(self, samples: np.ndarray) -> None:
        end = self.length + len(samples)
        if end > len(self.samples):  # a length not known, or longer than declared: grow by half
            grown = np.empty(max(end, len(self.samples) * 3 // 2), dtype=np.float32)
            grown[:self.length] = self.samples[:self.length]
            self.samples = grown
        self.samples[self.length:end] = samples
        self.length = end

    def finish(self) -> np.ndarray:
        """The samples: an array of their own (never the caller's)."""
        if self.n_input == 0:
            raise AudioError(f"{self.name}: contains no audio samples")
        if self.stream is not None:
            self._append(self.stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
        return self.samples[:self.length]


def is_silent(audio, threshold: float = SILENCE_PEAK) -> bool:
    """True when no sample reaches `threshold` (peak amplitude): nothing worth decoding."""
    samples = np.asarray(audio)
    return samples.size == 0 or float(np.max(np.abs(samples))) < threshold


def _read_file(path: Path, max_seconds: float) -> np.ndarray:
    try:
        info = path.stat()
    except OSError as error:
        reason = {errno.ENOENT: "no such file", errno.ELOOP: "a loop of symbolic links",
                  errno.EACCES: "permission denied", errno.ENOTDIR: "no such file"}.get(error.errno, error.strerror)
        raise AudioError(f"{path}: {reason}") from error
    if stat.S_ISDIR(info.st_mode):
        raise AudioError(f"{path}: is a folder, not an audio file")
    if not stat.S_ISREG(info.st_mode):
        raise AudioError(f"{path}: not a regular file (a FIFO, socket or device is not read)")
    if info.st_size == 0:
        raise AudioError(f"{path}: file is empty (0 bytes)")
    tried = ""
    if path.suffix.lower() not in RAW_FORMATS:  # a headerless file is for FFmpeg, told its format
        try:
            return _read_with_soundfile(path, max_seconds)
        except sf.SoundFileError as soundfile_error:
            tried = f"soundfile: {_reason(soundfile_error)}; "
    import av  # imported here: libsndfile reads the common formats, and PyAV's import is slow

    try:
        return _read_with_pyav(path, max_seconds)
    except av.error.FFmpegError as pyav_error:
        raise AudioError(f"{path}: cannot be decoded as audio: not an audio file, or truncated/corrupt "
                         f"({tried}PyAV: {_reason(pyav_error)})") from pyav_error


def _read_with_soundfile(path: Path, max_seconds: float) -> np.ndarray:
    """libsndfile: wav/flac/ogg/mp3 and friends, with the length checked before reading."""
    with sf.SoundFile(path) as file:
        _check_rate(str(path), file.samplerate)
        _check_duration(str(path), file.frames, file.samplerate, max_seconds)
        samples = MonoAt16k(str(path), file.samplerate, file.frames)
        for block in file.blocks(READ_BLOCK_SECONDS * file.samplerate, dtype="float32", always_2d=True):
            samples.add(block.mean(axis=1))  # [samples, channels] -> mono
        return samples.finish()


def _read_with_pyav(path: Path, max_seconds: float) -> np.ndarray:
    """FFmpeg for the rest (m4a/aac, raw G.722, ...); the length is checked while decoding since
    containers may not declare it."""
    import av

    with av.open(str(path), format=RAW_FORMATS.get(path.suffix.lower())) as container:
        if not container.streams.audio:
            raise AudioError(f"{path}: contains no audio stream")
        stream = container.streams.audio[0]
        _check_rate(str(path), stream.rate)
        # Any codec sample format → float planar in [-1, 1]. Rate and layout are kept, so the
        # resampler buffers nothing and needs no flush.
        to_float = av.AudioResampler(format="fltp")
        declared = int(stream.duration * stream.time_base * stream.rate) if stream.duration and stream.time_base else None
        if declared is not None and declared > MAX_SAMPLE_RATE * max_seconds:
            declared = None  # a header's claim, checked as decoding goes: no array sized from it
        samples, decoded = MonoAt16k(str(path), stream.rate, declared), 0
        for frame in container.decode(stream):
            for converted in to_float.resample(frame):
                samples.add(converted.to_ndarray().mean(axis=0))  # [channels, samples] -> mono
                decoded += converted.samples
            _check_duration(str(path), decoded, stream.rate, max_seconds)
    return samples.finish()


def _array_to_mono(source, name: str) -> np.ndarray:
    if isinstance(source, torch.Tensor):
        source = source.detach().cpu()
        source = (source.float() if source.is_floating_point() else source).numpy()  # numpy has no bfloat16
    array = np.asarray(source)
    if array.ndim not in (1, 2):
        raise AudioError(f"{name}: expected 1-D or 2-D samples, got shape {array.shape}")
    if np.issubdtype(array.dtype, np.signedinteger):  # integer PCM: full scale is the type's range
        array = array / -float(np.iinfo(array.dtype).min)
    elif np.issubdtype(array.dtype, np.unsignedinteger):  # unsigned PCM (8-bit WAV): silence is mid-range
        middle = float(np.iinfo(array.dtype).max // 2 + 1)
        array = (array.astype(np.float64) - middle) / middle
    elif not np.issubdtype(array.dtype, np.floating):
        raise AudioError(f"{name}: samples must be numbers (float or integer PCM), got {array.dtype}")
    array = array.astype(np.float32, copy=False)
    if array.ndim == 2:
        array = array.mean(axis=int(np.argmin(array.shape)))  # channels are the smaller dimension
    return array


def _array_rate(sample_rate, name: str) -> int:
    """The rate of samples given as an array: None means 16 kHz; anything else a whole number of Hz."""
    if sample_rate is None:
        return SAMPLE_RATE
    rate = finite_number(sample_rate)
    if not (rate > 0 and rate == int(rate)):
        raise AudioError(f"{name}: sample_rate {sample_rate!r} is not a positive whole number of Hz")
    _check_rate(name, int(rate))
    return int(rate)


def _check_rate(name: str, rate: int) -> None:
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise AudioError(f"{name}: sample rate {rate} Hz is not a plausible audio rate "
                         f"({MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz)")


def _check_duration(name: str, n_samples: int, rate: int, max_seconds: float) -> None:
    if n_samples > max_seconds * rate:
        raise AudioError(f"{name}: audio is too long (over max_seconds={max_seconds:g})")


def _reason(error: Exception) -> str:
    # libsndfile's and FFmpeg's own wording, without the path both libraries repeat.
    reason = getattr(error, "error_string", None) or getattr(error, "strerror", None) or str(error)
    return " ".join(reason.split()).rstrip(".")


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1):
    """Zero-pad or cut `array` (numpy or torch) along `axis` to exactly `length`, as Whisper's encoder expects."""
    size = array.shape[axis]
    if size > length:
        index = [slice(None)] * array.ndim
        index[axis] = slice(0, length)
        return array[tuple(index)]
    if size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        if isinstance(array, torch.Tensor):
            return F.pad(array, [side for before_after in reversed(widths) for side in before_after])
        return np.pad(array, widths)
    return array


@lru_cache(maxsize=None)
def _stft_window_and_mel_filters(n_mels: int) -> tuple[torch.Tensor, torch.Tensor]:
    # Slaney-style mel scale and area normalisation, as openai-whisper's mel_filters.npz (librosa's
    # defaults): transformers' WhisperFeatureExtractor filter bank, saved as package data like
    # openai-whisper's (computing it would cost a first file the import of librosa or transformers;
    # tests/test_audio.py checks the features against transformers' extractor, value for value).
    from whisperspec.resources import asset

    with np.load(asset("mel_filters.npz")) as filters:
        return torch.hann_window(N_FFT), torch.from_numpy(filters[f"mel_{n_mels}"])


def log_mel_spectrogram(audio, n_mels: int = 80, padding: int = 0) -> torch.Tensor:
    """Whisper's log-mel features [n_mels, frames] of 16-kHz samples (numpy or torch), one frame per 10 ms.

    padding: zeros appended before the STFT. With padding=N_SAMPLES (as openai-whisper) a whole
    file is featurised once: frames = (len(audio) + padding) // HOP_LENGTH, of which the first
    len(audio) // HOP_LENGTH hold content, and any 3000-frame window mel[:, seek:seek + N_FRAMES]
    is a complete encoder input.

    For audio of at most 30 s, mel[:, :N_FRAMES] equals transformers' WhisperFeatureExtractor
    output. A window of a longer file equals the extractor's features of that window's audio
    except for its first two and last frames, which see the neighbouring audio where the extractor
    reflects the window's own, and for the dynamic-range floor, which is taken over the whole file
    (as in openai-whisper and transformers' long-form path).
    """
    audio = torch.as_tensor(audio, dtype=torch.float32)
    if padding:
        audio = F.pad(audio, (0, padding))
    window, filters = (t.to(audio.device) for t in _stft_window_and_mel_filters(n_mels))
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    # The centred STFT yields one frame more than len // HOP_LENGTH; Whisper drops the last one.
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    # Dynamic range of 80 dB below the loudest bin of the whole input, then scaled to about [-1, 1].
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0
