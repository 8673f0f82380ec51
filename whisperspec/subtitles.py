"""Subtitle cues built from word timestamps: lines of at most so many characters or words, cues of at
most so many lines, and each word underlined while it is spoken. The options and the rules are
openai-whisper's (`--max_line_width`, `--max_line_count`, `--max_words_per_line`,
`--highlight_words`), so its users get the same cues."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from whisperspec.result import Segment, Word

LONG_PAUSE_SECONDS = 3.0  # openai-whisper: with line limits, a pause this long starts a new cue


@dataclass(frozen=True)
class SubtitleOptions:
    highlight_words: bool = False  # underline each word while it is spoken
    max_line_width: int | None = None  # characters per line
    max_line_count: int | None = None  # lines per cue (with max_line_width: cues no longer follow segments)
    max_words_per_line: int | None = None  # words per cue (no effect with max_line_width)

    def __post_init__(self):
        for name in ("max_line_width", "max_line_count", "max_words_per_line"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{name.replace('_', '-')} {value!r}: a whole number >= 1")

    @property
    def by_word(self) -> bool:
        """Whether the cues are built from words (else one cue per segment)."""
        return self.highlight_words or any(
            value is not None for value in (self.max_line_width, self.max_line_count, self.max_words_per_line))


def word_cues(segments: list[Segment], options: SubtitleOptions,
              min_seconds: float) -> list[tuple[float, float, str]]:
    """(start, end, text) of each cue; lines in a cue are separated by "\\n". A cue of no length
    lasts `min_seconds`; a highlighted word of no length gets no cue of its own (its text is in
    the cues around it, or in one plain cue if no word of the cue lasts)."""
    out = []
    for subtitle in _subtitles(segments, options):
        text = "".join(piece for _, _, piece in subtitle)
        start, end = subtitle[0][0], subtitle[-1][1]
        highlighted = _highlighted(subtitle, text) if options.highlight_words else []
        out += highlighted or [(start, end if _ms(end) > _ms(start) else start + min_seconds, text)]
    return out


def _highlighted(subtitle: list[tuple[float, float, str]], text: str) -> list[tuple[float, float, str]]:
    """A cue per word of `subtitle`, that word underlined, and the plain text in the gaps between."""
    out, last = [], subtitle[0][0]
    for index, (word_start, word_end, _) in enumerate(subtitle):
        if _ms(word_start) > _ms(last):
            out.append((last, word_start, text))
        if _ms(word_end) > _ms(word_start):
            out.append((word_start, word_end, "".join(
                re.sub(r"^(\s*)(.*)$", r"\1<u>\2</u>", piece) if i == index else piece
                for i, (_, _, piece) in enumerate(subtitle))))
        last = max(last, word_end)
    return out


def _ms(seconds: float) -> int:
    return round(seconds * 1000)  # cue times are written to the millisecond


def _subtitles(segments: list[Segment], options: SubtitleOptions) -> Iterator[list[tuple[float, float, str]]]:
    """openai-whisper's line filling: each cue as (start, end, text) of its words, a word's text
    starting with "\\n" where a new line begins."""
    keep_segments = options.max_line_count is None or options.max_line_width is None
    max_width = options.max_line_width or float("inf")
    words = [[_clean(word) for word in segment.words or []] for segment in segments]
    line_length, line_count, subtitle = 0, 1, []
    last = next((w[0].start for w in words if w), 0.0)
    for segment_words in words:
        for index, word in enumerate(segment_words):
            first_of_chunk = index % (options.max_words_per_line or len(segment_words)) == 0
            text = word.word
            long_pause = not keep_segments and word.start - last > LONG_PAUSE_SECONDS
            has_room = line_length + len(text) <= max_width
            segment_break = first_of_chunk and subtitle and keep_segments
            if line_length > 0 and has_room and not long_pause and not segment_break:
                line_length += len(text)
            else:
                text = text.strip()
                if segment_break or (subtitle and options.max_line_count is not None
                                     and (long_pause or line_count >= options.max_line_count)):
                    yield subtitle
                    subtitle, line_count = [], 1
                elif line_length > 0:
                    line_count += 1
                    text = "\n" + text
                line_length = len(text.strip())
            subtitle.append((word.start, word.end, text))
            last = word.start
    if subtitle:
        yield subtitle


def _clean(word: Word) -> Word:
    """A word as cue text: "-->" marks a timing line and a blank line ends a cue, so neither may
    appear; the leading space that separates it from the word before stays."""
    text = " ".join(word.word.replace("-->", "->").split())
    return Word(word.start, word.end, (" " if word.word[:1].isspace() else "") + text, word.probability)
