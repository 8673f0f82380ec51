"""The demo's request handling, without a browser (the browser test is test_demo_browser.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from whisperspec.demo.app import TranscriberPool, resolve_model, stats_markdown, token_view, transcribe_request
from whisperspec.result import Segment, Transcription, TranscriptionStats
from whisperspec.speculative.stats import SpeculationStats

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
        drafted = SpeculationStats(rounds=1, proposed=2, accepted=1, emitted=2)  # 50% accepted, 2 a pass
        return Transcription("x", [Segment(0, 1, "x", tokens)], "en", 1.0,
                             TranscriptionStats(decoder_ms=decoder_ms, encoder_ms=5, tokens=3, speculation=drafted))
    same = stats_markdown(result(50, [1, 2]), plain=result(100, [1, 2]))
    assert "2.00x" in same and "identical" in same and "50.0%" in same
    assert "DIFFER" in stats_markdown(result(50, [1, 2]), plain=result(100, [1, 3]))


def test_model_field_only_accepts_what_the_operator_allows(tmp_path):
    from whisperspec.demo.app import allowed_models

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
    from whisperspec.demo import app as demo
    from whisperspec.whisper.model import resolve_compute_type

    class Options:  # the pool builds the options; nothing loads here
        def __init__(self, *, options):
            self.model, self.draft, self.expected = options.model, options.draft, 0.0

        def expect(self, seconds):
            self.expected += seconds

    monkeypatch.setattr(demo, "Transcriber", Options)
    pool = TranscriberPool(size=2)
    first = pool.get("owner/a", "none")  # (shaped as hub ids)
    assert first.model == "owner/a" and not first.draft.drafts
    assert first.expected == demo.SERVING_SECONDS  # a server's work ahead is told to each transcriber
    pool.get("owner/b", "none")
    assert pool.get("owner/a", "none") is first  # used again: kept
    pool.get("owner/c", "none")  # "b" was the least recently used
    compute_type = resolve_compute_type("auto")  # the default, as it runs here
    assert set(pool._transcribers) == {("owner/a", "none", compute_type), ("owner/c", "none", compute_type)}


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


@pytest.mark.real
def test_a_fresh_server_drafts_from_its_first_request_with_the_default_options():
    # one 5-s clip could never repay building a draft; a server's many requests do, and its pool
    # says so: the first visitor already sees drafted tokens (green)
    from whisperspec import defaults
    from whisperspec.demo.app import SAMPLE

    pool = TranscriberPool()
    text, _, view, stats, _ = transcribe_request(pool, str(SAMPLE), defaults.MODEL, defaults.DRAFT,
                                                 defaults.LOOKAHEAD, "", "transcribe", False)
    assert "will be answered by the next available representative" in text
    assert view.count('class="ws-tok ws-draft"') > 1  # the legend's entry, and drafted tokens
    assert "| draft passes | 0 |" not in stats and "| acceptance | 0.0% |" not in stats


def test_a_guard_stops_at_its_budget_counted_from_the_first_round_or_when_cancelled():
    import time

    from whisperspec.demo.requests import RequestGuard, RequestStopped

    guard = RequestGuard(0.2)
    time.sleep(0.3)  # loading, before the first round: not counted
    guard()
    guard()
    time.sleep(0.3)
    with pytest.raises(RequestStopped, match="stopped after 0.2 s of computing"):
        guard()
    unlimited = RequestGuard(None)
    unlimited()
    unlimited.cancel()
    with pytest.raises(RequestStopped, match="cancelled"):
        unlimited()


def test_a_cancelled_or_abandoned_request_stops_its_work_and_only_then_frees_its_slot():
    """Gradio cancels the event's task (a client's cancel), or the visitor leaves (unload): the
    work, checking its guard as a decode does between rounds, stops at its next check, and the
    cancelled event ends only once the work has."""
    import asyncio
    import threading
    import time

    from whisperspec.demo.requests import ActiveRequests, RequestStopped

    requests, stopped = ActiveRequests(seconds=60), []

    def work(guard):
        try:
            for _ in range(1000):  # 10 s unless stopped
                guard()
                time.sleep(0.01)
            return "finished"
        finally:
            stopped.append(time.monotonic())

    async def scenario():
        task = asyncio.ensure_future(requests.run("visitor-a", work))
        await asyncio.sleep(0.2)
        assert requests.running() == requests.decoding() == 1
        cancelled = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stopped and stopped[0] - cancelled < 0.5 and time.monotonic() - stopped[0] < 0.5
        assert requests.running() == 0
        left = asyncio.ensure_future(requests.run("visitor-b", work))
        other = asyncio.ensure_future(requests.run("visitor-c", lambda guard: (guard(), "answered")[1]))
        await asyncio.sleep(0.2)
        requests.leave("visitor-b")  # Gradio's unload for visitor-b's session
        with pytest.raises(RequestStopped, match="cancelled"):
            await left
        assert await other == "answered" and len(stopped) == 2 and requests.running() == 0

    asyncio.run(scenario())
    assert threading.active_count() < 50


@pytest.mark.real
def test_an_interrupted_decode_stops_within_a_round_and_the_transcriber_is_reused():
    from whisperspec.demo.requests import RequestStopped
    from whisperspec.transcribe import Transcriber

    for draft in ("none", "int8"):
        transcriber = Transcriber("tiny.en", draft=draft)
        expected = transcriber.transcribe(CLIP)
        rounds = []

        def interrupt():
            rounds.append(1)
            if len(rounds) == 3:
                raise RequestStopped("stop")

        with pytest.raises(RequestStopped):
            transcriber.transcribe(CLIP, interrupt=interrupt)
        assert len(rounds) == 3  # checked before every round, nothing decoded after the stop
        checks = []
        again = transcriber.transcribe(CLIP, interrupt=lambda: checks.append(1))
        assert [s.tokens for s in again.segments] == [s.tokens for s in expected.segments]
        assert len(checks) == again.stats.speculation.rounds == expected.stats.speculation.rounds


def test_a_live_chunk_is_read_whole_and_a_bad_one_is_reported_without_its_server_path(tmp_path):
    """The browser's recorder writes a WAV header that declares no real length (it streams)."""
    import struct

    import numpy as np

    from whisperspec.demo.microphone import LiveSession
    from whisperspec.spec import DraftSpec

    samples = (np.sin(np.arange(4800) / 10) * 10000).astype("<i2")  # 0.1 s at 48 kHz
    header = (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 48000, 96000, 2, 16)
              + b"data" + struct.pack("<I", 0xFFFFFFD3))
    (tmp_path / "chunk.wav").write_bytes(header + samples.tobytes())
    live = LiveSession(("tiny.en", DraftSpec("none"), "float32"), "English", "transcribe")
    live.add(str(tmp_path / "chunk.wav"))
    assert len(live.transcript.buffer) == 1600 and live.transcript.language == "en"
    (tmp_path / "text.wav").write_text("not a recording" * 10)
    with pytest.raises(ValueError, match="the recording") as error:
        live.add(str(tmp_path / "text.wav"))
    assert str(tmp_path) not in str(error.value)


def test_a_silent_recording_says_there_was_no_speech_in_the_live_tab(tmp_path):
    import numpy as np
    import soundfile as sf

    from whisperspec.demo.app import NO_SPEECH, TranscriberPool, live_outputs
    from whisperspec.demo.microphone import LiveSession
    from whisperspec.spec import DraftSpec

    live = LiveSession(("tiny.en", DraftSpec("none"), "float32"), "English", "transcribe")
    _, view, text, _ = live_outputs(live)
    assert NO_SPEECH not in view  # nothing read yet: nothing to say
    for index in range(3):
        sf.write(tmp_path / f"{index}.wav", np.zeros(16000, dtype=np.float32), 16000)
        live.add(str(tmp_path / f"{index}.wav"))
    live.read(TranscriberPool(), finish=True)
    _, view, text, _ = live_outputs(live)
    assert text == "" and NO_SPEECH in view


def test_streamed_chunks_are_taken_in_upload_order_once_each_and_passed_on_to_gradio():
    """Uploads are numbered as they arrive (the order the browser recorded the chunks); posts
    that come late, twice, or name a file no upload wrote are ordered, merged or ignored."""
    import asyncio
    import json

    from whisperspec.demo.microphone import StreamedChunks

    chunks, seen = StreamedChunks(reorder_seconds=0.3), []

    async def gradio(scope, receive, send):
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        body = b"".join(m["body"] for m in messages)
        seen.append((scope["path"], body))
        if scope["path"].endswith("/upload"):  # Gradio's answer: where it stored the file
            await send({"type": "http.response.start", "status": 200})
            await send({"type": "http.response.body", "body": json.dumps([f"/up/{body.decode()}/audio.wav"]).encode()})

    tapped = chunks.tap(gradio)

    async def post(path, body):
        messages = [{"type": "http.request", "body": body[:3], "more_body": True},
                    {"type": "http.request", "body": body[3:], "more_body": False}]

        async def send(message):
            pass

        await tapped({"type": "http", "method": "POST", "path": path}, lambda: asyncio.sleep(0, messages.pop(0)), send)

    def chunk(name, session="s1"):
        return json.dumps({"data": [{"path": f"/up/{name}/audio.wav"}, None], "session_hash": session}).encode()

    async def scenario():
        for name in ("a", "b", "c", "d", "x"):
            await post("/gradio_api/upload", name.encode())
        for name in ("b", "a", "a", "c"):  # b's upload finished first; a posted twice
            await post("/gradio_api/stream/event-1", chunk(name))
        await post("/gradio_api/stream/event-1", chunk("/etc", session="s1"))  # not an upload's
        await post("/gradio_api/stream/event-2", chunk("x", session="s2"))
        assert chunks.take("s1") == []  # a late chunk may still come
        await asyncio.sleep(0.35)
        assert chunks.take("s1") == [f"/up/{n}/audio.wav" for n in "abc"]
        await post("/gradio_api/stream/event-1", chunk("d"))
        assert chunks.take("s1", wait=False) == ["/up/d/audio.wav"]  # the recording stopped
        for name in ("e", "f"):
            await post("/gradio_api/upload", name.encode())
        await post("/gradio_api/stream/event-1", chunk("f"))
        assert chunks.take("s1", wait=False) == ["/up/f/audio.wav"]
        await post("/gradio_api/stream/event-1", chunk("e"))  # later than a chunk recorded after it
        assert chunks.take("s1", wait=False) == []

    asyncio.run(scenario())
    assert chunks.tapped and chunks.take("s2", wait=False) == ["/up/x/audio.wav"]
    assert ("/gradio_api/stream/event-1", chunk("b")) in seen and len(seen) == 16  # Gradio gets every request
