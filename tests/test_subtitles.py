"""srt/vtt cues from word timestamps (openai-whisper's line rules and highlighting), the json of a
result with words, and the CLI's checks of these options (before any model loads)."""

from __future__ import annotations

import io
import json

import pytest

from whisperspec.cli import main as cli_main
from whisperspec.output import cues, write_json, write_srt, write_vtt
from whisperspec.result import Segment, Transcription, Word
from whisperspec.subtitles import SubtitleOptions


@pytest.fixture
def result():
    first = Segment(0.0, 2.0, " Hello there world.", [1, 2, 3], words=[
        Word(0.0, 0.5, " Hello", 0.9), Word(0.6, 1.0, " there", 0.8), Word(1.0, 2.0, " world-->.", 0.7)])
    second = Segment(5.0, 5.0, " Bye.", [4], id=1, words=[Word(5.0, 5.0, " Bye.", 0.6)])  # a word of no length
    return Transcription("Hello there world. Bye.", [first, second], "en", 6.0, language_probability=0.98)


def test_highlighted_words_are_underlined_in_turn_with_the_gaps_plain(result):
    assert cues(result, SubtitleOptions(highlight_words=True)) == [
        (0.0, 0.5, "<u>Hello</u> there world->."),
        (0.5, 0.6, "Hello there world->."),
        (0.6, 1.0, "Hello <u>there</u> world->."),
        (1.0, 2.0, "Hello there <u>world->.</u>"),
        (5.0, 5.5, "Bye."),  # no word of it lasts: one plain cue, MIN_CUE_SECONDS long
    ]


def test_line_width_and_count_break_lines_and_cues(result):
    assert cues(result, SubtitleOptions(max_line_width=12, max_line_count=2)) == [
        (0.0, 2.0, "Hello there\nworld->."),
        (5.0, 5.5, "Bye."),  # after a pause of more than 3 s: a cue of its own
    ]
    assert cues(result, SubtitleOptions(max_line_width=12, max_line_count=1))[:2] == [
        (0.0, 1.0, "Hello there"), (1.0, 2.0, "world->.")]


def test_words_per_line_split_segments(result):
    assert cues(result, SubtitleOptions(max_words_per_line=2)) == [
        (0.0, 1.0, "Hello there"), (1.0, 2.0, "world->."), (5.0, 5.5, "Bye.")]


def test_without_word_options_or_words_cues_follow_segments(result):
    per_segment = [(0.0, 2.0, "Hello there world."), (5.0, 5.5, "Bye.")]
    assert cues(result) == cues(result, SubtitleOptions()) == per_segment
    for segment in result.segments:
        segment.words = None  # transcribed without word timestamps
    assert cues(result, SubtitleOptions(highlight_words=True)) == per_segment


def test_srt_vtt_and_json_carry_the_words(result):
    srt, vtt, out = io.StringIO(), io.StringIO(), io.StringIO()
    options = SubtitleOptions(highlight_words=True)
    write_srt(result, srt, options)
    write_vtt(result, vtt, options)
    assert "1\n00:00:00,000 --> 00:00:00,500\n<u>Hello</u> there world->.\n\n2\n" in srt.getvalue()
    assert "00:00.600 --> 00:01.000\nHello <u>there</u> world->.\n\n" in vtt.getvalue()
    write_json(result, out)
    data = json.loads(out.getvalue())
    assert data["language_probability"] == 0.98 and result.info.language_probability == 0.98
    assert data["segments"][1]["id"] == 1
    assert data["segments"][0]["words"][1] == {"start": 0.6, "end": 1.0, "word": " there", "probability": 0.8}


@pytest.mark.parametrize("arguments, message", [
    (["--highlight-words"], "--highlight-words requires --word-timestamps"),
    (["--max-line-count", "2"], "--max-line-count requires --word-timestamps"),
    (["--word-timestamps", "--max-line-width", "0"], "--max-line-width 0: a whole number >= 1"),
])
def test_cli_checks_the_word_options_before_loading_a_model(arguments, message, capsys):
    assert cli_main(["transcribe", "missing.flac", "--model", "no-such-model", *arguments]) == 2
    assert message in capsys.readouterr().err
