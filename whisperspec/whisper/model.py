"""A loaded Whisper checkpoint as whisperspec runs it: one encoder pass per window, our KV decoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from whisperspec.whisper.encoder import Encoder
from whisperspec.whisper.kv_decoder import KVDecoder
from whisperspec.whisper.tokens import WhisperTokens


@dataclass
class EncodedWindow:
    """One 30-s window (or a batch of them) after the encoder: what every decoder and drafter reads.

    `mel` is kept for drafters that bring their own encoder; the rest share `hidden`.
    """

    mel: torch.Tensor  # [batch, n_mels, 3000]
    hidden: torch.Tensor  # [batch, 1500, d_model]


class WhisperRuntime:
    def __init__(self, model, tokenizer, generation_config=None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.special = WhisperTokens.from_pretrained(tokenizer, generation_config or model.generation_config)
        # Our inference runs on these (oneDNN products on prepacked weights, read from `model`,
        # which stays stock transformers for side-by-side comparisons).
        self.encoder = Encoder(model.model.encoder)
        self.decoder = KVDecoder.from_model(model)
        self.n_mels = model.config.num_mel_bins
        self.vocab_size = model.config.vocab_size
        self.max_length = model.config.max_target_positions

    @classmethod
    def from_bundle(cls, bundle) -> "WhisperRuntime":
        return cls(bundle.model, bundle.tokenizer, bundle.generation_config)

    @torch.inference_mode()
    def encode(self, mel: torch.Tensor) -> EncodedWindow:
        mel = mel.to(self.model.dtype)
        return EncodedWindow(mel, self.encoder(mel))

    def decode_text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t < self.special.eot], skip_special_tokens=True)
