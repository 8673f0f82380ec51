"""Live transcription of a growing recording: which words are confirmed, which are still tentative.

Whisper reads 30-s windows, not streams, so a live recording is read again as it grows: the buffer
(the audio not yet confirmed) is transcribed with timestamps at every step, and a stable-prefix
policy decides what is final. It is local agreement (LocalAgreement-2 of Macháček et al.'s
whisper_streaming): tokens are confirmed when two consecutive readings of the buffer agree on them,
up to a word's end. Once every token of a segment is confirmed and the reading goes on past it, the
buffer is cut at that segment's end, so it stays short (each reading re-decodes the whole buffer);
once it reaches one 30-s window, the latest reading is taken as it stands, up to its last segment
end (a reading reads at most that window, so one that falls behind stays one window long).

Each step is an ordinary `Transcriber.transcribe` call, with its drafter, so every token still says
whether the draft proposed it (`from_draft`). Audio may keep arriving (`add`, from another thread)
while a step reads the buffer: a reading takes longer than the chunks between two of them, and
audio that arrives meanwhile waits for the next reading instead of being lost.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from whisperspec import defaults
from whisperspec.audio import N_SAMPLES, SAMPLE_RATE, load_audio
from whisperspec.whisper.decode import MAX_PROMPT_TOKENS

MAX_BUFFER_SECONDS = N_SAMPLES / SAMPLE_RATE  # one Whisper window


@dataclass
class Token:
    id: int
    from_draft: bool


@dataclass
class LiveTranscript:
    """The state of one live recording. `add` the samples as they arrive, `step` when `ready` (one
    step at a time), `finish` when the recording stops."""

    step_seconds: float = defaults.LIVE_STEP_SECONDS  # new audio between two readings
    language: str | None = None  # None: detected on the first reading with speech, then kept
    committed: list[Token] = field(default_factory=list)  # confirmed, and cut out of the buffer
    agreed: list[Token] = field(default_factory=list)  # confirmed, still in the buffer
    tentative: list[Token] = field(default_factory=list)  # the latest reading past `agreed`
    buffer: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # 16 kHz
    offset: float = 0.0  # seconds of the recording before the buffer
    read: int = 0  # buffer samples the latest reading saw
    previous: list[int] = field(default_factory=list)  # the latest reading's tokens
    last: object = None  # the latest reading (a Transcription): its stats
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, samples, sample_rate: int) -> None:
        """Append a chunk as the browser sends it (any rate, channels, int or float samples)."""
        if np.asarray(samples).size:
            samples = load_audio(samples, sample_rate, max_seconds=float("inf"))
            with self.lock:
                self.buffer = np.concatenate([self.buffer, samples])

    @property
    def ready(self) -> bool:
        return len(self.buffer) - self.read >= self.step_seconds * SAMPLE_RATE

    @property
    def seconds(self) -> float:
        return self.offset + len(self.buffer) / SAMPLE_RATE

    def step(self, transcriber, **options) -> None:
        """Read the buffer again and move what two readings agree on from tentative to confirmed.
        options: passed to `transcribe` (task, interrupt)."""
        runtime = transcriber.runtime
        with self.lock:  # at most one window: a reading that fell behind stays one window long
            audio = self.buffer[:int(MAX_BUFFER_SECONDS * SAMPLE_RATE)]
            context = [t.id for t in self.committed[-MAX_PROMPT_TOKENS:]]
        prompt = runtime.decode_text(context).strip()
        reading = transcriber.transcribe(audio, timestamps=True, initial_prompt=prompt or None,
                                         language=self.language, **options)
        with self.lock:
            self._agree(runtime, reading, len(audio))

    def finish(self, transcriber, **options) -> None:
        """The recording stopped: read what is left (a window at a time) and confirm each reading
        as it stands."""
        while True:
            if len(self.buffer) > self.read:
                self.step(transcriber, **options)
            with self.lock:
                self.committed += self.agreed + self.tentative
                self.agreed, self.tentative, self.previous = [], [], []
                read = self.read
                self.buffer, self.offset, self.read = self.buffer[read:], self.offset + read / SAMPLE_RATE, 0
                if not len(self.buffer):
                    return

    def tokens(self) -> tuple[list[Token], list[Token]]:
        """(confirmed, tentative), as of the latest reading."""
        with self.lock:
            return self.committed + self.agreed, list(self.tentative)

    def _agree(self, runtime, reading, read: int) -> None:
        self.read, self.last = read, reading
        if reading.segments and self.language is None:
            self.language = reading.language
        tokens = [Token(t, d) for s in reading.segments
                  for t, d in zip(s.tokens, s.from_draft or [False] * len(s.tokens))]
        ids = [t.id for t in tokens]
        confirmed = len(self.agreed)
        agree = confirmed + _common_prefix(self.previous[confirmed:], ids[confirmed:])
        while confirmed < agree < len(ids) and not _starts_word(runtime, ids[agree]):
            agree -= 1  # confirm whole words only: the next reading may still end this one differently
        self.agreed += tokens[confirmed:agree]
        self.tentative, self.previous = tokens[len(self.agreed):], ids
        self._cut(reading.segments, ids)

    def _cut(self, segments, ids: list[int]) -> None:
        """Cut the buffer at the end of the last segment that is wholly confirmed and followed by
        another one; at 30 s, at the last segment end whatever is confirmed."""
        ends, count = [], 0  # (tokens up to the end of segment i, its end in the buffer, seconds)
        for segment in segments[:-1]:
            count += len(segment.tokens)
            ends.append((count, segment.end))
        agreed = [t.id for t in self.agreed]
        done = [(n, end) for n, end in ends if n <= len(agreed) and ids[:n] == agreed[:n]]
        if done:
            self._drop(*done[-1])
        elif len(self.buffer) >= MAX_BUFFER_SECONDS * SAMPLE_RATE:
            self._drop(*(ends[-1] if ends else (len(ids), self.read / SAMPLE_RATE)))

    def _drop(self, count: int, seconds: float) -> None:
        """Commit the buffer's first `count` tokens and cut its first `seconds` of audio."""
        shown = self.agreed + self.tentative
        self.committed += shown[:count]
        kept = max(len(self.agreed) - count, 0)
        self.agreed, self.tentative = shown[count:count + kept], shown[count + kept:]
        self.previous = self.previous[count:]
        cut = min(int(round(seconds * SAMPLE_RATE)), len(self.buffer))
        self.buffer, self.offset, self.read = self.buffer[cut:], self.offset + cut / SAMPLE_RATE, max(self.read - cut, 0)

    def text(self, runtime) -> tuple[str, str]:
        """(confirmed, tentative) text."""
        return tuple(runtime.decode_text([t.id for t in tokens]).strip() for tokens in self.tokens())


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _starts_word(runtime, token: int) -> bool:
    return runtime.tokenizer.decode([token]).startswith(" ")
