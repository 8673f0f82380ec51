"""Any audio (file or samples) → float32 mono 16 kHz → Whisper's log-mel spectrogram."""

from __future__ import annotations

import errno
import math
import os
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator

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
        return _joined(open_audio(source, max_seconds))
    name = "audio array"
    rate = _array_rate(sample_rate, name)
    array = _array_to_mono(source, name)
    _check_duration(name, len(array), rate, max_seconds)
    to_16k = To16k(name, rate)
    samples, tail = to_16k(array), to_16k.flush()
    return np.concatenate([samples, tail]) if tail.size else samples


@dataclass
class AudioBlocks:
    """An input read in order as float32 mono 16-kHz blocks in [-1, 1], each checked as it comes
    (a file's reading raises AudioError where it finds a problem, which may be after some blocks)."""

    name: str
    length: int | None  # 16-kHz samples its header declares; None: not declared
    blocks: Iterator[np.ndarray]


def open_audio(path, max_seconds: float = DEFAULT_MAX_SECONDS) -> AudioBlocks:
    """A file's 16-kHz blocks, read and resampled a block at a time as they are taken: a long file
    costs memory for one block, and reading it again is how a second pass over it is made."""
    path = Path(path)
    _check_is_file(path)
    tried = ""
    if path.suffix.lower() not in RAW_FORMATS:  # a headerless file is for FFmpeg, told its format
        try:
            return _soundfile_blocks(path, max_seconds)
        except sf.SoundFileError as soundfile_error:
            tried = f"soundfile: {_reason(soundfile_error)}; "
    return _pyav_blocks(path, max_seconds, tried)


class To16k:
    """Mono chunks at `rate` → 16-kHz chunks, each checked as it comes: soxr's stream (librosa's
    default resampler), which gives the same samples as resampling the whole input at once."""

    def __init__(self, name: str, rate: int):
        import soxr

        self.name, self.rate, self.n_input = name, rate, 0
        self.stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32",
                                                                            quality="HQ")

    def output_length(self, n_input: int | None) -> int | None:
        return None if n_input is None else math.ceil(n_input * SAMPLE_RATE / self.rate)

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        if not np.isfinite(chunk).all():
            raise AudioError(f"{self.name}: contains NaN or infinite samples")
        self.n_input += chunk.size
        # Float inputs may exceed full scale, and the resampler's ringing can overshoot it slightly
        return _clipped(chunk.copy() if self.stream is None else self.stream.resample_chunk(chunk))

    def flush(self) -> np.ndarray:
        """What the resampler still holds; raises AudioError when no sample came at all."""
        if self.n_input == 0:
            raise AudioError(f"{self.name}: contains no audio samples")
        if self.stream is None:
            return np.zeros(0, dtype=np.float32)
        return _clipped(self.stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))


def _clipped(samples: np.ndarray) -> np.ndarray:
    return np.clip(samples, -1.0, 1.0, out=samples)


def _joined(audio: AudioBlocks) -> np.ndarray:
    """All blocks in one array, written into it as they come (sized from the declared length, grown
    by half when that is unknown or short), so the samples are held once, not also as blocks."""
    samples, length = np.empty((audio.length or 0) + 64, dtype=np.float32), 0
    for block in audio.blocks:
        end = length + len(block)
        if end > len(samples):
            grown = np.empty(max(end, len(samples) * 3 // 2), dtype=np.float32)
            grown[:length] = samples[:length]
            samples = grown
        samples[length:end] = block
        length = end
    return samples[:length]


def is_silent(audio, threshold: float = SILENCE_PEAK) -> bool:
    """True when no sample reaches `threshold` (peak amplitude): nothing worth decoding."""
    samples = np.asarray(audio)
    return samples.size == 0 or float(np.max(np.abs(samples))) < threshold


def _check_is_file(path: Path) -> None:
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


def _soundfile_blocks(path: Path, max_seconds: float) -> AudioBlocks:
    """libsndfile: wav/flac/ogg/mp3 and friends, with the length checked before reading. The first
    block is read here, so that a file libsndfile opens but cannot decode goes to FFmpeg instead."""
    file = sf.SoundFile(path)
    try:
        _check_rate(str(path), file.samplerate)
        _check_duration(str(path), file.frames, file.samplerate, max_seconds)
        to_16k = To16k(str(path), file.samplerate)
        reader = file.blocks(READ_BLOCK_SECONDS * file.samplerate, dtype="float32", always_2d=True)
        first = next(reader, None)
    except BaseException:
        file.close()
        raise

    def blocks() -> Iterator[np.ndarray]:
        with file:
            for block in ([] if first is None else [first]):
                yield to_16k(block.mean(axis=1))  # [samples, channels] -> mono
            try:
                for block in reader:
                    yield to_16k(block.mean(axis=1))
            except sf.SoundFileError as error:
                raise AudioError(f"{path}: cannot be decoded as audio: truncated/corrupt "
                                 f"(soundfile: {_reason(error)})") from error
            yield to_16k.flush()

    return AudioBlocks(str(path), to_16k.output_length(file.frames), blocks())


def _pyav_blocks(path: Path, max_seconds: float, tried: str) -> AudioBlocks:
    """FFmpeg for the rest (m4a/aac, raw G.722, ...); the length is checked while decoding since
    containers may not declare it."""
    import av  # imported here: libsndfile reads the common formats, and PyAV's import is slow

    def undecodable(error: Exception) -> AudioError:
        return AudioError(f"{path}: cannot be decoded as audio: not an audio file, or truncated/corrupt "
                          f"({tried}PyAV: {_reason(error)})")

    try:
        container = av.open(str(path), format=RAW_FORMATS.get(path.suffix.lower()))
    except av.error.FFmpegError as error:
        raise undecodable(error) from error
    try:
        if not container.streams.audio:
            raise AudioError(f"{path}: contains no audio stream")
        stream = container.streams.audio[0]
        _check_rate(str(path), stream.rate)
    except BaseException:
        container.close()
        raise
    to_16k = To16k(str(path), stream.rate)
    declared = int(stream.duration * stream.time_base * stream.rate) if stream.duration and stream.time_base else None
    if declared is not None and declared > MAX_SAMPLE_RATE * max_seconds:
        declared = None  # a header's claim, checked as decoding goes: no array sized from it

    def blocks() -> Iterator[np.ndarray]:
        # Any codec sample format → float planar in [-1, 1]. Rate and layout are kept, so the
        # converter buffers nothing and needs no flush.
        # Codec frames are small (1024 samples of AAC): they are gathered into blocks of
        # READ_BLOCK_SECONDS, as libsndfile's are read, so per-call costs are paid per block.
        to_float, decoded, held, n_held = av.AudioResampler(format="fltp"), 0, [], 0
        with container:
            try:
                for frame in container.decode(stream):
                    for converted in to_float.resample(frame):
                        held.append(converted.to_ndarray())
                        n_held += converted.samples
                    decoded += frame.samples
                    _check_duration(str(path), decoded, stream.rate, max_seconds)
                    if n_held >= READ_BLOCK_SECONDS * stream.rate:
                        yield to_16k(np.concatenate(held, axis=1).mean(axis=0))  # [channels, samples] -> mono
                        held, n_held = [], 0
            except av.error.FFmpegError as error:
                raise undecodable(error) from error
        if held:
            yield to_16k(np.concatenate(held, axis=1).mean(axis=0))
        yield to_16k.flush()

    return AudioBlocks(str(path), to_16k.output_length(declared), blocks())


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
    length, half = audio.shape[-1] + padding, N_FFT // 2
    if length <= half:
        raise ValueError(f"log_mel_spectrogram: {length} samples, fewer than the STFT's centring needs ({half + 1})")
    # torch.stft's centring (reflection at both ends) of the padded audio, built in one array
    centred = audio.new_zeros(length + 2 * half)
    centred[half:half + audio.shape[-1]] = audio
    centred[:half] = centred[half + 1:2 * half + 1].flip(0)
    centred[half + length:] = centred[length - 1:length + half - 1].flip(0)
    frames = length // HOP_LENGTH
    log_spec = audio.new_empty(n_mels, frames)
    for block in range(math.ceil(frames / N_FRAMES)):
        log_spec[:, block * N_FRAMES:(block + 1) * N_FRAMES] = log10_mel_power(centred[slice(*block_span(block, frames))],
                                                                               n_mels)
    return whisper_scaled(log_spec, log_spec.max())


def block_span(block: int, frames: int) -> tuple[int, int]:
    """The samples of the centred signal that block `block` of an input's `frames` frames reads.

    Features are computed N_FRAMES frames at a time at fixed places, whether the whole input is
    featurised at once or streamed a window at a time (`whisperspec.streamed_mel`): the same samples
    through the same products give the same bits (one product over all frames need not: a matrix
    product's kernel, and so its rounding, depends on how many columns it has).
    """
    first = block * N_FRAMES
    start = first * HOP_LENGTH
    return start, start + (min(N_FRAMES, frames - first) - 1) * HOP_LENGTH + N_FFT


def log10_mel_power(centred: torch.Tensor, n_mels: int) -> torch.Tensor:
    """log10 of the mel power [n_mels, frames] of every frame that fits in `centred`, samples of the
    centred signal (reflect-padded by N_FFT // 2 on both sides) from a frame's start."""
    window, filters = (t.to(centred.device) for t in _stft_window_and_mel_filters(n_mels))
    stft = torch.stft(centred, N_FFT, HOP_LENGTH, window=window, center=False, return_complex=True)
    return torch.clamp(filters @ (stft.abs() ** 2), min=1e-10).log10()


def whisper_scaled(log10_mel: torch.Tensor, loudest) -> torch.Tensor:
    """`log10_mel`, in place, floored 80 dB below `loudest` (the loudest bin of the whole input),
    then scaled to about [-1, 1]."""
    return log10_mel.clamp_(min=loudest - 8.0).add_(4.0).div_(4.0)
