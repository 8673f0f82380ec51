"""The int8 self-draft: the main decoder itself with int8 weights, its head scoring the most frequent
tokens (on a multilingual model, the window language's: `LanguageHeads`; the lowest ids spell mostly
English). Nothing to train; its cross-attention keys/values are the main decoder's (not
projected twice). Beside a float32 main decoder they are averaged over pairs of frames: attention
over all 1500 frames in float32 is most of an int8 step's time, and pairs keep most of what the
draft gets right. Beside a bfloat16 one it reads all 1500: half the bytes make them cheap, and
far-field speech loses detail in pairs (`defaults.INT8_DRAFT_POOL_BFLOAT16`).

It drafts in the main decoder's own self-attention cache (`TargetCacheDraftModel`): every token the
main decoder has verified is read with the main decoder's own keys and values, so the draft agrees
more often, never catches up after a round (nor after rounds another candidate of `auto` drafted),
and reads a long-form window's whole previous-text prompt for nothing once the main decoder's first
pass has read it (a prompt longer than `defaults.INT8_DRAFT_PROMPT` tokens waits for that pass; a
shorter one, or a window's start sequence, it reads itself). Beside a bfloat16 main decoder its
attention runs on bfloat16 over that cache (its products stay int8 on float32 activations). Where
the caches cannot be shared (another layout) it keeps one of its own and reads only the end of that
prompt (as many tokens): reading all of it would be a pass over up to 223 tokens at every window's
start."""

from __future__ import annotations

import torch

from whisperspec import defaults
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.drafters.draft_models import (LanguageHeads, TargetCacheDraftModel, WindowDraftModel,
                                                      int8_decoder, reduced_vocab)
from whisperspec.whisper.drafters.language_vocab import TEXT_TOKENS
from whisperspec.whisper.drafters.views import prompt_tail


def int8_self_drafter(runtime, vocab_size_kept: int | None = defaults.INT8_DRAFT_HEAD,
                      warmup: WarmUp | None = None) -> ModelDrafter:
    """`vocab_size_kept`: its head scores the lowest text ids up to it (None: all), and on a
    multilingual model the window language's most frequent ones too (`LanguageHeads`).
    `warmup`: when its decoder compiles (`whisperspec.speculative.warmup`; None: its own)."""
    ids = reduced_vocab(runtime, vocab_size_kept)
    pool = defaults.INT8_DRAFT_POOL_BFLOAT16 if runtime.decoder.cache_dtype == torch.bfloat16 else defaults.INT8_DRAFT_POOL
    kv = int8_decoder(runtime.model.model.decoder, runtime.model.proj_out.weight, ids, runtime.max_length,
                      cross_pool=pool, kept_as=(getattr(runtime.model, "weights_file", None),
                                                                    "int8-self-draft"), warmup=warmup,
                      cache_dtype=runtime.decoder.cache_dtype)
    heads = None
    if ids is not None and runtime.special.is_multilingual and runtime.special.eot == TEXT_TOKENS:
        heads = LanguageHeads(kv.head, ids, runtime.model.proj_out.weight, runtime.special.language_of,
                              vocab_size_kept)
    if TargetCacheDraftModel.fits(kv, runtime.decoder):
        return ModelDrafter(TargetCacheDraftModel(kv, runtime.decoder, ids, head=kv.head, heads=heads,
                                                  reads_alone=defaults.INT8_DRAFT_PROMPT), runtime.vocab_size)
    return ModelDrafter(WindowDraftModel(kv, ids, head=kv.head, cross_source=runtime.decoder, heads=heads),
                        runtime.vocab_size, view=prompt_tail(runtime.special, defaults.INT8_DRAFT_PROMPT))
