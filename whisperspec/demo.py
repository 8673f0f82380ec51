"""Gradio demo: transcribe with and without speculation, and see which tokens the draft got right.

    whisperspec demo [--host 127.0.0.1] [--port 7860] [--models base,tiny.en,/srv/my-model]
                     [--max-seconds 600]                    (or: python app/app.py)

A visitor chooses among the models the operator lists (embedded names by default; folders only when
named on the command line) and sends at most --max-seconds of audio per request: the work of one
request is bounded by what the operator allows, whatever the upload claims.
"""

from __future__ import annotations

import argparse
import html
import os
import shutil
import signal
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from whisperspec import defaults
from whisperspec.audio import AudioError
from whisperspec.models import EMBEDDED_MODELS
from whisperspec.output import write_outputs
from whisperspec.resources import sample_audio
from whisperspec.transcribe import Transcriber
from whisperspec.spec import DraftSpec
from whisperspec.whisper.drafters import DRAFTERS, parse_draft_spec
from whisperspec.whisper.model import COMPUTE_TYPES

SAMPLE = sample_audio()
DRAFTS = [kind.name for kind in DRAFTERS]
LOOKAHEADS = list(dict.fromkeys([defaults.LOOKAHEAD, "2", "4", "6", "heuristic", "confidence", "cost"]))
MAX_UPLOAD_BYTES = 200 << 20  # a 2-core machine: hours of audio would block the queue for everyone
MAX_SECONDS = 600.0  # audio per request: what one visitor may hold the only worker for
MAX_TRANSCRIBERS = 3  # loaded models kept (each ~0.5-1 GB); the least recently used one goes
LEGEND = ('<div class="ws-legend"><span class="ws-tok ws-draft">drafted, accepted</span>'
          '<span class="ws-tok ws-main">from the main model (correction or bonus)</span></div>')
CSS = """
.ws-tokens { line-height: 2.1; font-size: 1.05em; }
.ws-tok { padding: 2px 1px; border-radius: 4px; margin: 0 1px; white-space: pre-wrap; }
.ws-draft { background: #c8f7c5; color: #114411; }
.ws-main { background: #ffd8a8; color: #5a2d00; }
.ws-legend .ws-tok { margin-right: 12px; padding: 2px 8px; }
"""


class TranscriberPool:
    """Models load once and are shared by every request (one per model/drafter/lookahead/compute
    type), at most `size` of them: the least recently used is dropped when another is needed."""

    def __init__(self, size: int = MAX_TRANSCRIBERS):
        self._transcribers: OrderedDict[tuple, Transcriber] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def get(self, model: str, draft: DraftSpec, compute_type: str = "float32") -> Transcriber:
        key = (model, str(draft), compute_type)
        with self._lock:
            if key not in self._transcribers:
                while len(self._transcribers) >= self.size:
                    self._transcribers.popitem(last=False)
                self._transcribers[key] = Transcriber(model, compute_type=compute_type, draft=draft)
            self._transcribers.move_to_end(key)
            return self._transcribers[key]


def allowed_models(names: str | list[str] | None = None) -> dict[str, str]:
    """The operator's list (embedded names and model folders) as {what a visitor picks: what loads}.
    A folder is known by its real path, so two spellings of it are one model."""
    allowed = {}
    for name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names or list(EMBEDDED_MODELS)):
        if name in EMBEDDED_MODELS:
            allowed[name] = name
            continue
        path = Path(name).expanduser()
        if not (path.is_dir() and ((path / "config.json").is_file() or (path / "model.bin").is_file())):
            raise ValueError(f"--models: {name!r} is neither {' nor '.join(EMBEDDED_MODELS)} nor a model folder")
        allowed[name] = os.path.realpath(path)
    return allowed


def resolve_model(text: str, allowed: dict[str, str] | None = None) -> str:
    """A model the operator allows: one of its names, or another spelling of an allowed folder.
    A request never makes the server read any other path (an upload included)."""
    allowed = allowed or allowed_models()
    text = (text or "").strip() or next(iter(allowed))
    if text in allowed:
        return allowed[text]
    if os.path.realpath(Path(text).expanduser()) in allowed.values():
        return os.path.realpath(Path(text).expanduser())
    raise ValueError(f"model {text!r}: this demo serves {', '.join(allowed)}")


def token_view(segments, tokenizer) -> str:
    """Every output token, coloured by how it arrived."""
    spans = []
    for segment in segments:
        for token, drafted in zip(segment.tokens, segment.from_draft or [False] * len(segment.tokens)):
            kind, title = ("ws-draft", "proposed by the draft, accepted") if drafted else (
                "ws-main", "produced by the main model")
            spans.append(f'<span class="ws-tok {kind}" title="{title}">'
                         f"{html.escape(tokenizer.decode([token]))}</span>")
    return LEGEND + '<div class="ws-tokens">' + "".join(spans) + "</div>"


def stats_markdown(result, plain=None) -> str:
    rows = result.stats_rows()
    if plain is not None:
        same = [s.tokens for s in plain.segments] == [s.tokens for s in result.segments]
        speedup = plain.stats["decoder_ms"] / max(result.stats["decoder_ms"], 1e-9)
        rows += [("without draft: decoder", f"{plain.stats['decoder_ms']:.0f} ms"),
                 ("decode speed-up", f"{speedup:.2f}x"),
                 ("transcripts", "identical ✔" if same else f"DIFFER (a bug): {plain.text!r}")]
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)


def transcribe_request(pool: TranscriberPool, audio_path, model, draft, lookahead, language, task, compare,
                       compute_type="float32", progress=None, allowed: dict[str, str] | None = None,
                       max_seconds: float = MAX_SECONDS):
    """One request: returns (text, segments, token view, stats, files). Raises ValueError with a
    message for the page when the input cannot be used."""
    if not audio_path:
        raise ValueError("upload or record some audio first")
    upload = Path(audio_path)
    if upload.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"{upload.name}: larger than {MAX_UPLOAD_BYTES >> 20} MB")
    model = resolve_model(model, allowed)
    if (draft or "none") not in DRAFTS:  # a visitor never names a model or a file to load as a draft
        raise ValueError(f"drafter {draft!r}: one of {', '.join(DRAFTS)}")
    spec = parse_draft_spec(draft or "none", lookahead if draft and draft != "none" else None)
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute type {compute_type!r}: one of {', '.join(COMPUTE_TYPES)}")
    options = {"language": language or None, "task": task or "transcribe"}
    if progress:
        progress(0.1, desc="loading model")
    transcriber = pool.get(model, spec, compute_type)
    if progress:
        progress(0.3, desc="transcribing")
    try:
        result = transcriber.transcribe(upload, max_seconds=max_seconds, **options)
        plain = (pool.get(model, parse_draft_spec("none"), compute_type).transcribe(upload, max_seconds=max_seconds,
                                                                                    **options)
                 if compare and spec.drafts else None)
    except AudioError as error:
        raise ValueError(str(error).replace(str(upload), upload.name)) from error  # no server paths shown
    result.source = upload.name  # the downloadable files never carry a server path
    out_dir = Path(tempfile.mkdtemp(prefix="request-", dir=_results_root()))
    files = write_outputs(result, out_dir, upload.stem or "transcript", ["all"])
    segments = [[round(s.start, 2), round(s.end, 2), s.text.strip()] for s in result.segments]
    return (result.text, segments, token_view(result.segments, transcriber.runtime.tokenizer),
            stats_markdown(result, plain), [str(f) for f in files])


_results = None


def _results_root() -> str:
    """One temporary folder per server process for result files, removed when the process ends."""
    global _results
    if _results is None:
        _results = tempfile.TemporaryDirectory(prefix="whisperspec-demo-")
    return _results.name


def build_demo(default_model: str | None = None, models: str | list[str] | None = None,
               max_seconds: float = MAX_SECONDS):
    import gradio as gr

    pool = TranscriberPool()
    allowed = allowed_models(models)
    default_model = default_model or next(iter(allowed))
    resolve_model(default_model, allowed)

    def run(audio_path, model, draft, lookahead, language, task, compare, compute_type, progress=gr.Progress()):
        try:
            return transcribe_request(pool, audio_path, model, draft, lookahead, language, task, compare,
                                      compute_type, progress, allowed, max_seconds)
        except ValueError as error:
            raise gr.Error(str(error)) from error

    # Uploads live in Gradio's temporary folder (one copy per distinct file, shared by requests that
    # upload the same bytes); delete_cache removes them, and the result files, after an hour.
    with gr.Blocks(title="whisperspec", css=CSS, delete_cache=(600, 3600)) as demo:
        gr.Markdown("# whisperspec\nWhisper on the CPU with lossless speculative decoding: a cheap draft "
                    "proposes tokens, the main model checks them in one pass and keeps exactly its own output.")
        with gr.Row():
            with gr.Column(scale=1):
                audio = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Audio")
                model = gr.Dropdown(list(allowed), value=default_model, label="Model",
                                    info="the models this demo's operator serves")
                draft = gr.Dropdown(DRAFTS, value=defaults.DRAFT, label="Drafter")
                lookahead = gr.Dropdown(LOOKAHEADS, value=defaults.LOOKAHEAD, label="Lookahead")
                compute_type = gr.Radio(list(COMPUTE_TYPES), value="float32", label="Compute type",
                                        info="int8: a faster, slightly different encoder (drafting stays exact)")
                with gr.Row():
                    language = gr.Textbox("", label="Language", placeholder="detect")
                    task = gr.Radio(["transcribe", "translate"], value="transcribe", label="Task")
                compare = gr.Checkbox(True, label="Compare with decoding without a draft")
                button = gr.Button("Transcribe", variant="primary", elem_id="transcribe")
            with gr.Column(scale=2):
                text = gr.Textbox(label="Transcript", lines=3, elem_id="transcript")
                tokens = gr.HTML(label="Tokens", elem_id="token-view")
                stats = gr.Markdown(elem_id="stats")
                segments = gr.Dataframe(headers=["start", "end", "text"], label="Segments")
                files = gr.File(label="Download (txt, srt, vtt, json)", file_count="multiple")
        inputs = [audio, model, draft, lookahead, language, task, compare, compute_type]
        button.click(run, inputs, [text, segments, tokens, stats, files])
        if SAMPLE.is_file():
            gr.Examples([[str(SAMPLE), default_model, "auto", defaults.LOOKAHEAD, "", "transcribe", True, "float32"]], inputs,
                        label="Bundled sample (Asterisk prompt, CC BY-SA 3.0)")
    # one request at a time: a decode already uses both cores of this machine
    return demo.queue(default_concurrency_limit=1, max_size=64)


def main(host: str = "127.0.0.1", port: int = 7860, model: str | None = None, models: str | None = None,
         max_seconds: float = MAX_SECONDS) -> None:
    demo = build_demo(model, models, max_seconds)
    for stop in (signal.SIGTERM, signal.SIGINT):  # visitors' transcripts do not outlive the server
        signal.signal(stop, _remove_results_and_exit)
    demo.launch(server_name=host, server_port=port, allowed_paths=[str(SAMPLE.parent)],
                max_file_size=MAX_UPLOAD_BYTES)  # refused before it is even stored


def _remove_results_and_exit(signum, frame) -> None:
    if _results is not None:
        shutil.rmtree(_results.name, ignore_errors=True)
    os._exit(128 + signum)  # the server's threads would keep a normal exit waiting


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whisperspec demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--models", default=",".join(EMBEDDED_MODELS),
                        help="comma-separated models visitors may choose: embedded names and model folders")
    parser.add_argument("--model", default=None, help="the one chosen at first (default: the first of --models)")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS, help="audio per request")
    args = parser.parse_args(argv)
    try:
        allowed_models(args.models)
    except ValueError as error:
        parser.error(str(error))
    main(args.host, args.port, args.model, args.models, args.max_seconds)
    return 0

