"""Package data, read where an installed wheel has it (`importlib.resources`), not from the source tree."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def asset(name: str) -> Path:
    """A file or folder under whisperspec/assets."""
    return Path(str(importlib.resources.files("whisperspec") / "assets" / name))


def sample_audio() -> Path:
    """The bundled real speech sample (an Asterisk prompt, CC BY-SA 3.0: assets/LICENSE-audio.md)."""
    return asset("sample.flac")


def bench_clips() -> list[Path]:
    """The six real speech clips `whisperspec bench` decodes by default."""
    return sorted(asset("clips").glob("*.flac"))
