"""Sequential long-form transcription: 30-s windows, advanced by the timestamps Whisper predicts.

The same walk as openai-whisper's `transcribe()` and transformers' sequential long-form: decode a
window with timestamps, cut it into segments at consecutive timestamp pairs, move the window to the
last complete segment's end (or by a whole window), and condition the next window on the text
so far. With word timestamps each window's segments get their words; the windows move as they do
without them (openai-whisper and faster-whisper move to the last word's end instead, which loses
speech: docs/WORDS.md), so the text is the same with or without words.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from whisperspec.result import Segment
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.alignment import WordAligner
from whisperspec.whisper.decode import DecodeOptions, WindowResult, window_prompt

N_FRAMES = 3000  # mel frames per 30-s window
FRAMES_PER_SECOND = 100
FRAMES_PER_TOKEN = 2  # the encoder halves the frame rate: one timestamp step = 2 mel frames


@dataclass
class LongformResult:
    segments: list[Segment]
    language: str | None
    windows: list[WindowResult]
    stats: SpeculationStats


class LongformWalk:
    """One file's windows, one after another: `window_mel`, `prompt` and `options` say what to
    decode next, `advance` takes its result. The caller decodes each window, alone or in a batch
    with other files' windows (`whisperspec.corpus`): a file's next window depends on this one's
    timestamps and text, so its windows are decoded in order.

    `mel` [n_mels, content_frames + N_FRAMES] is the whole file's log-mel, padded by one window.
    `initial_prompt` starts the text so far; `carried` (hotwords, a carried initial prompt) leads
    every window's prompt. `words`: add word timestamps with this aligner (then `advance` needs each
    window's encoder output).
    """

    def __init__(self, runtime, mel: torch.Tensor, content_frames: int, options: DecodeOptions,
                 initial_prompt: list[int] = (), condition_on_previous_text: bool = True, carried: list[int] = (),
                 words: WordAligner | None = None):
        self.runtime, self.mel, self.content_frames, self.words = runtime, mel, content_frames, words
        self.options = replace(options, timestamps=True)
        self.condition_on_previous_text, self.carried = condition_on_previous_text, list(carried)
        self.seek, self.segments, self.windows, self.stats = 0, [], [], SpeculationStats()
        self.context = list(initial_prompt)  # the text so far

    @property
    def prompt(self) -> list[int]:
        """The next window's prompt: what is carried, then the text so far."""
        return window_prompt(self.carried, self.context)

    @property
    def done(self) -> bool:
        return self.seek >= self.content_frames

    def ready(self) -> list["LongformWalk"]:
        """The windows that can be decoded now: the next one (itself), as each waits for the last."""
        return [] if self.done else [self]

    def window_mel(self) -> torch.Tensor:
        return self.mel[:, self.seek:self.seek + N_FRAMES]

    def advance(self, result: WindowResult, hidden: torch.Tensor | None = None) -> float:
        """Take the decoded window (`hidden`: its encoder output, read for word timestamps);
        returns the seconds of the file's audio it moved past."""
        before = self.seek
        self._advance(result, hidden)
        return (min(self.seek, self.content_frames) - before) / FRAMES_PER_SECOND

    def _advance(self, result: WindowResult, hidden: torch.Tensor | None) -> None:
        runtime, special = self.runtime, self.runtime.special
        window_frames = min(N_FRAMES, self.content_frames - self.seek)
        offset = self.seek / FRAMES_PER_SECOND
        self.options = replace(self.options, language=result.language)  # detected once, on the first window
        self.windows.append(result)
        self.stats.merge(result.stats)
        if result.is_silence(self.options):
            self.seek += window_frames
            return
        new_segments, advance, consumed = split_segments(result.tokens, result.from_draft, special, offset,
                                                          window_frames)
        for segment in new_segments:
            segment.text = runtime.decode_text(segment.tokens)
        carry_window_scores(new_segments, result)
        if self.words is not None:
            self.words.add(hidden, new_segments, result.language, offset, window_frames)
        self.segments += [s for s in new_segments if s.text.strip()]
        if self.condition_on_previous_text and result.temperature <= 0.5:
            # the prompt keeps the timestamps, as openai-whisper's and faster-whisper's do: without
            # them the model repeats the previous text (docs/BENCHMARKS-HISTORY.md, "Measurements
            # behind the code")
            self.context += consumed
        else:  # a sampled window is a poor prompt for the next one: openai-whisper's reset, to nothing
            self.context = []
        self.seek += advance

    def result(self) -> LongformResult:
        return LongformResult(self.segments, self.options.language, self.windows, self.stats)


def carry_window_scores(segments: list[Segment], result: WindowResult) -> None:
    """Each segment carries the scores of the window it was decoded in (faster-whisper's fields)."""
    for segment in segments:
        segment.avg_logprob, segment.compression_ratio = result.avg_logprob, result.compression_ratio
        segment.no_speech_prob, segment.temperature = result.no_speech_prob, result.temperature


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
