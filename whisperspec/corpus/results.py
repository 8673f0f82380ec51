"""What a corpus run leaves behind, and what lets a rerun finish the rest and redo nothing.

* Each file's result files (`whisperspec.output`, each written atomically). A file is done when
  every requested format of it exists: a rerun skips it (`--overwrite` redoes it).
* The results manifest, a `.jsonl` appended as files finish, one row each: file, id, output name,
  status ("ok" or "error"), language, duration (audio seconds), seconds (time it took), error.
  Each row is one write of one line, flushed to disk before the next file is recorded.

`recorded` keeps the run's bookkeeping in one critical section: the result files and the row are
written together, and Ctrl-C arriving meanwhile waits until both are on disk.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from whisperspec.corpus.inputs import Source
from whisperspec.result import Transcription

RESULTS_NAME = "results.jsonl"


class EngineError(RuntimeError):
    """An engine cannot go on (a cluster that cannot be joined or has gone): the run stops with
    this one line, what was recorded stays recorded."""


@dataclass
class FileResult:
    """One corpus file's outcome: its transcription, or the one-line error that stopped it."""

    source: Source
    transcription: Transcription | None = None
    error: str | None = None
    seconds: float = 0.0  # from the file's first decoded window to its last

    @property
    def ok(self) -> bool:
        return self.error is None

    def row(self) -> dict:
        t = self.transcription
        return {"file": self.source.audio, "id": self.source.id, "output": self.source.name.as_posix(),
                "status": "ok" if self.ok else "error", "language": t.language if t else None,
                "duration": round(t.duration, 3) if t else None, "seconds": round(self.seconds, 3),
                "error": self.error}


def result_files(output_dir: Path, source: Source, formats: list[str]) -> list[Path]:
    from whisperspec.output import WRITERS

    names = list(WRITERS) if "all" in formats else list(dict.fromkeys(formats))
    folder = output_dir / source.name.parent
    return [folder / f"{source.name.name}.{name}" for name in names]


def is_done(output_dir: Path, source: Source, formats: list[str]) -> bool:
    """Every result file of `source` is there (each was written whole or not at all)."""
    return all(path.is_file() for path in result_files(output_dir, source, formats))


class ResultsLog:
    """The results manifest, appended one row per finished file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def append(self, row: dict) -> None:
        self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def read_rows(path: Path) -> list[dict]:
    """The rows of a results manifest; a last line cut short by a crash is left out."""
    rows = []
    if Path(path).is_file():
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C during the block is raised when it ends: what the block writes is written whole.
    (Only the main thread receives signals; elsewhere the block runs as it is.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt
