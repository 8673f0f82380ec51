"""Where whisperspec keeps what it converts or downloads once (models, data sets)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$WHISPERSPEC_CACHE, else $XDG_CACHE_HOME/whisperspec, else ~/.cache/whisperspec."""
    if os.environ.get("WHISPERSPEC_CACHE"):
        return Path(os.environ["WHISPERSPEC_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "whisperspec"
