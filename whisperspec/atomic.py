"""Files and folders that appear whole or not at all.

Everything is built under a unique hidden name beside its target (one filesystem, so the final
rename is atomic) and renamed into place only when complete; on any error, Ctrl-C included, the
temporary is removed. A reader, a crash or a concurrent process never sees half a file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


def _temporary_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")


@contextmanager
def atomic_path(path: Path | str) -> Iterator[Path]:
    """A temporary path for a library that writes a file by name itself (safetensors' save_file),
    renamed to `path` when the block ends."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = _temporary_beside(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def atomic_write(path: Path | str, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """An open file whose data is on disk (fsync) before it is renamed to `path`. A plain open,
    not mkstemp, so the file gets the usual umask permissions rather than 0600."""
    with atomic_path(path) as temporary:
        with open(temporary, mode.replace("w", "x"), encoding=None if "b" in mode else encoding) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())


@contextmanager
def atomic_folder(path: Path | str) -> Iterator[Path]:
    """A temporary folder to fill (`save_pretrained` into it), renamed to `path` when the block
    ends; a folder already at `path` is replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = _temporary_beside(path)
    staging.mkdir()
    try:
        yield staging
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
