"""Sequential long-form transcription: 30-s windows, advanced by the timestamps Whisper predicts.

The same walk as openai-whisper's `transcribe()` and transformers' sequential long-form: decode a
window with timestamps, cut it into segments at consecutive timestamp pairs, move the window to the
last complete segment's end (or by a whole window), and condition the next window on the text
so far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch
from tqdm import tqdm

from whisperspec.result import Segment
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, WindowResult

N_FRAMES = 3000  # mel frames per 30-s window
FRAMES_PER_SECOND = 100
FRAMES_PER_TOKEN = 2  # the encoder halves the frame rate: one timestamp step = 2 mel frames


@dataclass
class LongformResult:
    segments: list[Segment]
    language: str | None
    windows: list[WindowResult]
    stats: SpeculationStats


def transcribe_longform(decoder: WindowDecoder, mel: torch.Tensor, content_frames: int, options: DecodeOptions,
                        initial_prompt: list[int] = (), condition_on_previous_text: bool = True,
                        progress: bool = False, encoder_seconds: list | None = None) -> LongformResult:
    """`mel` [n_mels, content_frames + N_FRAMES] is the whole file's log-mel, padded by one window."""
    runtime, special = decoder.runtime, decoder.runtime.special
    options = replace(options, timestamps=True)
    seek, segments, windows, stats = 0, [], [], SpeculationStats()
    context = list(initial_prompt)
    bar = tqdm(total=content_frames, unit="frames", disable=not progress, desc="transcribing")
    while seek < content_frames:
        window_frames = min(N_FRAMES, content_frames - seek)
        offset = seek / FRAMES_PER_SECOND
        window = _encode(runtime, mel[:, seek:seek + N_FRAMES], encoder_seconds)
        result = decoder.decode(window, options, prompt=context)
        options = replace(options, language=result.language)  # detected once, on the first window
        windows.append(result)
        stats.merge(result.stats)
        if result.is_silence(options):
            seek += window_frames
            bar.update(window_frames)
            continue
        new_segments, advance, consumed = split_segments(result.tokens, result.from_draft, special, offset,
                                                          window_frames)
        for segment in new_segments:
            segment.text = runtime.decode_text(segment.tokens)
        segments += [s for s in new_segments if s.text.strip()]
        if condition_on_previous_text and result.temperature <= 0.5:
            # the prompt keeps the timestamps, as openai-whisper's and faster-whisper's do: without
            # them the model repeats the previous text (docs/BENCHMARKS.md)
            context += consumed
        else:
            context = list(initial_prompt)  # a sampled window is a poor prompt for the next one
        seek += advance
        bar.update(advance)
    bar.close()
    return LongformResult(segments, options.language, windows, stats)


def _encode(runtime, window_mel: torch.Tensor, encoder_seconds: list | None):
    start = time.perf_counter()
    window = runtime.encode(window_mel[None])
    if encoder_seconds is not None:
        encoder_seconds.append(time.perf_counter() - start)
    return window


def split_segments(tokens: list[int], from_draft: list[bool], special, offset: float,
                    window_frames: int) -> tuple[list[Segment], int, list[int]]:
    """Segments from one window's tokens, how many frames to advance, and the tokens consumed."""
    is_ts = [special.is_timestamp(t) for t in tokens]

    def segment(start: float, end: float, first: int, last: int) -> Segment:
        text = [i for i in range(first, last) if not is_ts[i]]
        return Segment(start, end, "", [tokens[i] for i in text], [from_draft[i] for i in text])

    # a segment ends where two timestamps follow each other (<|end|><|start|> of the next)
    boundaries = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    single_timestamp_ending = is_ts[-2:] == [False, True]
    if not boundaries:
        duration = window_frames / FRAMES_PER_SECOND
        timestamps = [t for t in tokens if special.is_timestamp(t)]
        if timestamps and timestamps[-1] != special.timestamp_begin:
            duration = special.timestamp_seconds(timestamps[-1])
        return [segment(offset, offset + duration, 0, len(tokens))], window_frames, tokens
    if single_timestamp_ending:
        boundaries.append(len(tokens))
    segments, last = [], 0
    for boundary in boundaries:
        segments.append(segment(offset + special.timestamp_seconds(tokens[last]),
                                offset + special.timestamp_seconds(tokens[boundary - 1]), last, boundary))
        last = boundary
    if single_timestamp_ending:
        return segments, window_frames, tokens  # the model saw the speech end: the whole window is done
    # resume where the last complete segment ended (the timestamp rules make that > 0)
    return segments, (tokens[last - 1] - special.timestamp_begin) * FRAMES_PER_TOKEN, tokens[:last]
