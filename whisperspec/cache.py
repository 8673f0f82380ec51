"""Where whisperspec keeps what it converts or downloads once (models, data sets)."""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Callable, Iterator


def cache_dir() -> Path:
    """$WHISPERSPEC_CACHE, else $XDG_CACHE_HOME/whisperspec, else ~/.cache/whisperspec."""
    if os.environ.get("WHISPERSPEC_CACHE"):
        return Path(os.environ["WHISPERSPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "whisperspec"


def save_pretrained_atomically(target: Path, *parts) -> Path:
    """`save_pretrained` every part (model, tokenizer, ...) into `target` as one step: they are
    written to a temporary folder beside it and renamed into place, so a crash or a concurrent
    process never sees half a checkpoint."""
    from whisperspec.atomic import atomic_folder

    with atomic_folder(target) as staging:
        for part in parts:
            part.save_pretrained(staging)
    return target


def load_converted(target: Path, convert: Callable[[], tuple], load: Callable[[Path], tuple]) -> tuple:
    """The parts (model, tokenizer, ...) that `convert()` builds, `load`ed from `target`, where
    they are saved the first time. When the cache cannot take them (a full or read-only disk) they
    are used as converted, with a warning: a cache only spares the next run a conversion, so it is
    never a reason for a load to fail."""
    from safetensors import SafetensorError  # how safetensors reports a failed write, ENOSPC included

    if not is_converted(target):
        with _one_at_a_time(target.parent):
            if not is_converted(target):  # another process may have converted it while this one waited
                parts = convert()
                try:
                    save_pretrained_atomically(target, *parts)
                except (OSError, SafetensorError) as error:
                    warnings.warn(f"could not cache the converted model in {target} ({error}); using it from "
                                  "memory, so the next run converts it again", RuntimeWarning, stacklevel=2)
                    return parts
    return load(target)


@contextlib.contextmanager
def _one_at_a_time(folder: Path) -> Iterator[None]:
    """Processes converting into the same cache folder take turns (Ray workers on one machine, two
    transcriptions, parallel tests, all starting on a cold cache): without it each converts the
    same model, and the last to finish replaces a folder another may be loading from. The lock is
    the folder's own (flock on a descriptor opened here, so threads take turns too), and nothing is
    left behind; a conversion must not load another into the same folder, or it waits on itself.
    Where the lock cannot be taken (no fcntl, a folder that cannot be made or opened) the
    conversion goes ahead unlocked, as a cache is never a reason for a load to fail."""
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing it releases the lock


def is_converted(target: Path) -> bool:
    return (target / "config.json").is_file()
