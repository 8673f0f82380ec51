"""Corpus mode: inputs as users have them, many files batched, each transcript the one its file
gets alone, resumable runs that redo nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path, PurePath

import numpy as np
import pytest
import soundfile as sf

from test_speculative import DRAFTERS, build_drafter
from tiny_models import random_mel, tiny_runtime
from whisperspec.corpus.batching import decode_alone
from whisperspec.corpus.inputs import InputError, Source, expand_inputs
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder

ROOT = Path(__file__).resolve().parents[1]
CLIPS = Path(__file__).parent / "data"


# ------------------------------------------------------------------ inputs
def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_folders_globs_and_manifests_expand_to_files_named_after_their_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("calls/2024/a.wav", "calls/2024/b.FLAC", "calls/c.mp3", "calls/notes.txt", "calls/2024/d.json"):
        _touch(tmp_path / name)
    folder = expand_inputs(["calls"])
    assert [(s.audio, str(s.name)) for s in folder] == [
        ("calls/2024/a.wav", "2024/a"), ("calls/2024/b.FLAC", "2024/b"), ("calls/c.mp3", "c")]
    assert [str(s.name) for s in expand_inputs(["calls/**/*.wav"])] == ["2024/a"]

    _touch(tmp_path / "lists/x/one.wav")
    (tmp_path / "lists/set.jsonl").write_text(
        json.dumps({"audio": "x/one.wav", "language": "es"}) + "\n\n"
        + json.dumps({"audio": "../calls/c.mp3", "id": "call-c"}) + "\n")
    (tmp_path / "lists/set.csv").write_text("Audio,language\nx/one.wav,French\n")
    (tmp_path / "lists/set.txt").write_text("# a comment\nx/one.wav\n\n")
    jsonl = expand_inputs(["lists/set.jsonl"])
    assert [(s.audio, str(s.name), s.language, s.id) for s in jsonl] == [
        ("lists/x/one.wav", "x/one", "es", None), ("lists/../calls/c.mp3", "call-c", None, "call-c")]
    assert [(str(s.name), s.language) for s in expand_inputs(["lists/set.csv"])] == [("x/one", "fr")]
    assert [str(s.name) for s in expand_inputs(["lists/set.txt"])] == ["x/one"]

    # a file named twice (its folder and itself) is transcribed once; a missing one is kept, to fail by name
    both = expand_inputs(["calls", "calls/c.mp3", "missing.wav"])
    assert [str(s.name) for s in both] == ["2024/a", "2024/b", "c", "missing"]


def test_names_never_clash(tmp_path):
    for name in ("a/t.flac", "b/t.flac", "a/t.wav", "u/2024/a.wav"):
        _touch(tmp_path / name)
    sources = expand_inputs([str(tmp_path / "a/t.flac"), str(tmp_path / "b/t.flac"), str(tmp_path / "a/t.wav"),
                             str(tmp_path / "u")])
    names = [str(s.name) for s in sources]
    assert names == ["a/t.flac", "b/t", "a/t.wav", "2024/a"] and len(set(names)) == len(names)
    # a renamed file meeting another's name is numbered
    clash = expand_inputs([str(tmp_path / "u"), str(tmp_path / "a/t.flac"), str(tmp_path / "b/t.flac")])
    assert len({s.name for s in clash}) == 3


@pytest.mark.parametrize("bad, message", [
    ("empty-folder", "no audio files"), ("nothing-*.wav", "no file matches"),
    ("bad.jsonl", "cannot be read as a manifest"), ("no-audio.jsonl", "needs an 'audio' path"),
    ("escape.jsonl", "must be a relative name"), ("klingon.csv", "klingon.csv:2: language 'tlh'"),
])
def test_inputs_that_name_no_audio_are_one_line_errors(tmp_path, bad, message):
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "no-audio.jsonl").write_text('{"language": "en"}\n')
    (tmp_path / "escape.jsonl").write_text('{"audio": "a.wav", "id": "../../etc/x"}\n')
    (tmp_path / "klingon.csv").write_text("audio,language\na.wav,tlh\n")
    with pytest.raises(InputError, match=message):
        expand_inputs([str(tmp_path / bad)])


# ------------------------------------------------------------------ batched decoding is exact
@pytest.mark.parametrize("timestamps", [False, True])
def test_rows_with_their_own_prompts_and_languages_decode_as_they_do_alone(timestamps):
    """decode_batch rows differ in prompt length (none, a few tokens, a long-form context) and in
    language (given, or detected per row): every row is its one-row decode, with every drafter."""
    runtime = tiny_runtime(6, vocabulary="base")
    mel = random_mel(6, batch=3)
    prompts = [[], [440, 1374, 13], list(range(300, 345))]
    languages = ["en", None, "es"]
    options = DecodeOptions(timestamps=timestamps, temperatures=(0.0,), max_new_tokens=30)
    singles = [WindowDecoder(runtime).decode_batch(runtime.encode(mel[i:i + 1]), options, [prompts[i]],
                                                   [languages[i]])[0] for i in range(3)]
    assert singles[1].language != languages[1] or singles[1].language is not None
    window = runtime.encode(mel)
    for name in ["none", *DRAFTERS]:
        drafter = None if name == "none" else multilingual_drafter(name, runtime, 6)
        rows = WindowDecoder(runtime, drafter, make_lookahead("4")).decode_batch(window, options, prompts, languages)
        assert [r.tokens for r in rows] == [s.tokens for s in singles], name
        assert [r.language for r in rows] == [s.language for s in singles]
        assert [r.no_speech_prob for r in rows] == pytest.approx([s.no_speech_prob for s in singles], rel=1e-6)
        assert drafter is None or all(r.stats.proposed > 0 for r in rows), name  # every row drafted


def multilingual_drafter(name: str, runtime, seed: int):
    """`build_drafter` for a main model with base's (multilingual) vocabulary."""
    if name != "separate":
        return build_drafter(name, runtime, seed)
    from tiny_models import tiny_whisper
    from whisperspec.whisper.drafters.draft_whisper import draft_whisper_drafter

    draft = tiny_whisper(seed + 100, "base", d_model=32, decoder_layers=2, heads=2, dtype=runtime.model.dtype)
    return draft_whisper_drafter(runtime, draft, vocab_size_kept=3000, share_encoder=False)


def tiny_transcriber(seed: int, draft: str = "none", chunked: bool = False, **options):
    """A Transcriber around a tiny random multilingual model (float64: exact comparisons)."""
    from whisperspec.options import TranscriptionOptions, chunk_vad_options, vad_options
    from whisperspec.transcribe import Transcriber
    from whisperspec.vad import SpeechDetector
    from whisperspec.options import parse_draft_spec

    transcriber = Transcriber.__new__(Transcriber)
    transcriber.runtime = tiny_runtime(seed, vocabulary="base")
    transcriber.drafter = multilingual_drafter(draft, transcriber.runtime, seed) if draft != "none" else None
    transcriber.options = TranscriptionOptions(draft=parse_draft_spec(draft), chunked=chunked, batch_size=8,
                                               vad=vad_options(chunk_vad_options()) if chunked else None,
                                               decode=DecodeOptions(max_new_tokens=24, **options),
                                               prepend_punctuations="", append_punctuations="")
    transcriber.speech_detector = SpeechDetector(transcriber.options.vad) if chunked else None
    transcriber.load_seconds = 0.0
    return transcriber


def noise_files(folder: Path, seconds: list[float]) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for index, length in enumerate(seconds):
        path = folder / f"clip{index}-{length:g}s.flac"
        samples = (rng.standard_normal(int(length * 16000)) * 0.1).astype(np.float32) if length else np.zeros(8000)
        sf.write(path, samples, 16000)
        paths.append(path)
    return paths


def _same(a, b) -> bool:
    return (a.text, a.language, a.duration, [(s.start, s.end, s.text, s.tokens) for s in a.segments]) == \
        (b.text, b.language, b.duration, [(s.start, s.end, s.text, s.tokens) for s in b.segments])


@pytest.mark.parametrize("timestamps, draft, fallback", [(False, "int8", False), (True, "early-exit:1", False),
                                                         (True, "none", True)])
def test_transcribe_many_gives_each_file_its_one_file_transcript(tmp_path, timestamps, draft, fallback):
    """Short and long-form files (windows of one file in order, other files in the free rows), a
    silent one and a broken one, in batches of 3: each result is `transcribe`'s, with the
    temperature fallback too (a fallback window is decoded again alone)."""
    temperatures = DecodeOptions.temperatures if fallback else (0.0,)
    transcriber = tiny_transcriber(2, draft, timestamps=timestamps, temperatures=temperatures)
    paths = noise_files(tmp_path, [3, 47, 0, 9, 41, 2.5])
    broken = _touch(tmp_path / "broken.wav", b"not audio" * 50)
    alone = {str(p): transcriber.transcribe(p) for p in paths}
    decoded = [r for r in alone.values() if not r.stats.silent]
    assert len(decoded) == 5 and sum(r.stats.windows for r in decoded) > 6  # long-form files: several windows
    assert fallback == any(t > 0 for r in decoded for t in r.stats.temperatures)
    progress = []
    results = list(transcriber.transcribe_many([*paths, broken], batch_size=3, on_progress=progress.append))
    assert sorted(r.source.audio for r in results) == sorted(map(str, [*paths, broken]))
    for result in results:
        if result.source.audio == str(broken):
            assert not result.ok and "broken.wav" in result.error
        else:
            assert _same(result.transcription, alone[result.source.audio]), result.source.audio
            stats = result.transcription.stats  # what --stats prints: this file's encoder and decoder time
            assert stats.silent or (stats.encoder_ms > 0 and stats.decoder_ms > 0)
    assert sum(progress) == pytest.approx(sum(r.duration for r in decoded), abs=0.05)


def test_files_finish_in_completion_order_and_each_gets_its_manifest_language(tmp_path):
    transcriber = tiny_transcriber(3, temperatures=(0.0,))
    short, long = noise_files(tmp_path, [2, 70])
    results = list(transcriber.transcribe_many([Source(str(long), PurePath("long"), language="de"),
                                                Source(str(short), PurePath("short"), language="fr")],
                                               batch_size=2))
    assert [r.source.name.name for r in results] == ["short", "long"]  # the short file finished first
    assert [r.transcription.language for r in results] == ["fr", "de"]
    assert _same(results[1].transcription, transcriber.transcribe(long, language="de"))


@pytest.mark.real
def test_on_real_speech_each_batched_transcript_is_the_one_file_transcript(tmp_path):
    """base with `auto` drafting, the language detected per row: four short clips and a 47-s
    long-form file (short rows without timestamps, the long file's windows with them) in batches of 3."""
    from whisperspec.transcribe import Transcriber

    pieces = [sf.read(CLIPS / f"{clip}.flac", dtype="float32")[0] for clip in
              ("basic-pbx-ivr-main", "vm-options", "ss-noservice")]
    pause = np.zeros(16000, dtype=np.float32)
    long = tmp_path / "long.flac"
    sf.write(long, np.concatenate([x for piece in pieces for x in (piece, pause)]), 16000)
    paths = [CLIPS / f"{clip}.flac" for clip in ("tt-weasels", "agent-newlocation", "privacy-prompt",
                                                  "ss-noservice")] + [long]
    transcriber = Transcriber("base", draft="auto")
    alone = {str(p): transcriber.transcribe(p) for p in paths}
    assert len(alone[str(long)].segments) > 3 and alone[str(long)].stats.windows == 2
    batched = {r.source.audio: r.transcription for r in transcriber.transcribe_many(paths, batch_size=3)}
    assert batched.keys() == alone.keys()
    for path, result in batched.items():
        assert _same(result, alone[path]), path
        assert result.language == "en"
    # auto drafts where its timings say it pays (not on every short clip): somewhere here it did
    assert sum(r.stats.speculation.accepted for r in batched.values()) > 0


# ------------------------------------------------------------------ chunked long-form
def speech_file(path: Path, clips: list[str], pause: float = 1.0) -> Path:
    """The test clips (real speech) one after another with `pause` seconds of silence between."""
    silence = np.zeros(int(pause * 16000), dtype=np.float32)
    pieces = [x for clip in clips for x in (sf.read(CLIPS / f"{clip}.flac", dtype="float32")[0], silence)]
    sf.write(path, np.concatenate(pieces), 16000)
    return path


LONG_CLIPS = ["basic-pbx-ivr-main", "vm-options", "ss-noservice", "tt-weasels", "agent-newlocation",
              "privacy-prompt"]


def test_chunk_spans_join_speech_regions_up_to_a_window_and_cut_longer_ones():
    from whisperspec.whisper.chunked import chunk_spans

    assert chunk_spans([100, 200, 700, 1500], limit=500) == [(0, 200), (200, 700), (700, 1200), (1200, 1500)]
    assert chunk_spans([400, 900, 1000], limit=500) == [(0, 400), (400, 900), (900, 1000)]
    assert chunk_spans([], limit=500) == []


@pytest.mark.parametrize("draft", ["none", "int8"])
def test_a_chunked_file_decodes_its_chunks_together_and_each_as_it_would_alone(tmp_path, draft):
    """`chunked`: a long file's speech (VAD regions joined into chunks of at most 30 s, each one
    window) decodes in rows of one batch; the transcript is the same in batches of 1 and 4, through
    `transcribe` and `transcribe_many` beside a sequential long-form file, and the language detected
    on the first chunk is every chunk's."""
    long = speech_file(tmp_path / "long.flac", LONG_CLIPS)
    other = speech_file(tmp_path / "other.flac", ["vm-options", "basic-pbx-ivr-main"] * 2)
    transcriber = tiny_transcriber(4, draft, chunked=True)  # the fallback schedule: each chunk decoded at 0 only
    transcriber.options = replace(transcriber.options, batch_size=1)
    alone = transcriber.transcribe(long)
    transcriber.options = replace(transcriber.options, batch_size=4)
    together = transcriber.transcribe(long)
    assert _same(alone, together) and alone.stats.windows >= 3  # chunks of at most 30 s
    assert set(alone.stats.temperatures) == {0.0}
    prepared = transcriber.prepare(long)
    walk = transcriber.walk(prepared)
    assert [chunk.index for chunk in walk.ready()] == [0]  # the language first, on the first chunk
    decode_alone(transcriber, transcriber.window_decoder(), prepared, walk)
    assert {window.language for window in walk.results} == {alone.language}
    for segment in alone.segments:  # a chunk's segment spans its chunk: at most 30 s, in the original's times
        assert 0 <= segment.start < segment.end <= alone.duration + 0.01
    sequential = tiny_transcriber(4, draft, timestamps=True)
    batched = {r.source.audio: r.transcription for r in transcriber.transcribe_many([other, long], batch_size=4)}
    assert _same(batched[str(long)], alone)
    assert _same(batched[str(other)], transcriber.transcribe(other))
    assert not _same(sequential.transcribe(long), alone)  # the sequential walk is another walk


@pytest.mark.real
def test_on_real_speech_a_chunked_file_is_the_same_alone_and_batched(tmp_path):
    """base with `auto` drafting: 66 s of speech in chunks, decoded one chunk at a time and four at
    a time, gives one transcript, and it is the speech's words."""
    from whisperspec.evaluation.scoring import score
    from whisperspec.transcribe import Transcriber

    long = speech_file(tmp_path / "long.flac", LONG_CLIPS)
    transcriber = Transcriber("base", draft="auto", chunked=True, batch_size=1)
    alone = transcriber.transcribe(long)
    batched = [r.transcription for r in transcriber.transcribe_many([long], batch_size=4)]
    assert _same(batched[0], alone) and alone.language == "en" and alone.stats.windows >= 3
    references = {r["id"]: r["text"] for r in map(json.loads, (CLIPS / "references.jsonl").read_text().splitlines())}
    assert score([" ".join(references[clip] for clip in LONG_CLIPS)], [alone.text], "en").wer < 0.15, alone.text


def test_chunked_asks_for_no_timestamps_inside_chunks():
    from whisperspec.options import TranscriptionOptions

    with pytest.raises(ValueError, match="chunked"):
        TranscriptionOptions.build(chunked=True, timestamps=True)


# ------------------------------------------------------------------ resumable runs
def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.real
def test_ctrl_c_then_a_rerun_finishes_the_rest_and_redoes_nothing(tmp_path):
    corpus, out = tmp_path / "corpus", tmp_path / "out"
    for copy in "abcdef":  # enough files that the run is still going when Ctrl-C comes, even on a busy machine
        (corpus / copy).mkdir(parents=True)
        for clip in sorted(CLIPS.glob("*.flac")):
            (corpus / copy / clip.name).write_bytes(clip.read_bytes())
    names = sorted(f"{p.parent.name}/{p.stem}" for p in corpus.rglob("*.flac"))
    command = [sys.executable, "-m", "whisperspec.cli", "transcribe", str(corpus), "--model", "tiny.en",
               "--language", "en", "--output-dir", str(out), "--format", "txt,json", "--batch-size", "2", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C as in a terminal: a test run started in the background (`pytest &`) ignores SIGINT, and
    # so would the command it starts
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while not _rows(out / "results.jsonl") and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    assert first.wait(120) == 130, first.stderr.read()
    done = [r["output"] for r in _rows(out / "results.jsonl")]
    assert 0 < len(done) < len(names)
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporary left behind
    for name in done:  # a recorded file has all its results
        assert (out / f"{name}.txt").is_file() and (out / f"{name}.json").is_file()

    rerun = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(done)} of {len(names)} files already done" in rerun.stderr
    rows = _rows(out / "results.jsonl")
    assert sorted(r["output"] for r in rows) == names  # each file once, across both runs
    assert {r["status"] for r in rows} == {"ok"} and {r["language"] for r in rows} == {"en"}
    assert f"whisperspec: {len(names) - len(done)} files ok, 0 failed" in rerun.stderr
    transcript = json.loads((out / "a/tt-weasels.json").read_text())
    assert "phone system" in transcript["text"].lower()


def test_files_of_a_dead_ray_worker_are_handed_out_again_then_alone_then_given_up():
    from collections import deque

    from whisperspec.corpus.ray_engine import ATTEMPTS, _lost

    files = [Source(f"{name}.wav", PurePath(name)) for name in "abc"]
    waiting = deque([(files[2:], 0)])
    with pytest.warns(UserWarning, match="handed out again"):
        assert list(_lost(files[:2], 1, waiting, RuntimeError())) == []
    assert list(waiting) == [(files[:2], 1), (files[2:], 0)]  # first loss: the chunk again, first
    waiting.popleft()
    with pytest.warns(UserWarning):
        list(_lost(files[:2], 2, waiting, RuntimeError()))
    assert list(waiting)[:2] == [([files[0]], 2), ([files[1]], 2)]  # second loss: file by file
    given_up = list(_lost([files[0]], ATTEMPTS, deque(), RuntimeError()))
    assert [(r.source, r.ok) for r in given_up] == [(files[0], False)] and "died 3 times" in given_up[0].error
