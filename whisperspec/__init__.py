"""whisperspec: Whisper speech recognition made fast with lossless speculative decoding.

    from whisperspec import Transcriber
    result = Transcriber("base", draft="auto").transcribe("talk.mp3")

The names below load on first use, so `import whisperspec` does not import torch or transformers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "Transcriber": "whisperspec.transcribe",
    "TranscriptionOptions": "whisperspec.options",
    "Transcription": "whisperspec.result",
    "TranscriptionStats": "whisperspec.result",
    "Segment": "whisperspec.result",
    "Word": "whisperspec.result",
    "TranscriptionInfo": "whisperspec.result",
    "AudioError": "whisperspec.audio",
    "SpecError": "whisperspec.spec",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'whisperspec' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
