"""Where whisperspec keeps what it converts or downloads once (models, data sets)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path


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


def keep_in_cache(target: Path, *parts) -> Path | None:
    """`save_pretrained_atomically`, or None with a warning when the cache cannot take the parts (a
    full or read-only disk): a cache only saves the next run a conversion, so the caller goes on
    with the parts it holds in memory instead of failing the load."""
    from safetensors import SafetensorError  # how safetensors reports a failed write, ENOSPC included

    try:
        return save_pretrained_atomically(target, *parts)
    except (OSError, SafetensorError) as error:
        warnings.warn(f"could not cache the converted model in {target} ({error}); using it from memory, "
                      "so the next run converts it again", RuntimeWarning, stacklevel=2)
        return None
