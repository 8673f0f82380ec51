"""Voice activity detection: transcribe only the speech, like faster-whisper's `vad_filter`.

Silero VAD (the `silero-vad` package; its model file ships inside it, nothing is downloaded) gives
the speech probability of every 32-ms frame; silero-vad's own `get_speech_timestamps_from_probs`
turns them into speech regions with faster-whisper's `VadOptions` (names and defaults). The regions
are joined into one shorter recording, which is transcribed as any other, and the times of its
segments are mapped back to the original audio (`SpeechMap`, faster-whisper's SpeechTimestampsMap).
Silence then costs no decoder work, and Whisper is never asked for words in noise, where it makes
them up.
"""

from __future__ import annotations

import bisect
import functools
import warnings
from dataclasses import asdict, dataclass

import numpy as np

from whisperspec import defaults
from whisperspec.cpu import torch_threads

SAMPLE_RATE = 16000
FRAME = 512  # samples per Silero frame at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous frame each frame also reads


@dataclass(frozen=True)
class VadOptions:
    """faster-whisper's VadOptions. threshold: a frame is speech above this probability;
    neg_threshold: speech ends below this one (None: threshold - 0.15); speech regions shorter than
    min_speech_duration_ms are dropped, longer than max_speech_duration_s split; a region ends after
    min_silence_duration_ms of silence, and keeps speech_pad_ms of audio on each side."""

    threshold: float = defaults.VAD_THRESHOLD
    neg_threshold: float | None = None
    min_speech_duration_ms: int = defaults.VAD_MIN_SPEECH_DURATION_MS
    max_speech_duration_s: float = defaults.VAD_MAX_SPEECH_DURATION_S
    min_silence_duration_ms: int = defaults.VAD_MIN_SILENCE_DURATION_MS
    speech_pad_ms: int = defaults.VAD_SPEECH_PAD_MS


class SpeechDetector:
    """Finds the speech regions of 16-kHz audio with Silero VAD."""

    def __init__(self, options: VadOptions = VadOptions()):
        self.options = options
        self.network = _silero_network()

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """Speech probability of each 32-ms frame (the last one padded with zeros).

        silero-vad's own loop feeds the network one frame at a time from Python, with the LSTM
        state carried between calls: for an hour of audio that is 112,500 calls. Only the LSTM
        needs the frames in order, so the frames' features are computed for all of them in one
        batch and the LSTM runs as one torch LSTM over the sequence: the same network, the same
        probabilities (to ~1e-5: summation order), in a small part of the time.
        """
        import torch

        # Silero's network is a few small products per frame: two threads only wait on each other
        # (on a busy machine, many times slower)
        with torch_threads(1), torch.inference_mode():
            audio = torch.as_tensor(samples, dtype=torch.float32)
            frames = -(-len(audio) // FRAME)
            padded = torch.nn.functional.pad(audio, (CONTEXT, frames * FRAME - len(audio)))
            windows = padded.unfold(0, CONTEXT + FRAME, FRAME)  # each frame after its 64 samples of context
            model = self.network
            features = model.encoder(model.stft(windows)).squeeze(-1)  # [frames, 128]
            hidden, _ = self._lstm(features[:, None])  # [frames, 1, 128]
            speech = model.decoder.decoder(hidden[:, 0, :, None])  # [frames, 1, 1]
            return speech[:, 0].mean(-1).double().numpy()

    @functools.cached_property
    def _lstm(self):
        import torch

        cell = self.network.decoder.rnn
        lstm = torch.nn.LSTM(cell.weight_ih.shape[1], cell.weight_hh.shape[1])
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(lstm, f"{name}_l0").copy_(getattr(cell, name))
        return lstm.eval()

    def regions(self, samples: np.ndarray) -> list[tuple[int, int]]:
        """(start, end) sample ranges of speech, padded and merged as faster-whisper's are."""
        from silero_vad import get_speech_timestamps_from_probs

        speeches = get_speech_timestamps_from_probs(
            self.probabilities(samples).tolist(), sampling_rate=SAMPLE_RATE, audio_length_samples=len(samples),
            **asdict(self.options))
        return [(int(s["start"]), int(s["end"])) for s in speeches]


@functools.lru_cache(maxsize=1)
def _silero_network():
    """silero-vad's 16-kHz TorchScript network, from the file inside the package."""
    with torch_threads(1), warnings.catch_warnings():  # importing silero_vad sets 1 thread for the whole process
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # how it opens its file: not ours to act on
        try:
            from silero_vad import load_silero_vad
        except ImportError as error:
            raise ValueError("vad: needs the silero-vad package (pip install 'whisperspec[vad]')") from error
        return load_silero_vad()._model


class SpeechMap:
    """The speech regions of a recording, joined; times in the joined audio -> original times."""

    def __init__(self, regions: list[tuple[int, int]]):
        self.regions = regions
        self.ends, self.silence_before = [], []  # per region: its end in the joined audio, silence cut before it
        silence, previous_end = 0, 0
        for start, end in regions:
            silence += start - previous_end
            previous_end = end
            self.ends.append(end - silence)
            self.silence_before.append(silence / SAMPLE_RATE)

    def join(self, samples: np.ndarray) -> np.ndarray:
        return np.concatenate([samples[start:end] for start, end in self.regions]) if self.regions else samples[:0]

    @property
    def speech_seconds(self) -> float:
        return sum(end - start for start, end in self.regions) / SAMPLE_RATE

    def original_time(self, seconds: float, is_end: bool = False) -> float:
        """A time of the joined audio in the original. A time on the seam of two regions is the end
        of the first when `is_end`, else the start of the second."""
        sample = int(round(seconds * SAMPLE_RATE))
        index = bisect.bisect_left(self.ends, sample) if is_end else bisect.bisect_right(self.ends, sample)
        index = min(index, len(self.ends) - 1)
        return round(seconds + self.silence_before[index], 3)

    def segments(self, segments: list) -> list:
        """`segments` (with `start` and `end` in the joined audio) with original times, in place,
        their words' too."""
        for timed in (x for segment in segments for x in (segment, *(segment.words or []))):
            timed.start = self.original_time(timed.start)
            timed.end = max(self.original_time(timed.end, is_end=True), timed.start)
        return segments

