"""The demo's request handling, without a browser (the browser test is test_demo_browser.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from whisperspec.demo import TranscriberPool, resolve_model, stats_markdown, token_view, transcribe_request
from whisperspec.result import Segment, Transcription

CLIP = Path(__file__).parent / "data" / "tt-weasels.flac"


class FakeTokenizer:
    def decode(self, ids):
        return {1: " Wea", 2: "sels", 3: " <b>"}[ids[0]]


def test_token_view_marks_drafted_and_main_tokens_and_escapes_text():
    view = token_view([Segment(0, 1, "", [1, 2, 3], [False, True, True])], FakeTokenizer())
    assert view.count('class="ws-tok ws-draft"') == 3  # two tokens + the legend entry
    assert view.count('class="ws-tok ws-main"') == 2
    assert "&lt;b&gt;" in view and "<b>" not in view


def test_stats_show_the_comparison():
    def result(decoder_ms, tokens):
        return Transcription("x", [Segment(0, 1, "x", tokens)], "en", 1.0,
                             {"decoder_ms": decoder_ms, "encoder_ms": 5, "tokens": 3,
                              "speculation": {"acceptance_rate": 0.5, "mean_accepted_length": 2.0}})
    same = stats_markdown(result(50, [1, 2]), plain=result(100, [1, 2]))
    assert "2.00x" in same and "identical" in same and "50.0%" in same
    assert "DIFFER" in stats_markdown(result(50, [1, 2]), plain=result(100, [1, 3]))


def test_model_field_only_accepts_what_the_operator_allows(tmp_path):
    from whisperspec.demo import allowed_models

    assert resolve_model("tiny.en") == "tiny.en" and resolve_model("") == "base"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "uploaded").mkdir()  # what a visitor could have placed through an upload route
    (tmp_path / "uploaded" / "config.json").write_text("{}")
    for bad in ("/etc/passwd", "/etc", "../../secret", "openai/whisper-large-v2", str(tmp_path / "model"),
                str(tmp_path / "uploaded")):
        with pytest.raises(ValueError, match="this demo serves base, tiny.en"):
            resolve_model(bad)
    allowed = allowed_models(f"tiny.en,{tmp_path / 'model'}")
    real = str((tmp_path / "model").resolve())
    spellings = [str(tmp_path / "model"), str(tmp_path / "uploaded" / ".." / "model"), str(tmp_path / "model") + "/"]
    assert {resolve_model(spelling, allowed) for spelling in spellings} == {real}  # one model, one copy
    with pytest.raises(ValueError, match="this demo serves"):
        resolve_model(str(tmp_path / "uploaded"), allowed)
    with pytest.raises(ValueError, match="neither"):
        allowed_models("tiny.en,/tmp")


def test_the_pool_keeps_a_bounded_number_of_models(monkeypatch):
    from whisperspec import demo

    monkeypatch.setattr(demo, "Transcriber", lambda model, **kwargs: object())
    pool = TranscriberPool(size=2)
    first = pool.get("a", "none")
    pool.get("b", "none")
    assert pool.get("a", "none") is first  # used again: kept
    pool.get("c", "none")  # "b" was the least recently used
    assert set(pool._transcribers) == {("a", "none", "float32"), ("c", "none", "float32")}


@pytest.mark.real
def test_request_transcribes_compares_and_reports_bad_audio(tmp_path):
    pool = TranscriberPool()
    text, segments, view, stats, files = transcribe_request(pool, str(CLIP), "tiny.en", "int8", "4", "", "", True)
    assert "phone system" in text.lower() and segments and "ws-tok" in view
    assert "identical" in stats and sorted(Path(f).suffix for f in files) == [".json", ".srt", ".tsv", ".txt", ".vtt"]
    for file in files:  # what a visitor downloads names no server path
        assert str(CLIP.parent) not in Path(file).read_text() and "/tmp" not in Path(file).read_text()
    broken = tmp_path / "upload.wav"
    broken.write_text("not audio at all")
    with pytest.raises(ValueError, match="upload.wav") as error:
        transcribe_request(pool, str(broken), "tiny.en", "int8", "4", "", "", False)
    assert str(tmp_path) not in str(error.value)  # the page never shows server paths
    with pytest.raises(ValueError, match="upload or record"):
        transcribe_request(pool, None, "tiny.en", "none", "4", "", "", False)
    text, *_ = transcribe_request(pool, str(CLIP), "tiny.en", "ngram", "4", "", "", True, "int8")
    assert "phone system" in text.lower()
    with pytest.raises(ValueError, match="too long"):  # the operator's limit, before decoding
        transcribe_request(pool, str(CLIP), "tiny.en", "none", "4", "", "", False, max_seconds=2)
    with pytest.raises(ValueError, match="compute type"):
        transcribe_request(pool, str(CLIP), "tiny.en", "none", "4", "", "", False, "fp8")
