"""Gradio demo: transcribe with and without speculation, and see which tokens the draft got right.

    whisperspec demo [--host 127.0.0.1] [--port 7860] [--models base,tiny.en,/srv/my-model]
                     [--max-seconds 600] [--max-request-seconds 120]    (or: python app/app.py)

A visitor chooses among the models the operator lists (embedded names by default; folders only when
named on the command line), sends at most --max-seconds of audio per request, and a request computes
for at most --max-request-seconds (then it stops and the visitor is told why): the work of one
request is bounded by what the operator allows, whatever the upload claims. A request whose visitor
leaves (closes the page, or cancels through the API) stops at its next decoder round.

Files are transcribed one request at a time; the live microphone (its own tab) has a queue of its
own, one recording at a time, so a long recording never holds the file queue and a long file never
holds a recording. docs/DEMO.md says more.
"""

# No `from __future__ import annotations` here: Gradio finds the `gr.Request` a handler wants by the
# annotation's object, and string annotations naming a local import do not resolve.
import argparse
import asyncio
import html
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from whisperspec import defaults
from whisperspec.audio import SAMPLE_RATE, AudioError
from whisperspec.demo.microphone import LiveSession, StreamedChunks
from whisperspec.demo.requests import ActiveRequests, RequestStopped
from whisperspec.demo.live_transcript import LiveTranscript
from whisperspec.models import EMBEDDED_MODELS
from whisperspec.output import write_outputs
from whisperspec.resources import sample_audio
from whisperspec.transcribe import Transcriber
from whisperspec.spec import DraftSpec
from whisperspec.options import DRAFTERS, parse_draft_spec
from whisperspec.options import COMPUTE_TYPES, TranscriptionOptions
from whisperspec.whisper.model import resolve_compute_type

SAMPLE = sample_audio()
DRAFTS = [kind.name for kind in DRAFTERS]
LOOKAHEADS = list(dict.fromkeys([defaults.LOOKAHEAD, "2", "4", "6", "heuristic", "confidence", "cost"]))
MAX_UPLOAD_BYTES = 200 << 20  # a 2-core machine: hours of audio would block the queue for everyone
MAX_SECONDS = 600.0  # audio per request: what one visitor may hold the only worker for
# Computing time per request (and the length of a live recording): about twice what the longest
# audio a request may send (MAX_SECONDS) takes with base, drafted and then compared with plain
# decoding, at the long-form real-time factors measured on 2 cores (docs/BENCHMARKS.md): a normal
# request finishes on a loaded machine, one that loops on noise is stopped, and nobody waits
# behind it longer than this.
MAX_REQUEST_SECONDS = 120.0
MAX_TRANSCRIBERS = 3  # loaded models kept (each ~0.5-1 GB); the least recently used one goes
# The audio a server expects each of its transcribers to decode over its life (many visitors' clips):
# one-off costs this repays (building a drafter, compiling a pass) are paid on the first request,
# not after the requests that would show the server is busy. A single clip could never repay a
# draft's load, so without it a fresh server's first visitors would see no drafting at all.
SERVING_SECONDS = 600.0
LEGEND = ('<div class="ws-legend"><span class="ws-tok ws-draft">drafted, accepted</span>'
          '<span class="ws-tok ws-main">from the main model (correction or bonus)</span></div>')
LIVE_LEGEND = LEGEND.replace("</div>", '<span class="ws-tok ws-draft ws-tentative">tentative (may change)</span></div>')
# what the page says where a transcript is empty: silence, noise or music the model found no words in
NO_SPEECH = "no speech found in this audio"
NO_SPEECH_VIEW = f'<div class="ws-tokens"><em>{NO_SPEECH}</em></div>'
CSS = """
.ws-tokens { line-height: 2.1; font-size: 1.05em; }
.ws-tok { padding: 2px 1px; border-radius: 4px; margin: 0 1px; white-space: pre-wrap; }
.ws-draft { background: #c8f7c5; color: #114411; }
.ws-main { background: #ffd8a8; color: #5a2d00; }
.ws-tentative { opacity: 0.55; font-style: italic; outline: 1px dashed #888; }
.ws-legend .ws-tok { margin-right: 12px; padding: 2px 8px; }
"""


class TranscriberPool:
    """Models load once and are shared by every request (one per model/drafter/lookahead/compute
    type), at most `size` of them: the least recently used is dropped when another is needed.
    A transcriber decodes one request at a time (its caches are its own): `use` waits for it."""

    def __init__(self, size: int = MAX_TRANSCRIBERS, serving_seconds: float = SERVING_SECONDS):
        self._transcribers: OrderedDict[tuple, tuple[Transcriber, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()
        self.size, self.serving_seconds = size, serving_seconds

    def get(self, model: str, draft: DraftSpec, compute_type: str = defaults.COMPUTE_TYPE) -> Transcriber:
        return self._entry(model, draft, compute_type)[0]

    def warm(self, model: str, draft: str = defaults.DRAFT, lookahead: str = defaults.LOOKAHEAD) -> None:
        """Load a model and decode the bundled sample with it, so the first visitor waits for neither
        the load nor the drafter's build (a server starting up)."""
        with self.use(model, parse_draft_spec(draft, lookahead)) as transcriber:
            transcriber.transcribe(SAMPLE)

    @contextmanager
    def use(self, model: str, draft: DraftSpec, compute_type: str = defaults.COMPUTE_TYPE):
        transcriber, busy = self._entry(model, draft, compute_type)
        with busy:
            yield transcriber

    def _entry(self, model: str, draft: DraftSpec, compute_type: str) -> tuple[Transcriber, threading.Lock]:
        compute_type = resolve_compute_type(compute_type)  # "auto" and what it stands for share one
        key = (model, str(draft), compute_type)
        with self._lock:
            if key not in self._transcribers:
                while len(self._transcribers) >= self.size:
                    self._transcribers.popitem(last=False)  # a request still using it keeps its own reference
                options = TranscriptionOptions.build(model, compute_type=compute_type, draft=draft)
                transcriber = Transcriber(options=options)
                transcriber.expect(self.serving_seconds)
                self._transcribers[key] = (transcriber, threading.Lock())
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
    spans = [_token_span(token, drafted, tokenizer) for segment in segments
             for token, drafted in zip(segment.tokens, segment.from_draft or [False] * len(segment.tokens))]
    if not spans:
        return LEGEND + NO_SPEECH_VIEW
    return LEGEND + '<div class="ws-tokens">' + "".join(spans) + "</div>"


def _token_span(token: int, drafted: bool, tokenizer, tentative: bool = False) -> str:
    kind, title = ("ws-draft", "proposed by the draft, accepted") if drafted else (
        "ws-main", "produced by the main model")
    if tentative:
        kind, title = kind + " ws-tentative", title + "; tentative"
    return f'<span class="ws-tok {kind}" title="{title}">{html.escape(tokenizer.decode([token]))}</span>'


def stats_markdown(result, plain=None) -> str:
    rows = result.stats_rows()
    if not result.segments:
        rows.insert(0, ("transcript", NO_SPEECH))
    if plain is not None and result.stats.decoder_ms:  # nothing decoded: nothing to compare
        same = [s.tokens for s in plain.segments] == [s.tokens for s in result.segments]
        speedup = plain.stats.decoder_ms / max(result.stats.decoder_ms, 1e-9)
        rows += [("without draft: decoder", f"{plain.stats.decoder_ms:.0f} ms"),
                 ("decode speed-up", f"{speedup:.2f}x"),
                 ("transcripts", "identical ✔" if same else f"DIFFER (a bug): {plain.text!r}")]
    return _table(rows)


def live_stats(live: LiveTranscript, confirmed, tentative, missing_seconds: float = 0.0) -> str:
    """How far the recording is, what is confirmed, and how the latest reading of the buffer went."""
    rows = [("recorded", f"{live.seconds:.1f} s"),
            ("recording not received (on its way, or lost)", f"{missing_seconds:.1f} s"),
            ("buffer (read again at each step)", f"{len(live.buffer) / SAMPLE_RATE:.1f} s"),
            ("confirmed tokens", f"{len(confirmed)} ({sum(t.from_draft for t in confirmed)} drafted and accepted)"),
            ("tentative tokens", f"{len(tentative)} ({sum(t.from_draft for t in tentative)} drafted and accepted)")]
    if live.last is not None:
        rows += [(f"latest reading: {name}", value) for name, value in live.last.stats_rows() if name != "audio"]
    return _table(rows)


def live_outputs(live: LiveSession) -> tuple:
    """(the session, token view, confirmed text, stats) for the page; tentative tokens faded."""
    live.shown = live.transcript.last
    confirmed, tentative = live.transcript.tokens()
    stats = live_stats(live.transcript, confirmed, tentative, live.missing_seconds)
    if not (confirmed or tentative):
        return live, LIVE_LEGEND + (NO_SPEECH_VIEW if live.transcript.last is not None else ""), "", stats
    tokenizer = live.runtime.tokenizer
    spans = [_token_span(t.id, t.from_draft, tokenizer) for t in confirmed]
    spans += [_token_span(t.id, t.from_draft, tokenizer, tentative=True) for t in tentative]
    view = LIVE_LEGEND + '<div class="ws-tokens">' + "".join(spans) + "</div>"
    return live, view, live.runtime.decode_text([t.id for t in confirmed]).strip(), stats


def _table(rows) -> str:
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)


def request_choices(model, draft, lookahead, compute_type, allowed: dict[str, str] | None = None):
    """What a visitor picked, checked: (model to load, draft spec, compute type). Raises ValueError
    with a message for the page."""
    model = resolve_model(model, allowed)
    if (draft or "none") not in DRAFTS:  # a visitor never names a model or a file to load as a draft
        raise ValueError(f"drafter {draft!r}: one of {', '.join(DRAFTS)}")
    spec = parse_draft_spec(draft or "none", lookahead if draft and draft != "none" else None)
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute type {compute_type!r}: one of {', '.join(COMPUTE_TYPES)}")
    return model, spec, compute_type


def transcribe_request(pool: TranscriberPool, audio_path, model, draft, lookahead, language, task, compare,
                       compute_type=defaults.COMPUTE_TYPE, progress=None, allowed: dict[str, str] | None = None,
                       max_seconds: float = MAX_SECONDS, interrupt: Callable[[], None] | None = None):
    """One request: returns (text, segments, token view, stats, files). Raises ValueError with a
    message for the page when the input cannot be used; `interrupt` (a RequestGuard) is checked
    between decoder rounds and may stop the decode with RequestStopped."""
    if not audio_path:
        raise ValueError("upload or record some audio first")
    upload = Path(audio_path)
    if upload.stat().st_size > MAX_UPLOAD_BYTES:
        raise ValueError(f"{upload.name}: larger than {MAX_UPLOAD_BYTES >> 20} MB")
    model, spec, compute_type = request_choices(model, draft, lookahead, compute_type, allowed)
    options = {"language": language or None, "task": task or "transcribe", "interrupt": interrupt}
    if progress:
        progress(0.1, desc="loading model")
    try:
        with pool.use(model, spec, compute_type) as transcriber:
            if progress:
                progress(0.3, desc="transcribing")
            result = transcriber.transcribe(upload, max_seconds=max_seconds, **options)
        plain = None
        if compare and spec.drafts:
            with pool.use(model, parse_draft_spec("none"), compute_type) as plain_transcriber:
                plain = plain_transcriber.transcribe(upload, max_seconds=max_seconds, **options)
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
               max_seconds: float = MAX_SECONDS, max_request_seconds: float | None = MAX_REQUEST_SECONDS,
               requests: ActiveRequests | None = None, pool: TranscriberPool | None = None):
    """requests: where the running requests are kept; pool: the loaded models (each made here unless
    given: a test may watch the requests, a server warms its pool first)."""
    import gradio as gr

    pool = pool or TranscriberPool()
    streamed = StreamedChunks()
    requests = requests or ActiveRequests()
    requests.seconds = max_request_seconds
    allowed = allowed_models(models)
    default_model = default_model or next(iter(allowed))
    resolve_model(default_model, allowed)

    async def run(audio_path, model, draft, lookahead, language, task, compare, compute_type,
                  request: gr.Request, progress=gr.Progress()):
        try:
            return await requests.run(request.session_hash, lambda guard: transcribe_request(
                pool, audio_path, model, draft, lookahead, language, task, compare, compute_type, progress, allowed,
                max_seconds, guard))
        except (ValueError, RequestStopped) as error:
            raise gr.Error(str(error), print_exception=False) from error

    async def read_live(live: LiveSession, session: str, finish: bool = False) -> None:
        try:
            await requests.run(session, lambda guard: live.read(pool, guard, finish))
        except (ValueError, RequestStopped) as error:
            live.error = str(error)

    def arrived(chunk, session: str, wait: bool = True) -> list[str]:
        """The chunks that reached the server since the last call, in recording order (StreamedChunks)."""
        if not streamed.tapped:
            return [chunk] if chunk else []
        return [path for path in streamed.take(session, wait) if path in demo.upload_file_set]

    async def listen(chunk, live, model, draft, lookahead, compute_type, language, task, request: gr.Request):
        try:
            live = live or LiveSession(request_choices(model, draft, lookahead, compute_type, allowed), language, task)
            for path in arrived(chunk, request.session_hash):
                live.add(path)
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from error
        if live.error:
            raise gr.Error(live.error, print_exception=False)
        if live.transcript.ready and (live.reading is None or live.reading.done()):
            live.reading = asyncio.ensure_future(read_live(live, request.session_hash))
        # a chunk arrives every 0.1 s: the page is updated only when a reading has finished
        return live_outputs(live) if live.changed else (live, gr.skip(), gr.skip(), gr.skip())

    async def stop_listening(live, request: gr.Request):
        if live is None:
            return None, "", "", ""
        live.ended = time.monotonic()
        for path in arrived(None, request.session_hash, wait=False):
            live.add(path)
        if live.reading is not None:
            await live.reading
        await read_live(live, request.session_hash, finish=True)
        if live.error:
            raise gr.Error(live.error, print_exception=False)
        return live_outputs(live)

    def leave(request: gr.Request):  # the visitor closed the page: stop their work
        requests.leave(request.session_hash)
        streamed.forget(request.session_hash)

    class Demo(gr.Blocks):
        def launch(self, *args, **kwargs):
            """Gradio's launch, with the page's style and the middleware that keeps every streamed chunk."""
            from starlette.middleware import Middleware

            kwargs.setdefault("css", CSS)
            app_kwargs = dict(kwargs.pop("app_kwargs", None) or {})
            app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(streamed.tap)]
            return super().launch(*args, app_kwargs=app_kwargs, **kwargs)

    # Uploads live in Gradio's temporary folder (one copy per distinct file, shared by requests that
    # upload the same bytes); delete_cache removes them, and the result files, after an hour.
    with Demo(title="whisperspec", delete_cache=(600, 3600)) as demo:
        gr.Markdown("# whisperspec\nWhisper on the CPU with lossless speculative decoding: a cheap draft "
                    "proposes tokens, the main model checks them in one pass and keeps exactly its own output.")
        with gr.Row():
            with gr.Column(scale=1):
                model = gr.Dropdown(list(allowed), value=default_model, label="Model",
                                    info="the models this demo's operator serves")
                draft = gr.Dropdown(DRAFTS, value=defaults.DRAFT, label="Drafter")
                lookahead = gr.Dropdown(LOOKAHEADS, value=defaults.LOOKAHEAD, label="Lookahead")
                compute_type = gr.Radio(list(COMPUTE_TYPES), value=defaults.COMPUTE_TYPE, label="Compute type",
                                        info="auto: bfloat16 on processors with AMX or AMD's AVX-512 BF16, "
                                             "else float32; bfloat16 and int8 run the encoder faster, slightly "
                                             "differently (drafting stays exact whatever the type)")
                with gr.Row():
                    language = gr.Textbox("", label="Language", placeholder="detect")
                    task = gr.Radio(["transcribe", "translate"], value="transcribe", label="Task")
            with gr.Column(scale=2), gr.Tabs():
                with gr.Tab("File"):
                    audio = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Audio")
                    compare = gr.Checkbox(True, label="Compare with decoding without a draft")
                    button = gr.Button("Transcribe", variant="primary", elem_id="transcribe")
                    text = gr.Textbox(label="Transcript", lines=3, elem_id="transcript")
                    tokens = gr.HTML(label="Tokens", elem_id="token-view")
                    stats = gr.Markdown(elem_id="stats")
                    segments = gr.Dataframe(headers=["start", "end", "text"], label="Segments")
                    files = gr.File(label="Download (txt, srt, vtt, json)", file_count="multiple")
                with gr.Tab("Live microphone", elem_id="live-tab"):
                    gr.Markdown("Speak: the recording is transcribed as it arrives. Words turn solid once two "
                                "readings of the growing recording agree on them; faded ones may still change.")
                    live_audio = gr.Audio(sources=["microphone"], type="filepath", streaming=True,
                                          label="Microphone", elem_id="live-audio")
                    live_text = gr.Textbox(label="Confirmed transcript", lines=3, elem_id="live-transcript")
                    live_tokens = gr.HTML(elem_id="live-view")
                    live_table = gr.Markdown(elem_id="live-stats")
        inputs = [audio, model, draft, lookahead, language, task, compare, compute_type]
        button.click(run, inputs, [text, segments, tokens, stats, files])
        if SAMPLE.is_file():
            gr.Examples([[str(SAMPLE), default_model, "auto", defaults.LOOKAHEAD, "", "transcribe", True,
                          defaults.COMPUTE_TYPE]], inputs,
                        label="Bundled sample (Asterisk prompt, CC BY-SA 3.0)")
        live = gr.State(None)
        settings = [model, draft, lookahead, compute_type, language, task]
        shown = [live, live_tokens, live_text, live_table]
        live_audio.start_recording(lambda: (None, "", "", ""), None, shown, queue=False)
        # A recording is one long event: it gets a queue of its own (one at a time), so it never
        # holds the file queue; it lasts at most as long as one request may compute.
        live_audio.stream(listen, [live_audio, live, *settings], shown, stream_every=0.5,
                          time_limit=None if max_request_seconds is None else math.ceil(max_request_seconds),
                          concurrency_limit=1, concurrency_id="live", show_progress="hidden")
        live_audio.stop_recording(stop_listening, [live], shown, concurrency_id="live")
        demo.unload(leave)
    # one file at a time: a decode already uses both cores of this machine
    return demo.queue(default_concurrency_limit=1, max_size=64)


def main(host: str = "127.0.0.1", port: int = 7860, model: str | None = None, models: str | None = None,
         max_seconds: float = MAX_SECONDS, max_request_seconds: float | None = MAX_REQUEST_SECONDS) -> None:
    pool = TranscriberPool()
    default_model = resolve_model(model, allowed_models(models))
    print(f"loading {default_model} and decoding the bundled sample once ...", flush=True)
    pool.warm(default_model)
    # Visitors' uploads in this server's own folder, unless the operator chose one: by default Gradio
    # keeps every server's uploads in one folder per machine, each file named by its bytes' hash, and
    # a server that stops deletes the files it stored, under the requests of another that got the
    # same bytes. Here they go with the results when the server stops.
    os.environ.setdefault("GRADIO_TEMP_DIR", os.path.join(_results_root(), "uploads"))
    demo = build_demo(model, models, max_seconds, max_request_seconds, pool=pool)
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
    parser.add_argument("--max-request-seconds", type=float, default=MAX_REQUEST_SECONDS,
                        help="computing time per request, and length of a live recording (0: no limit)")
    args = parser.parse_args(argv)
    try:
        allowed_models(args.models)
    except ValueError as error:
        parser.error(str(error))
    if not (args.max_request_seconds >= 0 and math.isfinite(args.max_request_seconds)):
        parser.error(f"--max-request-seconds: a number of seconds >= 0 (0: no limit), not {args.max_request_seconds:g}")
    main(args.host, args.port, args.model, args.models, args.max_seconds, args.max_request_seconds or None)
    return 0

