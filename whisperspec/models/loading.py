"""Load any Whisper checkpoint as transformers objects: embedded names, faster-whisper dirs,
transformers dirs and hub ids all end in `from_pretrained` on a transformers folder."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from whisperspec.cache import cache_dir, is_converted, load_converted
from whisperspec.models.ctranslate2 import ct2_to_transformers
from whisperspec.models.registry import EMBEDDED_MODELS

# bump when the conversion output changes, so stale caches are rebuilt
CONVERSION_VERSION = 2


@dataclass
class WhisperBundle:
    model: "torch.nn.Module"  # WhisperForConditionalGeneration, eval mode
    tokenizer: object  # WhisperTokenizer with the timestamp tokens
    feature_extractor: object
    generation_config: object
    name: str  # what the user asked for
    path: Path | None  # the transformers folder it came from (None for a hub id or an uncached conversion)


_loaded: dict[tuple[str, torch.dtype], WhisperBundle] = {}
_lock = threading.Lock()


def load_whisper(name_or_path: str, dtype: torch.dtype = torch.float32) -> WhisperBundle:
    """A Whisper model by embedded name, faster-whisper dir, transformers dir or hub id.

    Loaded once per process; converted checkpoints are cached on disk (used from memory when the
    cache cannot take them).
    """
    key = (str(name_or_path), dtype)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(str(name_or_path), dtype)
        return _loaded[key]


def ct2_conversion(name_or_path: str) -> tuple[Path, Callable[[], tuple]] | None:
    """For a CTranslate2 checkpoint (an embedded name or a faster-whisper dir): the cache folder
    of its transformers conversion and the conversion itself; None for anything else."""
    if name_or_path in EMBEDDED_MODELS:
        # read from the packages as installed: only faster-whisper needs base's split model.bin joined
        embedded = EMBEDDED_MODELS[name_or_path]
        return (cache_dir() / "models" / f"{name_or_path}-v{CONVERSION_VERSION}",
                lambda: ct2_to_transformers(embedded.files(), embedded.model_bin_parts()))
    path = Path(name_or_path).expanduser()
    if (path / "model.bin").is_file():
        # keyed by the file's identity, so a changed checkpoint in the same place is converted again
        stat = (path / "model.bin").stat()
        digest = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return (cache_dir() / "models" / f"ct2-{path.name}-{digest}-v{CONVERSION_VERSION}",
                lambda: ct2_to_transformers(path))
    return None


def _load(name_or_path: str, dtype: torch.dtype) -> WhisperBundle:
    conversion = ct2_conversion(name_or_path)
    if conversion is None:  # a transformers folder or a hub id
        path = Path(name_or_path).expanduser()
        path = path if path.is_dir() else None
        model, tokenizer, feature_extractor = _from_pretrained(path or name_or_path, dtype)
    else:
        target, convert = conversion
        model, tokenizer, feature_extractor = load_converted(target, convert,
                                                             lambda folder: _from_pretrained(folder, dtype))
        path = target if is_converted(target) else None
    model = model.to(dtype).eval()
    return WhisperBundle(model, tokenizer, feature_extractor, model.generation_config, name_or_path, path)


def _from_pretrained(source: Path | str, dtype: torch.dtype) -> tuple:
    from transformers import (GenerationConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperTokenizer)

    model = WhisperForConditionalGeneration.from_pretrained(source, dtype=dtype)
    try:
        model.generation_config = GenerationConfig.from_pretrained(source)
    except OSError:
        pass  # a checkpoint without generation_config.json keeps what from_pretrained built
    return model, WhisperTokenizer.from_pretrained(source), WhisperFeatureExtractor.from_pretrained(source)
