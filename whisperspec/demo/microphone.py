"""The demo's live microphone: Gradio's streamed chunks, and one visitor's recording.

The browser records and sends a chunk every 0.1 s (a WAV file it uploads, then posts to the
stream); `StreamedChunks` keeps every one of them, in order, and `LiveSession` adds them to a
`whisperspec.demo.live_transcript.LiveTranscript`, read again in the background as it grows.
"""

import asyncio
import itertools
import json
import math
import re
import time
from collections import defaultdict
from typing import Callable

from whisperspec.audio import SAMPLE_RATE, AudioError, load_audio
from whisperspec.demo.live_transcript import LiveTranscript
from whisperspec.options import language_code


class StreamedChunks:
    """Every chunk of every live recording, by visitor session, in the order it was recorded.

    The browser uploads each chunk (`POST .../upload`), then posts its path to the stream
    (`POST .../stream/{event_id}`), one every 0.1 s, and Gradio's stream handling loses and reorders
    them: it gives the handler only the newest chunk that reached a busy server (one slot per
    stream), and uploads that finish out of order are posted out of order. `tap` is an ASGI
    middleware that numbers the uploads as they arrive (the order the browser recorded them) and
    notes each chunk as its post passes; the handler `take`s them in upload order, after waiting
    `reorder_seconds` for a late one. A chunk is the path of a file Gradio's upload route wrote
    (what its responses name): nothing else is read. Byte-identical chunks (digital silence) share
    a path, so a run of them counts once."""

    STREAM = re.compile(r"/stream/[^/]+/?$")
    UPLOAD = re.compile(r"/upload/?$")
    MAX_UNPOSTED = 4096  # uploads remembered until their chunk is posted

    def __init__(self, reorder_seconds: float = 0.5):
        self.reorder_seconds = reorder_seconds
        self.tapped = False  # the middleware is installed (else only Gradio's newest chunk is known)
        self._uploads = itertools.count()
        self._numbers: dict[str, int] = {}  # uploaded path -> number of its upload
        self._posted: defaultdict[str, dict[int, tuple[float, str]]] = defaultdict(dict)  # session -> number -> (when, path)
        self._taken: dict[str, int] = {}  # session -> number of the last chunk taken

    def tap(self, app):
        self.tapped = True

        async def middleware(scope, receive, send):
            if scope["type"] != "http" or scope["method"] != "POST":
                return await app(scope, receive, send)
            if self.UPLOAD.search(scope["path"]):
                return await self._upload(app, scope, receive, send)
            if not self.STREAM.search(scope["path"]):
                return await app(scope, receive, send)
            messages = [await receive()]
            while messages[-1]["type"] == "http.request" and messages[-1].get("more_body"):
                messages.append(await receive())
            self._note(b"".join(m.get("body", b"") for m in messages))

            async def replay():
                return messages.pop(0) if messages else await receive()

            await app(scope, replay, send)

        return middleware

    async def _upload(self, app, scope, receive, send) -> None:
        number, body = next(self._uploads), []

        async def keep(message):
            if message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if not message.get("more_body"):
                    self._number(b"".join(body), number)  # before the browser can post the path
            await send(message)

        await app(scope, receive, keep)

    def _number(self, response: bytes, number: int) -> None:
        try:
            paths = json.loads(response)
        except ValueError:
            return  # an error page: nothing was stored
        for path in paths if isinstance(paths, list) else ():
            if isinstance(path, str):
                self._numbers[path] = number
        while len(self._numbers) > self.MAX_UNPOSTED:  # uploads never streamed (the File tab's)
            del self._numbers[next(iter(self._numbers))]

    def _note(self, body: bytes) -> None:
        try:
            post = json.loads(body)
            session, path = post.get("session_hash"), post["data"][0]["path"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return  # not a chunk: Gradio answers it
        number = self._numbers.pop(path, None) if isinstance(path, str) else None
        if isinstance(session, str) and number is not None and number > self._taken.get(session, -1):
            self._posted[session][number] = (time.monotonic(), path)  # posted twice: noted once

    def take(self, session: str | None, wait: bool = True) -> list[str]:
        """The chunks of `session` posted since the last take, in recording order; without `wait`,
        also those that might still be overtaken by a late one (the recording has stopped)."""
        posted = self._posted.get(session, {})
        fresh = time.monotonic() - self.reorder_seconds if wait else math.inf
        taken = []
        for number in sorted(posted):
            if posted[number][0] > fresh:
                break
            taken.append(posted.pop(number)[1])
            self._taken[session] = number
        return taken

    def forget(self, session: str | None) -> None:
        self._posted.pop(session, None)
        self._taken.pop(session, None)


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
        """A chunk as the browser streams it: a WAV file (its header declares no real length)."""
        if self.started is None:
            self.started = time.monotonic()
        try:
            self.transcript.add(load_audio(chunk_path), SAMPLE_RATE)
        except AudioError as error:  # the page never shows a server path
            raise ValueError(str(error).replace(str(chunk_path), "the recording")) from error

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
