import io
import json

import numpy as np
import pytest

from whisperspec import output
from whisperspec.output import format_timestamp, write_json, write_outputs, write_srt, write_txt, write_vtt
from whisperspec.result import Segment, Transcription, TranscriptionStats


@pytest.fixture
def result() -> Transcription:
    segments = [
        Segment(0.0, 2.5, " Your call is now first in line", [1, 2]),
        Segment(2.5, 3725.0015, " and will be answered --> soon.", [3]),
    ]
    return Transcription("Your call is now first in line and will be answered --> soon.", segments, "en",
                         3725.1, TranscriptionStats(decoder_ms=np.float32(12.5), tokens=3), "call.wav")


def render(writer, result) -> str:
    buffer = io.StringIO()
    writer(result, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("seconds, hours, marker, expected", [
    (0.0, False, ".", "00:00.000"),
    (0.0, True, ",", "00:00:00,000"),
    (59.9994, False, ".", "00:59.999"),
    (59.9996, False, ".", "01:00.000"),  # milliseconds round up into the next minute
    (3725.0015, False, ".", "01:02:05.002"),  # hours appear once there are any
    (36000.25, True, ",", "10:00:00,250"),
])
def test_format_timestamp(seconds, hours, marker, expected):
    assert format_timestamp(seconds, always_include_hours=hours, decimal_marker=marker) == expected


def test_format_timestamp_rejects_negative():
    with pytest.raises(ValueError):
        format_timestamp(-0.5)


def test_srt(result):
    assert render(write_srt, result) == (
        "1\n"
        "00:00:00,000 --> 00:00:02,500\n"
        "Your call is now first in line\n"
        "\n"
        "2\n"
        "00:00:02,500 --> 01:02:05,002\n"
        "and will be answered -> soon.\n"
        "\n"
    )


def test_vtt(result):
    assert render(write_vtt, result) == (
        "WEBVTT\n"
        "\n"
        "00:00.000 --> 00:02.500\n"
        "Your call is now first in line\n"
        "\n"
        "00:02.500 --> 01:02:05.002\n"
        "and will be answered -> soon.\n"
        "\n"
    )


def test_txt(result):
    assert render(write_txt, result) == "Your call is now first in line\nand will be answered -> soon.\n"


def test_json_round_trips_with_numpy_stats(result):
    data = json.loads(render(write_json, result))
    assert data["text"] == result.text
    assert data["segments"][1] == {"start": 2.5, "end": 3725.0015, "text": " and will be answered --> soon.",
                                   "tokens": [3], "from_draft": [], "id": 0, "avg_logprob": None,
                                   "compression_ratio": None, "no_speech_prob": None, "temperature": None,
                                   "words": None}
    assert (data["stats"]["decoder_ms"], data["stats"]["tokens"]) == (12.5, 3)  # a numpy float written as a number
    assert data["stats"].keys() == TranscriptionStats().to_dict().keys()
    assert (data["language"], data["source"]) == ("en", "call.wav")


def test_empty_transcription():
    empty = Transcription("", [], None, 1.0)
    assert (render(write_txt, empty), render(write_srt, empty), render(write_vtt, empty)) == ("", "", "WEBVTT\n\n")


def test_write_outputs_writes_every_format(tmp_path, result):
    paths = write_outputs(result, tmp_path / "new" / "dir", "call", ["all"])
    assert [p.name for p in paths] == ["call.txt", "call.srt", "call.vtt", "call.tsv", "call.json"]
    assert paths[1].read_text(encoding="utf-8") == render(write_srt, result)
    assert sorted(p.name for p in paths[0].parent.iterdir()) == sorted(p.name for p in paths)  # no temp files


def test_write_outputs_rejects_unknown_format_before_writing(tmp_path, result):
    with pytest.raises(ValueError, match="docx"):
        write_outputs(result, tmp_path, "call", ["txt", "docx"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("interruption", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_write_outputs_is_atomic(tmp_path, result, monkeypatch, interruption):
    (tmp_path / "call.srt").write_text("previous run\n")

    def write_half_then_fail(result, file):
        file.write("1\n00:00:00,000 --> ")
        raise interruption

    monkeypatch.setitem(output.WRITERS, "srt", write_half_then_fail)
    with pytest.raises(type(interruption)):
        write_outputs(result, tmp_path, "call", ["txt", "srt"])
    # txt completed before the failure; srt still holds the previous run; no temporary file is left.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["call.srt", "call.txt"]
    assert (tmp_path / "call.srt").read_text() == "previous run\n"
    assert (tmp_path / "call.txt").read_text() == render(write_txt, result)


def test_write_outputs_leaves_no_file_when_first_write_fails(tmp_path, result, monkeypatch):
    def fail(result, file):
        file.write("{")
        raise KeyboardInterrupt

    monkeypatch.setitem(output.WRITERS, "json", fail)
    with pytest.raises(KeyboardInterrupt):
        write_outputs(result, tmp_path, "call", ["json"])
    assert list(tmp_path.iterdir()) == []
