"""A loaded Whisper checkpoint as whisperspec runs it: one encoder pass per window, our KV decoder."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from whisperspec.cpu import adjust_threads
from whisperspec.kernels.processor import bfloat16_decoder_pays, bfloat16_is_fast, bfloat16_runs, processor_name
from whisperspec.options import COMPUTE_TYPES
from whisperspec.whisper.alignment import alignment_heads
from whisperspec.whisper.encoder import Encoder
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.kv_decoder import KVDecoder
from whisperspec.whisper.screened_head import ScreenedHead
from whisperspec.whisper.tokens import WhisperTokens


@dataclass
class EncodedWindow:
    """One 30-s window (or a batch of them) after the encoder: what every decoder and drafter reads.

    `mel` is kept for drafters that bring their own encoder; the rest share `hidden`.
    """

    mel: torch.Tensor  # [batch, n_mels, 3000]
    hidden: torch.Tensor  # [batch, 1500, d_model]


def resolve_compute_type(compute_type: str, model=None) -> str:
    """"auto": bfloat16 where its products are fast (`bfloat16_is_fast`) and `model` (if given)
    can run them (a float32 Whisper: `Encoder.fuses`), float32 elsewhere."""
    if compute_type not in COMPUTE_TYPES:
        raise ValueError(f"compute type {compute_type!r}: one of {', '.join(COMPUTE_TYPES)}")
    if compute_type == "auto":
        runs = model is None or Encoder.fuses(model.model.encoder)
        return "bfloat16" if runs and bfloat16_is_fast() else "float32"
    if compute_type == "bfloat16" and not bfloat16_runs():
        raise ValueError(f"compute type bfloat16: this processor ({processor_name()}) has no bfloat16 products "
                         "(they need AVX-512 or AMX); use float32 or int8")
    return compute_type


def resolve_decoder_compute_type(compute_type: str) -> str:
    """The decoder's per-token work for a runtime of (resolved) `compute_type`: bfloat16 with a
    bfloat16 runtime where that is the faster (`bfloat16_decoder_pays`: AMX tiles), else float32."""
    return "bfloat16" if compute_type == "bfloat16" and bfloat16_decoder_pays() else "float32"


class WhisperRuntime:
    """compute_type (faster-whisper's names) says how the work runs. "int8": the encoder and the
    cross-attention key/value projections on int8 products (`whisperspec.kernels.int8_linear`),
    the decoder's per-token work float32; "bfloat16": bfloat16 products with float32 sums and a
    float32 residual stream (well ahead of float32 on processors with AMX or AMD's AVX-512 BF16,
    which multiply bfloat16 pairs natively: docs/BENCHMARKS-HISTORY.md, sessions 31 and 32),
    the decoder's per-token work included where that is faster than float32
    (`resolve_decoder_compute_type`; `decoder_compute_type` overrides it: a benchmark's or a test's
    choice); "auto" (the default): bfloat16 where it is fast, else float32. Each is a slightly
    different model, as faster-whisper's types are. Every pass gives each row the same logits
    whatever else it holds (`KVDecoder`'s `rows_apart`), so speculative decoding and batching give
    exactly this runtime's own greedy tokens whatever the type."""

    def __init__(self, model, tokenizer, generation_config=None, compute_type: str = "float32",
                 decoder_compute_type: str | None = None):
        compute_type = resolve_compute_type(compute_type, model)
        self.compute_type = compute_type  # as resolved: never "auto"
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.special = WhisperTokens.from_pretrained(tokenizer, generation_config or model.generation_config)
        # Our inference runs on these (oneDNN products on prepacked weights, read from `model`,
        # which stays stock transformers for side-by-side comparisons).
        self.encoder = Encoder(model.model.encoder, compute_type)
        decoder_compute_type = decoder_compute_type or resolve_decoder_compute_type(compute_type)
        # when the main decoder compiles and the head screens, from the work seen and expected
        self.warmup = WarmUp()
        self.decoder = KVDecoder.from_model(model, cross_compute_type=compute_type,
                                            bfloat16=decoder_compute_type == "bfloat16", warmup=self.warmup)
        # as it runs: float32 where the layers cannot run on bfloat16
        self.decoder_compute_type = "bfloat16" if self.decoder.bfloat16 else "float32"
        # the cross-attention heads word timestamps read (`whisperspec.whisper.alignment`)
        self.alignment_heads = alignment_heads(generation_config or model.generation_config,
                                               self.decoder.n_layers, self.decoder.n_heads)
        self.n_mels = model.config.num_mel_bins
        self.vocab_size = model.config.vocab_size
        self.max_length = model.config.max_target_positions

    @cached_property
    def screened_head(self) -> ScreenedHead | None:
        """Greedy decoding's head (`whisperspec.whisper.screened_head`), made on first use; None
        where it cannot be (then the full head runs)."""
        return ScreenedHead.build(self.decoder.head, self.special, self.decoder.final_norm)

    def screens(self) -> bool:
        """Whether greedy decoding screens its head now (only a plain step screens: a pass verifying
        drafted tokens reads the full head): once made, or once the plain steps run or expected
        repay making it (`warmup.screens`)."""
        if "screened_head" not in self.__dict__ and not self.warmup.screens():
            return False
        return self.screened_head is not None

    @classmethod
    def from_bundle(cls, bundle, compute_type: str = "float32",
                    decoder_compute_type: str | None = None) -> "WhisperRuntime":
        return cls(bundle.model, bundle.tokenizer, bundle.generation_config, compute_type, decoder_compute_type)

    @torch.inference_mode()
    def encode(self, mel: torch.Tensor) -> EncodedWindow:
        adjust_threads()  # every window starts on the cores free now (`whisperspec.cpu`)
        mel = mel.to(self.model.dtype)
        return EncodedWindow(mel, self.encoder(mel))

    def decode_text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t < self.special.eot], skip_special_tokens=True)
