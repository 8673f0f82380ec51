"""Load any Whisper checkpoint: embedded names, faster-whisper dirs, transformers dirs and hub ids.

A CTranslate2 checkpoint (embedded, faster-whisper dir) is converted once into a cached
transformers folder. What our runtime runs is read from such a folder without importing
transformers (`whisperspec.models.checkpoint`: the same weights, the same tokenizer, a fraction
of the start-up); `transformers=True` gives transformers' own classes instead, for running its
`generate()` side by side. Hub ids and folders that module cannot read load with transformers.
"""

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
    model: "torch.nn.Module"  # WhisperForConditionalGeneration's layout (its class with transformers=True), eval mode
    tokenizer: object  # WhisperTokenizer with the timestamp tokens, or our WhisperTextTokenizer
    feature_extractor: object | None  # transformers' (with transformers=True)
    generation_config: object
    name: str  # what the user asked for
    path: Path | None  # the transformers folder it came from (a hub id's snapshot; None for an uncached conversion)


_loaded: dict[tuple[str, torch.dtype, bool], WhisperBundle] = {}
_lock = threading.Lock()


def load_whisper(name_or_path: str, dtype: torch.dtype = torch.float32, *, transformers: bool = False) -> WhisperBundle:
    """A Whisper model by embedded name, faster-whisper dir, transformers dir or hub id.

    Loaded once per process; converted checkpoints are cached on disk (used from memory when the
    cache cannot take them). `transformers`: as transformers' own objects (model, tokenizer,
    feature extractor), for its `generate()`.
    """
    key = (str(name_or_path), dtype, transformers)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(str(name_or_path), dtype, transformers)
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


def _load(name_or_path: str, dtype: torch.dtype, transformers: bool) -> WhisperBundle:
    load = _from_pretrained if transformers else _read_folder
    conversion = ct2_conversion(name_or_path)
    if conversion is None:  # a transformers folder or a hub id
        path = Path(name_or_path).expanduser()
        path = path if path.is_dir() else hub_snapshot(name_or_path)
        model, tokenizer, feature_extractor = load(path, dtype)
    else:
        target, convert = conversion
        model, tokenizer, feature_extractor = load_converted(target, convert, lambda folder: load(folder, dtype))
        path = target if is_converted(target) else None
    model = model.to(dtype).eval()
    return WhisperBundle(model, tokenizer, feature_extractor, model.generation_config, name_or_path, path)


# what a Whisper checkpoint on the hub needs (its other formats, flax/tf/pytorch_model.bin, are skipped)
HUB_FILES = ["*.json", "*.txt", "*.safetensors"]


def hub_snapshot(repo_id: str) -> Path:
    """A hub model's folder: from the local Hugging Face cache when it is there (no network at all),
    else downloaded, after a one-second check that the hub can be reached at all: an offline
    machine gets a clear error at once, not after transformers' retries. HF_HUB_OFFLINE is honoured."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    if constants.HF_HUB_OFFLINE:
        raise OSError(f"{repo_id} is not in the local Hugging Face cache, and HF_HUB_OFFLINE is set")
    host = urlparse(constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=3).close()
    except OSError as error:
        raise OSError(f"{repo_id} is not in the local Hugging Face cache, and {host} cannot be reached "
                      f"({error.strerror or error}): download it where there is a network, or pass a local "
                      "folder") from None
    return Path(snapshot_download(repo_id, allow_patterns=HUB_FILES))


def _read_folder(folder: Path, dtype: torch.dtype) -> tuple:
    """Our reading of a transformers folder (no transformers import), where it can read it: float32,
    as every fused product runs; anything else goes through transformers."""
    from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE
    from whisperspec.models.checkpoint import WhisperTextTokenizer, WhisperWeights, can_read

    if dtype != torch.float32 or not ONEDNN_AVAILABLE or not can_read(folder):
        return _from_pretrained(folder, dtype)
    return WhisperWeights.from_folder(folder, dtype), WhisperTextTokenizer(folder / "tokenizer.json"), None


def _from_pretrained(source: Path | str, dtype: torch.dtype) -> tuple:
    from transformers import (GenerationConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperTokenizer)

    model = WhisperForConditionalGeneration.from_pretrained(source, dtype=dtype)
    try:
        model.generation_config = GenerationConfig.from_pretrained(source)
    except OSError:
        pass  # a checkpoint without generation_config.json keeps what from_pretrained built
    return model, WhisperTokenizer.from_pretrained(source), WhisperFeatureExtractor.from_pretrained(source)
