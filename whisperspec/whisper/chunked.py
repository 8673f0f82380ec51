"""Chunked long-form: a file's speech cut into independent windows of at most 30 s.

faster-whisper's `BatchedInferencePipeline` (and WhisperX) transcribe a long file this way: voice
activity detection finds the speech, consecutive speech regions are joined into chunks of at most
30 s, and each chunk is one window decoded on its own, with no previous-text prompt and no
timestamps inside it. No window waits for the one before it, so the windows of one file fill the
rows of a batch (`whisperspec.corpus.batching`): a single long file decodes in parallel.

The sequential walk (`whisperspec.whisper.longform.LongformWalk`, the default) reads each window in
the light of the text so far and moves where the model's timestamps say; the chunked walk gives that
up for parallelism, so its text can differ from the sequential one's. It is the same whether its
chunks are decoded alone or batched. The language is detected on the first chunk, as the sequential
walk detects it on its first window, and the other chunks are decoded in it. Each chunk with speech
is one segment spanning its chunk; word timestamps split it finer.

Each chunk is decoded once, at the first temperature of the schedule, as faster-whisper's batched
pipeline does: the fallback to higher temperatures is there so that a looping window does not
prompt the next one with its loop, and a chunk prompts nothing; retried, a chunk would be decoded
again alone, five times over at worst, while the batch waits (a looping chunk is still cut short
as it loops: `whisperspec.whisper.decode.RunawayStop`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from whisperspec.audio import HOP_LENGTH, N_SAMPLES
from whisperspec.result import Segment
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.alignment import WordAligner
from whisperspec.whisper.decode import DecodeOptions, WindowResult, window_prompt
from whisperspec.whisper.longform import FRAMES_PER_SECOND, N_FRAMES, LongformResult, carry_window_scores


def chunk_spans(region_ends: list[int], limit: int = N_SAMPLES) -> list[tuple[int, int]]:
    """[start, end) sample spans of joined speech (regions back to back, the i-th ending at
    `region_ends[i]`): consecutive regions together while they fit in `limit` samples (faster-whisper's
    `collect_chunks`), a region longer than `limit` cut into pieces of `limit`."""
    spans, start, previous = [], 0, 0
    for end in region_ends:
        if end - start > limit and previous > start:  # this region would overflow the chunk: close it
            spans.append((start, previous))
            start = previous
        previous = end
    if previous > start:
        spans.append((start, previous))
    return [(s, min(s + limit, end)) for start, end in spans for s in range(start, end, limit)]


class ChunkedWalk:
    """The chunks of one file's joined speech: `ready()` gives the chunks that can be decoded now
    (each with `window_mel`, `prompt`, `options` and `advance`, as a sequential walk has them),
    all at once once the language is known. `mel` [n_mels, content_frames + N_FRAMES] is the joined
    speech's log-mel padded by a window of silence, which pads every chunk to 30 s as a short clip is.
    """

    def __init__(self, runtime, mel: torch.Tensor, content_frames: int, spans: list[tuple[int, int]],
                 options: DecodeOptions, initial_prompt: list[int] = (), carried: list[int] = (),
                 words: WordAligner | None = None):
        if options.timestamps:
            raise ValueError("chunked long-form decodes each chunk as one segment, without timestamps")
        self.runtime, self.mel, self.content_frames, self.words = runtime, mel, content_frames, words
        self.options = replace(options, temperatures=options.temperatures[:1])
        self.prompt = window_prompt(list(carried), list(initial_prompt))
        frames = [(start // HOP_LENGTH, min(end // HOP_LENGTH, content_frames)) for start, end in spans]
        self.chunks = [_Chunk(self, index, start, end) for index, (start, end) in enumerate(frames) if end > start]
        self.results: list[WindowResult] = []  # of the chunks taken so far, in order
        self.segments: list[Segment] = []
        self.stats = SpeculationStats()

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.chunks)

    def ready(self) -> list["_Chunk"]:
        waiting = self.chunks[len(self.results):]
        return waiting[:1] if self.options.language is None else waiting

    def take(self, chunk: "_Chunk", result: WindowResult, hidden: torch.Tensor | None) -> float:
        if chunk.index != len(self.results):  # word timestamps carry the last speech's end from chunk to chunk
            raise ValueError(f"chunk {chunk.index} advanced before chunk {len(self.results)}")
        self.results.append(result)
        self.stats.merge(result.stats)
        self.options = replace(self.options, language=result.language)
        offset, frames = chunk.start / FRAMES_PER_SECOND, chunk.end - chunk.start
        text = "" if result.is_silence(self.options) else self.runtime.decode_text(result.tokens)
        if text.strip():
            segment = Segment(offset, chunk.end / FRAMES_PER_SECOND, text, result.tokens, result.from_draft)
            carry_window_scores([segment], result)
            if self.words is not None:
                self.words.add(hidden, [segment], result.language, offset, frames)
            self.segments.append(segment)
        return frames / FRAMES_PER_SECOND

    def result(self) -> LongformResult:
        return LongformResult(self.segments, self.options.language, self.results, self.stats)


class _Chunk:
    """One chunk of a `ChunkedWalk`: mel frames [start, end) of the joined speech."""

    def __init__(self, walk: ChunkedWalk, index: int, start: int, end: int):
        self.walk, self.index, self.start, self.end = walk, index, start, end

    @property
    def options(self) -> DecodeOptions:
        return self.walk.options

    @property
    def prompt(self) -> list[int]:
        return self.walk.prompt

    def window_mel(self) -> torch.Tensor:
        walk, frames = self.walk, self.end - self.start
        silence = walk.mel[:, walk.content_frames:walk.content_frames + N_FRAMES - frames]
        return torch.cat([walk.mel[:, self.start:self.end], silence], dim=1)

    def advance(self, result: WindowResult, hidden: torch.Tensor | None = None) -> float:
        return self.walk.take(self, result, hidden)
