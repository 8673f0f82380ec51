"""A separate draft Whisper with the main model's vocabulary (distil-whisper for large-v2, or any
smaller checkpoint): it shares the main encoder's output when its encoder is the same (one encoder
pass per window serves both), otherwise it runs its own encoder on the window's mel. A draft with
another vocabulary is `cross_tokenizer`'s."""

from __future__ import annotations

import torch
from torch import nn

from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.whisper.drafters.draft_models import (WindowDraftModel, cross_attention_pool, reduced_vocab,
                                                       shared_cross_layers)
from whisperspec.whisper.encoder import Encoder
from whisperspec.whisper.kv_decoder import KVDecoder
from whisperspec.whisper.model import resolve_compute_type


def draft_whisper_drafter(runtime, draft: nn.Module, vocab_size_kept: int | None = None,
                          share_encoder: bool | None = None) -> ModelDrafter:
    """vocab_size_kept: the draft's head scores only that many of the most frequent text tokens;
    share_encoder: None decides by comparing the encoders' weights (`same_encoder`)."""
    share_encoder = same_encoder(runtime.model, draft) if share_encoder is None else share_encoder
    kv = KVDecoder.from_model(draft, rows_apart=False, max_length=runtime.max_length,
                              cross_pool=cross_attention_pool(draft))
    # a draft whose cross-attention projections are main layers' reuses the main decoder's keys/values
    cross_layers = shared_cross_layers(draft.model.decoder, runtime.model.model.decoder) if share_encoder else None
    model = WindowDraftModel(kv, reduced_vocab(runtime, vocab_size_kept),
                             # its own encoder runs the fastest type it can: a draft's precision never
                             # changes the output
                             encoder=None if share_encoder else Encoder(draft.model.encoder,
                                                                        resolve_compute_type("auto", draft)),
                             cross_source=runtime.decoder if cross_layers else None, cross_layers=cross_layers)
    return ModelDrafter(model, runtime.vocab_size)


def same_encoder(main: nn.Module, draft: nn.Module) -> bool:
    """distil-whisper keeps its teacher's encoder frozen: then one encoder pass serves both."""
    a, b = main.model.encoder.state_dict(), draft.model.encoder.state_dict()
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)
