"""Small random Whisper models for the combinatorial tests (fast, exact in float64)."""

from __future__ import annotations

import functools

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from whisperspec.models import load_whisper
from whisperspec.whisper.model import WhisperRuntime


@functools.lru_cache(maxsize=None)
def real_vocabulary(name: str):
    """Tokenizer and generation config of an embedded model: random weights, real special tokens
    (transformers' objects: the tests run transformers' generate() on these models too)."""
    bundle = load_whisper(name, transformers=True)
    return bundle.tokenizer, bundle.generation_config, bundle.model.config.vocab_size


def tiny_config(vocab_size: int, generation_config, d_model: int = 64, decoder_layers: int = 4,
                encoder_layers: int = 2, heads: int = 4, init_std: float = 0.06) -> WhisperConfig:
    # a larger-than-default init spreads the logits, so random models produce varied tokens
    return WhisperConfig(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model, num_mel_bins=80, max_target_positions=448, init_std=init_std,
        decoder_start_token_id=generation_config.decoder_start_token_id,
        eos_token_id=generation_config.eos_token_id, pad_token_id=generation_config.eos_token_id,
        bos_token_id=generation_config.eos_token_id)


@functools.lru_cache(maxsize=None)
def tiny_whisper(seed: int, vocabulary: str = "tiny.en", dtype=torch.float64, **config) -> WhisperForConditionalGeneration:
    tokenizer, generation_config, vocab_size = real_vocabulary(vocabulary)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(tiny_config(vocab_size, generation_config, **config)).to(dtype).eval()
    model.generation_config = generation_config
    return model


def tiny_runtime(seed: int, vocabulary: str = "tiny.en", compute_type: str = "float32",
                 decoder_compute_type: str | None = None, **config) -> WhisperRuntime:
    tokenizer, generation_config, _ = real_vocabulary(vocabulary)
    return WhisperRuntime(tiny_whisper(seed, vocabulary, **config), tokenizer, generation_config, compute_type,
                          decoder_compute_type)


def random_mel(seed: int, batch: int = 1, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 80, 3000, generator=generator, dtype=dtype)
