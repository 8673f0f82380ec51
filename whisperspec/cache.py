"""Where whisperspec keeps what it converts or downloads once (models, data sets)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    """$WHISPERSPEC_CACHE, else $XDG_CACHE_HOME/whisperspec, else ~/.cache/whisperspec."""
    if os.environ.get("WHISPERSPEC_CACHE"):
        return Path(os.environ["WHISPERSPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "whisperspec"


def save_pretrained_atomically(target: Path, *parts) -> Path:
    """`save_pretrained` every part (model, tokenizer, ...) into `target` as one step: they are
    written to a temporary folder beside it and renamed into place, so a crash or a concurrent
    process never sees half a checkpoint."""
    import shutil
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for part in parts:
            part.save_pretrained(staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_once(target: Path, convert: Callable[[], tuple]) -> Path | tuple:
    """`target`, holding the parts (model, tokenizer, ...) that `convert()` builds, saved there the
    first time. When the cache cannot take them (a full or read-only disk) the parts themselves,
    with a warning: a cache only spares the next run a conversion, so it is never a reason for a
    load to fail."""
    from safetensors import SafetensorError  # how safetensors reports a failed write, ENOSPC included

    if (target / "config.json").is_file():
        return target
    parts = convert()
    try:
        return save_pretrained_atomically(target, *parts)
    except (OSError, SafetensorError) as error:
        warnings.warn(f"could not cache the converted model in {target} ({error}); using it from memory, "
                      "so the next run converts it again", RuntimeWarning, stacklevel=2)
        return parts
