"""A file's log-mel read window by window as the long-form walk reaches it, in two reads of the file.

Whisper floors every bin at 80 dB below the loudest bin of the whole input, so the first read finds
that bin (and the length and peak amplitude); the second featurises the file as its windows are
asked for. Both compute each block of N_FRAMES frames from the same samples with the same function
as `log_mel_spectrogram` does for the whole file (`block_span`), so every window is the same bits
as a slice of it. Memory holds the block being read and the blocks a window spans, never the
file's samples (a 2-hour file's are 461 MB at 16 kHz) nor its features (230 MB more).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch

from whisperspec.audio import (DEFAULT_MAX_SECONDS, HOP_LENGTH, N_FFT, N_FRAMES, N_SAMPLES, SAMPLE_RATE, AudioError,
                               block_span, log10_mel_power, open_audio, whisper_scaled)


class CentredBlocks:
    """16-kHz blocks in → the spans of the centred signal (the input, one window of zeros appended,
    reflect-padded by N_FFT // 2 on both sides, as `log_mel_spectrogram` pads it) that its feature
    blocks read (`block_span`), each out as soon as its samples are in."""

    def __init__(self):
        self.buffer = np.zeros(0, dtype=np.float32)  # from the next block's first sample on
        self.incoming: list[np.ndarray] = []  # to go after it, joined once a block's worth is in
        self.n_incoming, self.n_samples, self.block, self.centred = 0, 0, 0, False
        self.peak = 0.0  # the input's largest absolute sample

    def add(self, samples: np.ndarray) -> list[np.ndarray]:
        self.n_samples += len(samples)
        if len(samples):
            self.peak = max(self.peak, float(np.abs(samples).max()))
        self.incoming.append(samples)
        self.n_incoming += len(samples)
        if len(self.buffer) + self.n_incoming < N_FRAMES * HOP_LENGTH + N_FFT:  # a decoder's blocks can be small
            return []
        self._join()
        spans = []
        while len(self.buffer) >= (N_FRAMES - 1) * HOP_LENGTH + N_FFT:  # a whole block
            spans.append(self._next_block(N_FRAMES))
        return spans

    def finish(self) -> list[np.ndarray]:
        """The last blocks, the padding included: (n_samples + N_SAMPLES) // HOP_LENGTH frames in all."""
        self.incoming.append(np.zeros(N_SAMPLES + N_FFT // 2, dtype=np.float32))
        self.n_incoming += N_SAMPLES + N_FFT // 2
        self._join()
        frames, spans = self.frames, []
        while self.block * N_FRAMES < frames:
            start, end = block_span(self.block, frames)
            spans.append(self._next_block((end - start - N_FFT) // HOP_LENGTH + 1))
        return spans

    @property
    def frames(self) -> int:
        return (self.n_samples + N_SAMPLES) // HOP_LENGTH

    def _join(self) -> None:
        self.buffer = np.concatenate([self.buffer, *self.incoming])
        self.incoming, self.n_incoming = [], 0
        if not self.centred:
            # The reflection of the input's start; its end's is of the appended zeros: zeros.
            self.buffer = np.concatenate([self.buffer[N_FFT // 2:0:-1], self.buffer])
            self.centred = True

    def _next_block(self, frames: int) -> np.ndarray:
        span = self.buffer[:(frames - 1) * HOP_LENGTH + N_FFT]
        self.buffer, self.block = self.buffer[N_FRAMES * HOP_LENGTH:], self.block + 1
        return span


class StreamedLogMel:
    """A file's log-mel [n_mels, frames], the frames `log_mel_spectrogram(load_audio(path), n_mels,
    padding=N_SAMPLES)` gives, read by forward-moving column slices: `mel[:, seek:seek + N_FRAMES]`.

    Constructing it reads the file once (raising AudioError for unreadable audio); the windows read
    it again, from the start on the first slice asked for. A slice may start before the last one's
    end, not before the block the last one started in.
    """

    def __init__(self, path, n_mels: int = 80, max_seconds: float = DEFAULT_MAX_SECONDS):
        self.path, self.n_mels, self.max_seconds = path, n_mels, max_seconds
        centred = CentredBlocks()
        loudest = max(float(block.max()) for block in self._log10_mel_blocks(centred))
        self.n_samples, self.peak = centred.n_samples, centred.peak
        self.loudest, self.shape = torch.tensor(loudest, dtype=torch.float32), (n_mels, centred.frames)
        self._blocks: Iterator[torch.Tensor] | None = None
        self._held: list[torch.Tensor] = []  # consecutive feature blocks, the first of them numbered:
        self._first_held = 0

    @property
    def duration(self) -> float:
        return self.n_samples / SAMPLE_RATE

    def __getitem__(self, key) -> torch.Tensor:
        rows, columns = key
        if rows != slice(None) or not isinstance(columns, slice) or columns.step not in (None, 1):
            raise IndexError("a streamed log-mel is read by column ranges: mel[:, start:stop]")
        start, stop, _ = columns.indices(self.shape[1])
        stop = max(start, stop)
        first, last = start // N_FRAMES, max(start, stop - 1) // N_FRAMES
        if first < self._first_held:
            raise IndexError(f"a streamed log-mel is read forward: frame {start} was already let go")
        if self._blocks is None:
            self._blocks = self._featurised()
        behind = min(first - self._first_held, len(self._held))
        del self._held[:behind]  # blocks behind the walk
        self._first_held += behind
        while self._first_held < first:  # blocks jumped over: read past, not held
            next(self._blocks)
            self._first_held += 1
        while self._first_held + len(self._held) <= last:
            self._held.append(next(self._blocks))
        held = torch.cat(self._held[:last - self._first_held + 1], dim=1)
        offset = self._first_held * N_FRAMES
        return held[:, start - offset:stop - offset]

    def _featurised(self) -> Iterator[torch.Tensor]:
        return (whisper_scaled(block, self.loudest) for block in self._log10_mel_blocks(CentredBlocks(), self.n_samples))

    def _log10_mel_blocks(self, centred: CentredBlocks, expected: int | None = None) -> Iterator[torch.Tensor]:
        """log10 mel power of each feature block, the file read once more through `centred`;
        `expected`: the samples the first read found (a file changed since raises AudioError)."""
        for samples in open_audio(self.path, self.max_seconds).blocks:
            yield from (log10_mel_power(torch.from_numpy(span), self.n_mels) for span in centred.add(samples))
        if expected is not None and centred.n_samples != expected:
            raise AudioError(f"{self.path}: the file changed while it was being read")
        yield from (log10_mel_power(torch.from_numpy(span), self.n_mels) for span in centred.finish())
