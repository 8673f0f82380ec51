"""The demo's live microphone: Gradio's streamed chunks, and one visitor's recording.

The browser records and sends a chunk every 0.1 s (a WAV file it uploads, then posts to the
stream); `StreamedChunks` keeps every one of them, `stream_chunk` reads one, and `LiveSession`
adds them to a `whisperspec.live.LiveTranscript`, read again in the background as it grows.
"""

import json
import re
import struct
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np

from whisperspec.audio import AudioError
from whisperspec.live import LiveTranscript
from whisperspec.options import language_code


class StreamedChunks:
    """Every chunk of every live recording, by visitor session, in the order the browser posted them.

    Gradio gives a stream's handler only the newest chunk that reached the server while the previous
    one was handled (one slot per stream), and the browser sends one every 0.1 s: a server busy for a
    moment loses audio, and a transcript read from what is left is garbled. `tap` is an ASGI
    middleware that notes each chunk as its post (`POST .../stream/{event_id}`) passes; the handler
    then `take`s them all. A chunk is the path of a file the browser uploaded first; the handler
    reads only paths Gradio's upload route wrote (`Blocks.upload_file_set`)."""

    POST = re.compile(r"/stream/[^/]+/?$")

    def __init__(self):
        self._paths: defaultdict[str, list[str]] = defaultdict(list)
        self.tapped = False  # the middleware is installed (else only Gradio's newest chunk is known)

    def tap(self, app):
        self.tapped = True

        async def middleware(scope, receive, send):
            if scope["type"] != "http" or scope["method"] != "POST" or not self.POST.search(scope["path"]):
                return await app(scope, receive, send)
            messages = [await receive()]
            while messages[-1]["type"] == "http.request" and messages[-1].get("more_body"):
                messages.append(await receive())
            self._note(b"".join(m.get("body", b"") for m in messages))

            async def replay():
                return messages.pop(0) if messages else await receive()

            await app(scope, replay, send)

        return middleware

    def _note(self, body: bytes) -> None:
        try:
            post = json.loads(body)
            session, chunk = post.get("session_hash"), post["data"][0]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return  # not a chunk: Gradio answers it
        if isinstance(session, str) and isinstance(chunk, dict) and isinstance(chunk.get("path"), str):
            paths = self._paths[session]
            if not paths or paths[-1] != chunk["path"]:  # a browser may post the same upload twice
                paths.append(chunk["path"])

    def take(self, session: str | None) -> list[str]:
        """The chunks of `session` posted since the last take."""
        return self._paths.pop(session, [])


WAV_SAMPLES = {(1, 16): "<i2", (1, 32): "<i4", (3, 32): "<f4"}  # (format, bits): what the browser may record


def stream_chunk(path) -> tuple[int, np.ndarray]:
    """(rate, samples [frames, channels]) of one chunk of a streamed recording: the browser sends
    the 44-byte WAV header of its first chunk, then every sample recorded since the previous chunk.
    The header's length is the first chunk's, so the samples are read to the end of the file (Gradio's
    own reader stops at that length and drops what the browser recorded while a chunk was handled)."""
    data = Path(path).read_bytes()
    if len(data) < 44 or data[:4] != b"RIFF" or data[8:12] != b"WAVE" or data[36:40] != b"data":
        raise ValueError("the browser sent a recording that is not a WAV file")
    audio_format, channels, rate = struct.unpack_from("<HHI", data, 20)
    bits = struct.unpack_from("<H", data, 34)[0]
    dtype = WAV_SAMPLES.get((audio_format, bits))
    if dtype is None or not channels:
        raise ValueError(f"the browser sent {bits}-bit samples in WAV format {audio_format}: not supported")
    frame = channels * bits // 8
    frames = (len(data) - 44) // frame
    return rate, np.frombuffer(data, dtype, frames * channels, offset=44).reshape(frames, channels)


class LiveSession:
    """One visitor's live recording. Chunks are added as they arrive and the buffer is read again in
    the background, one reading at a time: a reading takes longer than the 0.1 s between two chunks,
    and the stream's handler must be free to take them."""

    def __init__(self, choices: tuple, language: str | None, task: str | None):
        self.choices, self.task = choices, task or "transcribe"  # (model, draft spec, compute type), checked
        self.transcript = LiveTranscript(language=language_code(language))
        self.reading: "asyncio.Future | None" = None  # the reading running now
        self.error: str | None = None  # why the latest reading failed, for the page
        self.runtime = None  # the model's, once loaded: its tokenizer shows the tokens
        self.shown = None  # the reading the page shows
        self.started = self.ended = None  # when the first chunk arrived, when the recording stopped (monotonic)

    def add(self, chunk_path: str) -> None:
        """A chunk as Gradio streams it (a file: `stream_chunk`)."""
        if self.started is None:
            self.started = time.monotonic()
        try:
            self.transcript.add(*reversed(stream_chunk(chunk_path)))
        except AudioError as error:
            raise ValueError(str(error)) from error

    @property
    def missing_seconds(self) -> float:
        """Recording time (since the first chunk) whose audio has not arrived: still on its way, or
        lost by a browser too busy to record it all."""
        if self.started is None:
            return 0.0
        return max((self.ended or time.monotonic()) - self.started - self.transcript.seconds, 0.0)

    def read(self, pool, interrupt: Callable[[], None] | None = None, finish: bool = False) -> None:
        """Read the buffer again (or, with `finish`, for the last time); in a worker thread."""
        with pool.use(*self.choices) as transcriber:
            self.runtime = transcriber.runtime
            read = self.transcript.finish if finish else self.transcript.step
            read(transcriber, task=self.task, interrupt=interrupt)

    @property
    def changed(self) -> bool:
        """A reading has finished since the page was last updated."""
        return self.transcript.last is not self.shown
