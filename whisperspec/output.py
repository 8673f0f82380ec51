"""Write a Transcription as txt / srt / vtt / tsv / json, each file replaced atomically."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Callable, TextIO

from whisperspec.atomic import atomic_write
from whisperspec.result import Transcription
from whisperspec.subtitles import SubtitleOptions, word_cues


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """[HH:]MM:SS<marker>mmm, rounded to the millisecond: SRT wants hours and ",", WebVTT "."."""
    if seconds < 0:
        raise ValueError(f"timestamp must be non-negative, got {seconds}")
    total_ms = round(seconds * 1000)
    hours, rest_ms = divmod(total_ms, 3_600_000)
    minutes, rest_ms = divmod(rest_ms, 60_000)
    whole_seconds, milliseconds = divmod(rest_ms, 1000)
    hours_part = f"{hours:02d}:" if always_include_hours or hours else ""
    return f"{hours_part}{minutes:02d}:{whole_seconds:02d}{decimal_marker}{milliseconds:03d}"


def _cue_text(text: str) -> str:
    # A blank line ends a cue and "-->" marks a timing line, so neither may appear in cue text.
    return " ".join(text.replace("-->", "->").split())


def write_txt(result: Transcription, file: TextIO) -> None:
    """One line per segment."""
    for segment in result.segments:
        file.write(_cue_text(segment.text) + "\n")


def cues(result: Transcription, subtitles: SubtitleOptions | None = None) -> list[tuple[float, float, str]]:
    """(start, end, text) of each subtitle cue: segments with text, none of zero length (a segment
    whose timestamps coincide lasts until the next one starts, or MIN_CUE_SECONDS); or, when
    `subtitles` asks for line limits or highlighting and there are word timestamps, cues built
    from the words (`whisperspec.subtitles`)."""
    if subtitles is not None and subtitles.by_word and any(s.words for s in result.segments):
        return word_cues(result.segments, subtitles, MIN_CUE_SECONDS)
    segments = [s for s in result.segments if _cue_text(s.text)]
    out = []
    for index, segment in enumerate(segments):
        end = segment.end
        if round(end, 3) <= round(segment.start, 3):
            following = segments[index + 1].start if index + 1 < len(segments) else segment.start
            end = following if following > segment.start else segment.start + MIN_CUE_SECONDS
        out.append((segment.start, end, _cue_text(segment.text)))
    return out


MIN_CUE_SECONDS = 0.5


def write_srt(result: Transcription, file: TextIO, subtitles: SubtitleOptions | None = None) -> None:
    for number, (start, end, text) in enumerate(cues(result, subtitles), start=1):
        start_time = format_timestamp(start, always_include_hours=True, decimal_marker=",")
        end_time = format_timestamp(end, always_include_hours=True, decimal_marker=",")
        file.write(f"{number}\n{start_time} --> {end_time}\n{text}\n\n")


def write_vtt(result: Transcription, file: TextIO, subtitles: SubtitleOptions | None = None) -> None:
    file.write("WEBVTT\n\n")
    for start, end, text in cues(result, subtitles):
        file.write(f"{format_timestamp(start)} --> {format_timestamp(end)}\n{text}\n\n")


def write_tsv(result: Transcription, file: TextIO) -> None:
    """openai-whisper's tsv: start and end in whole milliseconds, then the text, one segment a line."""
    file.write("start\tend\ttext\n")
    for segment in result.segments:
        text = segment.text.strip().replace("\t", " ")
        if text:
            file.write(f"{round(1000 * segment.start)}\t{round(1000 * segment.end)}\t{' '.join(text.split())}\n")


def write_json(result: Transcription, file: TextIO) -> None:
    json.dump(result.to_dict(), file, ensure_ascii=False, indent=2, default=_json_value)
    file.write("\n")


def _json_value(value):
    # Stats may carry numpy / torch scalars or arrays; anything else is written as its str().
    return value.tolist() if hasattr(value, "tolist") else str(value)


WRITERS: dict[str, Callable[[Transcription, TextIO], None]] = {
    "txt": write_txt, "srt": write_srt, "vtt": write_vtt, "tsv": write_tsv, "json": write_json,
}


SUBTITLE_FORMATS = ("srt", "vtt")


def write_outputs(result: Transcription, output_dir, stem: str, formats: list[str],
                  subtitles: SubtitleOptions | None = None) -> list[Path]:
    """Write `output_dir/stem.<format>` for each format ("all" = every one); returns the paths.
    `subtitles`: how srt and vtt cues are built from word timestamps.

    Every file is written to a temporary name beside it and renamed into place, so a crash or
    Ctrl-C leaves either the previous file or the complete new one, never a partial one.
    """
    names = list(WRITERS) if "all" in formats else list(dict.fromkeys(formats))
    unknown = [name for name in names if name not in WRITERS]
    if unknown:  # before writing anything, so a typo doesn't leave some formats written
        raise ValueError(f"unknown output format(s) {unknown}; choose from {list(WRITERS)} or 'all'")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        path = output_dir / f"{stem}.{name}"
        writer = WRITERS[name]
        if subtitles is not None and name in SUBTITLE_FORMATS:
            writer = functools.partial(writer, subtitles=subtitles)
        _write_atomically(path, writer, result)
        paths.append(path)
    return paths


def _write_atomically(path: Path, writer: Callable[[Transcription, TextIO], None], result: Transcription) -> None:
    with atomic_write(path) as file:
        writer(result, file)
