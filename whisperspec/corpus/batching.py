"""Many files through one transcriber, their windows decoded together.

Each round takes the windows the files in flight can decode now (up to the batch size), encodes
them and decodes them together with the batched speculative loop (`WindowDecoder.decode_batch`:
each row its own prompt, language and accepted length; rows leave the batch as they finish). A
sequential long-form file has one such window at a time, since its next window starts where this
one's timestamps end and reads its text as a prompt; a chunked one (`--chunked`) has all its
chunks at once once its language is known. When a file finishes, the next file takes its place in
the next round. Every transcript is the one `Transcriber.transcribe` gives that file alone: the
same walk (`Transcriber.walk`), the same window decoder, each window encoded alone as it would be.

Audio is read and featurised by a background thread (`AudioReader`), a bounded number of files
ahead of the decoder, so memory holds the files in flight and a few more, never the corpus.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Callable, Iterable, Iterator

import torch

from whisperspec.audio import AudioError
from whisperspec.corpus.inputs import Source
from whisperspec.corpus.results import FileResult
from whisperspec.transcribe import encode_next
from whisperspec.whisper.model import EncodedWindow


def as_source(item) -> Source:
    """A path (or a Source) as a corpus source: a path's results name is its stem."""
    return item if isinstance(item, Source) else Source(str(item), PurePath(PurePath(str(item)).stem))


class AudioReader:
    """`transcriber.prepare` of each source on a background thread, at most `ahead` files ahead.

    Iterating yields (source, prepared audio or the AudioError's message) in input order. `close`
    stops the thread (Ctrl-C, or a consumer that stopped early)."""

    _END = object()

    def __init__(self, transcriber, sources: Iterable, ahead: int, max_seconds: float, overrides: dict):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, ahead))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(transcriber, sources, max_seconds, overrides),
                                        name="whisperspec-audio-reader", daemon=True)
        self._thread.start()

    def _read(self, transcriber, sources, max_seconds, overrides) -> None:
        try:
            for item in sources:
                source = as_source(item)
                options = {**overrides, "language": source.language} if source.language else overrides
                try:
                    prepared = transcriber.prepare(source.audio, max_seconds=max_seconds, **options)
                except AudioError as error:
                    prepared = str(error)
                if not self._put((source, prepared)):
                    return
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(error)
        self._put(self._END)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop reading and wait for the file being read: a thread still inside torch when the
        interpreter exits (after Ctrl-C) aborts the process."""
        self._stop.set()
        self._thread.join()


@dataclass
class _File:
    """A file in flight: its source, what `prepare` made of it, its walk through its windows."""

    source: Source
    prepared: object
    walk: object
    started: float
    error: str | None = None  # why it stopped before its walk was done


def transcribe_batched(transcriber, inputs: Iterable, *, batch_size: int, max_seconds: float,
                       on_progress: Callable[[float], None] | None = None, **overrides) -> Iterator[FileResult]:
    """`Transcriber.transcribe_many`: FileResults in completion order (see the module's docstring)."""
    if batch_size < 1:
        raise ValueError(f"batch size {batch_size!r}: at least 1")
    reader = AudioReader(transcriber, inputs, batch_size, max_seconds, overrides)
    upcoming = iter(reader)
    decoder = transcriber.window_decoder()
    in_flight: list[_File] = []
    try:
        while True:
            while len(in_flight) < batch_size:  # a finished file's row goes to the next file
                item = next(upcoming, None)
                if item is None:
                    break
                source, prepared = item
                if isinstance(prepared, str):
                    yield FileResult(source, error=prepared)
                    continue
                walk = transcriber.walk(prepared)
                if walk is None:  # silent: nothing to decode
                    yield FileResult(source, transcriber.finish(prepared, None))
                    continue
                decoder.expect(prepared.decoded_seconds)
                in_flight.append(_File(source, prepared, walk, time.perf_counter()))
            if not in_flight:
                return
            for group in _groups(_rows(in_flight, batch_size)):
                _decode_round(transcriber, decoder, group, on_progress)
            for file in [f for f in in_flight if f.error or f.walk.done]:
                in_flight.remove(file)
                if file.error:
                    yield FileResult(file.source, error=file.error)
                    continue
                yield FileResult(file.source, transcriber.finish(file.prepared, file.walk),
                                 seconds=time.perf_counter() - file.started)
    finally:
        reader.close()


def decode_alone(transcriber, decoder, prepared, walk) -> None:
    """Decode the windows of one input's walk in rounds of up to `transcriber.batch_size` (a chunked
    walk's windows decode together, as a corpus's do)."""
    file = _File(None, prepared, walk, time.perf_counter())
    while not walk.done:
        for group in _groups(_rows([file], transcriber.options.batch_size)):
            _decode_round(transcriber, decoder, group, None)
        if file.error:
            raise AudioError(file.error)


def _rows(files: list[_File], batch_size: int) -> list[tuple[_File, object]]:
    """This round's windows: what each file in flight can decode now, in order, up to the batch size."""
    rows = [(file, window) for file in files for window in file.walk.ready()]
    return rows[:batch_size]


def _groups(rows: list[tuple[_File, object]]) -> list[list[tuple[_File, object]]]:
    """Windows that decode with the same options but for the language (with and without
    timestamps, say) go together. Residual sampling draws every row's tokens from one random
    generator, so a sampled row would depend on its batch: such windows are decoded alone."""
    groups: list[tuple[object, list]] = []
    for row in rows:
        options = replace(row[1].options, language=None)
        alone = options.sampling == "residual" and options.temperatures[0] > 0
        for shared, members in groups:
            if shared == options and not alone:
                members.append(row)
                break
        else:
            groups.append((options, [row]))
    return [members for _, members in groups]


@torch.inference_mode()
def _decode_round(transcriber, decoder, rows: list[tuple[_File, object]], on_progress) -> None:
    """These windows, decoded together. Each window is encoded alone, exactly as a one-file run
    encodes it (on a CPU a batch of windows encodes no faster: every 30-s window is already a large
    product; docs/BENCHMARKS-HISTORY.md, "Measurements behind the code")."""
    runtime = transcriber.runtime
    windows = []
    for file, row in list(rows):
        try:
            windows.append(encode_next(runtime, row, file.prepared.stats))
        except AudioError as error:  # the file went or changed since it was first read: it alone stops
            file.error = str(error)
            rows.remove((file, row))
    if not rows:
        return
    window = EncodedWindow(torch.cat([w.mel for w in windows]), torch.cat([w.hidden for w in windows]))
    options = rows[0][1].options
    started = time.perf_counter()
    results = decoder.decode_batch(window, options, [row.prompt for _, row in rows],
                                   [row.options.language for _, row in rows])
    share = (time.perf_counter() - started) / len(rows)  # a batch's decoding, shared by its rows
    for (file, row), result, alone in zip(rows, results, windows):
        started = time.perf_counter()
        seconds = row.advance(result, alone.hidden)
        file.prepared.stats.add_ms("decoder", share + time.perf_counter() - started)
        if on_progress:
            on_progress(seconds)

