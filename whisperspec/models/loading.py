"""Load any Whisper checkpoint as transformers objects: embedded names, faster-whisper dirs,
transformers dirs and hub ids all end in `from_pretrained` on a transformers folder."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from whisperspec.cache import cache_dir, convert_once
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


def transformers_source(name_or_path: str) -> Path | str | tuple:
    """What `from_pretrained` should load: a transformers folder or hub id as given; a CTranslate2
    checkpoint (embedded name or faster-whisper dir) converted once into the cache, or, when the
    cache cannot take it, the converted (model, tokenizer, feature extractor) themselves."""
    if name_or_path in EMBEDDED_MODELS:
        # read from the packages as installed: only faster-whisper needs base's split model.bin joined
        embedded = EMBEDDED_MODELS[name_or_path]
        return convert_once(cache_dir() / "models" / f"{name_or_path}-v{CONVERSION_VERSION}",
                            lambda: ct2_to_transformers(embedded.files(), embedded.model_bin_parts()))
    path = Path(name_or_path).expanduser()
    if (path / "model.bin").is_file():  # a faster-whisper / CTranslate2 checkpoint
        # keyed by the file's identity, so a changed checkpoint in the same place is converted again
        stat = (path / "model.bin").stat()
        digest = hashlib.sha1(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
        return convert_once(cache_dir() / "models" / f"ct2-{path.name}-{digest}-v{CONVERSION_VERSION}",
                            lambda: ct2_to_transformers(path))
    return path if path.is_dir() else name_or_path  # a transformers folder, or a hub id


def _load(name_or_path: str, dtype: torch.dtype) -> WhisperBundle:
    from transformers import (GenerationConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperTokenizer)

    source = transformers_source(name_or_path)
    if isinstance(source, tuple):  # converted, but the cache could not keep it
        model, tokenizer, feature_extractor = source
        model = model.to(dtype).eval()
        return WhisperBundle(model, tokenizer, feature_extractor, model.generation_config, name_or_path, None)
    model = WhisperForConditionalGeneration.from_pretrained(source, dtype=dtype).eval()
    tokenizer = WhisperTokenizer.from_pretrained(source)
    feature_extractor = WhisperFeatureExtractor.from_pretrained(source)
    try:
        model.generation_config = GenerationConfig.from_pretrained(source)
    except OSError:
        pass  # a checkpoint without generation_config.json keeps what from_pretrained built
    path = Path(source) if Path(source).is_dir() else None
    return WhisperBundle(model, tokenizer, feature_extractor, model.generation_config, name_or_path, path)
