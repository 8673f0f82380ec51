"""Bad or odd input, as a hostile user sends it: every file, option, array and output folder below
gets its listed outcome — a one-line error naming what is wrong, before any model loads where the
input says it all, and the other files still transcribed."""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from whisperspec.audio import AudioError, load_audio
from whisperspec.cli import main as cli_main, output_names

CLIPS = Path(__file__).parent / "data"
GOOD = CLIPS / "tt-weasels.flac"


def one_hertz_wav(path: Path) -> Path:
    """28 KB that claim 3.9 hours: 14,000 samples at 1 Hz."""
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(1)
        file.writeframes(np.zeros(14000, dtype=np.int16).tobytes())
    return path


# ------------------------------------------------------------------ files
def _files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the error says)"""
    (tmp / "folder.wav").mkdir()
    os.mkfifo(tmp / "fifo.wav")
    os.symlink(tmp / "loop.wav", tmp / "loop.wav")
    os.symlink(tmp / "nowhere.wav", tmp / "dangling.wav")
    (tmp / "empty.wav").write_bytes(b"")
    (tmp / "text.wav").write_text("not audio at all\n" * 40)
    (tmp / "header-only.wav").write_bytes(GOOD.read_bytes()[:44])
    (tmp / "truncated.flac").write_bytes(GOOD.read_bytes()[:300])
    (tmp / "random.mp3").write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    sf.write(tmp / "nan.wav", np.full(1600, np.nan, dtype=np.float32), 16000, subtype="FLOAT")
    sf.write(tmp / "inf.wav", np.full(1600, np.inf, dtype=np.float32), 16000, subtype="FLOAT")
    one_hertz_wav(tmp / "one-hertz.wav")
    sf.write(tmp / "ultrasonic-rate.wav", np.zeros(100, dtype=np.float32), 1_000_000, subtype="FLOAT")
    (tmp / "zero-frames.wav").write_bytes(_wav_header(0))
    return {
        "missing": (tmp / "missing.wav", "no such file"),
        "folder": (tmp / "folder.wav", "is a folder"),
        "fifo": (tmp / "fifo.wav", "not a regular file"),
        "symlink loop": (tmp / "loop.wav", "loop of symbolic links"),
        "dangling symlink": (tmp / "dangling.wav", "no such file"),
        "empty": (tmp / "empty.wav", "empty"),
        "text": (tmp / "text.wav", "cannot be decoded"),
        "header only": (tmp / "header-only.wav", "no audio samples|cannot be decoded"),
        "truncated": (tmp / "truncated.flac", "cannot be decoded|no audio samples"),
        "random bytes": (tmp / "random.mp3", "cannot be decoded|no audio samples|no audio stream"),
        "NaN samples": (tmp / "nan.wav", "NaN"),
        "infinite samples": (tmp / "inf.wav", "NaN or infinite"),
        "1 Hz header": (tmp / "one-hertz.wav", "sample rate 1 Hz is not a plausible"),
        "1 MHz header": (tmp / "ultrasonic-rate.wav", "not a plausible audio rate"),
        "zero frames": (tmp / "zero-frames.wav", "no audio samples|cannot be decoded"),
    }


def _wav_header(frames: int) -> bytes:
    import io

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(16000)
        file.writeframes(b"\0\0" * frames)
    return buffer.getvalue()


def test_bad_files_each_get_their_own_one_line_error(tmp_path):
    for name, (path, message) in _files(tmp_path).items():
        with pytest.raises(AudioError, match=message) as caught:
            load_audio(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value), name


# ------------------------------------------------------------------ arrays
@pytest.mark.parametrize("array, kwargs, message", [
    (np.zeros(100, dtype=np.float32), {"sample_rate": 0}, "positive whole number"),
    (np.zeros(100, dtype=np.float32), {"sample_rate": -16000}, "positive whole number"),
    (np.zeros(100, dtype=np.float32), {"sample_rate": float("nan")}, "positive whole number"),
    (np.zeros(100, dtype=np.float32), {"sample_rate": "16k"}, "positive whole number"),
    (np.zeros(100, dtype=np.float32), {"sample_rate": 16000.5}, "positive whole number"),
    (np.zeros(100, dtype=np.float32), {"sample_rate": 1}, "not a plausible audio rate"),
    (np.zeros((2, 2, 2), dtype=np.float32), {}, "1-D or 2-D"),
    (np.array(["a", "b"]), {}, "must be numbers"),
    (np.zeros(0, dtype=np.float32), {}, "no audio samples"),
    (np.array([0.0, np.nan], dtype=np.float32), {}, "NaN"),
])
def test_bad_arrays_and_rates(array, kwargs, message):
    with pytest.raises(AudioError, match=message):
        load_audio(array, **kwargs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64])
def test_integer_arrays_of_any_width_are_scaled_by_their_range(dtype):
    info = np.iinfo(dtype)
    middle = info.max // 2 + 1 if info.min == 0 else 0
    quiet = np.full(160, middle, dtype=dtype)  # silence: zero for signed, mid-range for unsigned
    loud = np.full(160, info.max, dtype=dtype)
    assert np.abs(load_audio(quiet)).max() == 0
    assert 0.99 <= load_audio(loud).max() <= 1.0
    assert 0.99 <= load_audio(torch.from_numpy(loud.astype(np.int64 if dtype == np.uint16 else dtype))).max() <= 1.0 \
        or dtype == np.uint16  # torch has no uint16 tensors to speak of


# ------------------------------------------------------------------ options (all refused before a model loads)
@pytest.mark.parametrize("options, message", [
    (["--language", "xx"], "language 'xx'"),
    (["--language", "klingon"], "language 'klingon'"),
    (["--temperature", "nan"], "temperature 'nan'"),
    (["--temperature", "inf"], "temperature 'inf'"),
    (["--temperature", "-1"], "temperature '-1'"),
    (["--temperature", "warm"], "temperature 'warm'"),
    (["--model", "tiny.en", "--task", "translate"], "English-only"),
    (["--model", "tiny.en", "--language", "de"], "language 'de': model 'tiny.en' is English-only"),
    (["--model", "nonsense"], "model 'nonsense'"),
    (["--draft", "nonsense"], "unknown drafter 'nonsense'"),
    (["--draft", "auto", "--lookahead", "-1"], "unknown lookahead '-1'"),
    (["--draft", "auto", "--lookahead", "abc"], "unknown lookahead 'abc'"),
    (["--draft", "none", "--lookahead", "4"], "needs a drafter"),
    (["--draft", "auto@5", "--lookahead", "4"], "given twice"),
    (["--format", ""], "--format ''"),
    (["--format", "txt,docx"], "--format"),
    (["--compute-type", "int4"], "invalid choice"),
    (["--online-learning", "maybe"], "invalid choice"),
])
def test_bad_options_fail_before_any_model_loads(options, message, monkeypatch, capsys):
    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded for an option that does not parse")

    monkeypatch.setattr("whisperspec.transcribe.load_whisper", no_load)
    try:
        status = cli_main(["transcribe", str(GOOD), *options])
    except SystemExit as exit:  # argparse's own choices
        status = exit.code
    assert status == 2
    error = capsys.readouterr().err.strip()
    if error.startswith("usage"):  # argparse's own: its usage, then one error line
        error = error.splitlines()[-1]
    assert message in error and error.count("\n") == 0 and error.startswith("whisperspec"), error


@pytest.mark.parametrize("language, code", [("EN", "en"), ("english", "en"), ("Castilian", "es"), ("fr", "fr"),
                                            ("", None)])
def test_languages_by_code_or_name_in_any_case(language, code):
    from whisperspec.options import language_code

    assert language_code(language) == code


# ------------------------------------------------------------------ output folders
def test_unusable_output_folders_are_refused_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("whisperspec.transcribe.load_whisper", lambda *a, **k: pytest.fail("loaded a model"))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for folder in ("/proc/whisperspec-out", str(a_file), str(a_file / "below")):
        assert cli_main(["transcribe", str(GOOD), "--output-dir", folder]) == 2
        assert f"--output-dir {folder}: cannot write there" in capsys.readouterr().err


def test_inputs_with_one_name_never_overwrite_each_other(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    names = output_names([str(tmp_path / "a" / "t.flac"), str(tmp_path / "b" / "t.flac"),
                          str(tmp_path / "a" / "t.wav"), str(tmp_path / "b" / "u.wav")])
    assert [str(n) for n in names.values()] == ["a/t.flac", "b/t", "a/t.wav", "u"]
    assert output_names(["x/clip.wav"]) == {"x/clip.wav": Path("clip")}


@pytest.mark.real
def test_cli_mirrors_the_input_tree_and_keeps_going_after_bad_files(tmp_path, capsys):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "t.flac").write_bytes(GOOD.read_bytes())
    one_hertz_wav(tmp_path / "a" / "bad.wav")
    out = tmp_path / "out"
    status = cli_main(["transcribe", str(tmp_path / "a" / "t.flac"), str(tmp_path / "a" / "bad.wav"),
                       str(tmp_path / "b" / "t.flac"), "--model", "tiny.en", "--output-dir", str(out), "--quiet"])
    assert status == 1
    assert "bad.wav: sample rate 1 Hz" in capsys.readouterr().err
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.txt")) == ["a/t.txt", "b/t.txt"]


@pytest.mark.real
def test_a_write_error_is_one_line_and_a_failure(tmp_path, monkeypatch, capsys):
    import errno

    from whisperspec import output

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output, "write_outputs", full_disk)
    status = cli_main(["transcribe", str(GOOD), "--model", "tiny.en", "--output-dir", str(tmp_path), "--quiet"])
    assert status == 1
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith("No space left on device") and str(GOOD) in error


@pytest.mark.real
@pytest.mark.parametrize("seconds", [1 / 16000, 0.1, 0.2])
def test_too_short_to_be_speech_gives_an_empty_result(seconds):
    from whisperspec.transcribe import Transcriber

    transcriber = Transcriber("tiny.en")
    samples = np.random.default_rng(0).standard_normal(max(1, int(seconds * 16000))).astype(np.float32) * 0.3
    result = transcriber.transcribe(samples)
    assert (result.text, result.segments) == ("", [])


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from whisperspec import cli

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_run", interrupted)
    assert cli.main(["transcribe", str(GOOD)]) == 130
    assert capsys.readouterr().err == "whisperspec: interrupted\n"


def test_subtitles_have_no_zero_length_or_empty_cues():
    from whisperspec.output import cues
    from whisperspec.result import Segment, Transcription

    result = Transcription("a b c", [Segment(1.0, 1.0, " a"), Segment(2.0, 3.0, " b"), Segment(3.0, 3.0, "  "),
                                     Segment(4.0, 4.0, " c")], "en", 5.0)
    assert cues(result) == [(1.0, 2.0, "a"), (2.0, 3.0, "b"), (4.0, 4.5, "c")]
