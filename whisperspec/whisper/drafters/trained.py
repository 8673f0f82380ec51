"""A draft trained by `whisperspec distill` for the main model (its file format: `whisperspec.models.draft_file`).

Its few layers read the main encoder's output (no second encoder pass) and reuse the main decoder's
cross-attention keys/values where distillation kept the projections frozen; its head scores its
own slice of the vocabulary; it runs with int8 weights; and, unless its file says it was trained
to read it, it drafts without long-form's previous-text prompt (`without_prompt`).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from whisperspec.models.draft_file import draft_kind, fingerprint, load_draft, shipped_draft
from whisperspec.kernels.packed_linear import PackedLinear, packed_copy
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.speculative.protocols import Drafter
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.drafters.features import KIND as FEATURES, feature_drafter
from whisperspec.whisper.drafters.views import without_prompt
from whisperspec.whisper.drafters.draft_models import (WindowDraftModel, cross_attention_pool, int8_decoder,
                                                       shared_cross_layers)
from whisperspec.whisper.kv_decoder import KVDecoder


def shipped_drafter(runtime, online_learning: bool = False) -> Drafter | None:
    """The draft shipped in whisperspec/assets for this main model, if one is."""
    path = shipped_draft(runtime.model)
    return trained_drafter(path, runtime, online_learning) if path else None


def trained_drafter(path: Path, runtime, online_learning: bool = False, warmup: WarmUp | None = None) -> Drafter:
    """`warmup`: when the draft's decoder compiles (`whisperspec.speculative.warmup`; None: its own).
    A file of a feature draft (`whisperspec distill --kind features`) is that draft, which does not
    learn online."""
    if draft_kind(path) == FEATURES:
        return feature_drafter(path, runtime)
    draft, vocab_ids = load_draft(path, runtime.model)
    return distilled_drafter(runtime, draft, vocab_ids, online_learning=online_learning, source=path, warmup=warmup)


def distilled_drafter(runtime, draft: nn.Module, vocab_ids, int8: bool = True, online_learning: bool = False,
                      schedule=None, source: Path | None = None, warmup: WarmUp | None = None) -> Drafter:
    """A distil-whisper-layout draft over the main encoder, scoring `vocab_ids`; `int8`: its decoder
    and head run with int8 weights (half the cost of a step, the same acceptance), kept on disk for
    the draft file `source` it was read from. `online_learning`: it keeps training between windows
    on what the main model verifies (`OnlineDrafter`, with `schedule`)."""
    cross_layers = shared_cross_layers(draft.model.decoder, runtime.model.model.decoder)
    pool = cross_attention_pool(draft)

    def build(decoder: nn.Module, before: WindowDraftModel | None = None) -> WindowDraftModel:
        """The draft model that drafts, from a decoder of the draft's layout (low-rank adapters in
        it stay shared: `whisperspec.whisper.drafters.adapters`); the head of one built `before`
        is reused (the head never trains)."""
        if int8:  # its head already scores just `vocab_ids`
            # its first build is of the file's weights (the head rows are the main model's)
            kept = (source, f"int8-for-{fingerprint(runtime.model)}") if source and not before else None
            kv = int8_decoder(decoder, draft.proj_out.weight, vocab_ids, runtime.max_length, pool,
                              head=before.decoder.head if before else None, kept_as=kept, warmup=warmup)
            head = kv.head
        else:  # its linears run on packed copies of the weights; every parameter is shared
            weight = draft.proj_out.weight.to(decoder.embed_tokens.weight.dtype)
            full = before.decoder.head if before else PackedLinear(weight)
            kv = KVDecoder(packed_copy(decoder), full, max_length=runtime.max_length, cross_pool=pool, warmup=warmup)
            head = None
        return WindowDraftModel(kv, vocab_ids, head=head, cross_source=runtime.decoder if cross_layers else None,
                                cross_layers=cross_layers)

    view = None if getattr(draft.config, "reads_prompt", False) else without_prompt(runtime.special)
    if online_learning:
        from whisperspec.whisper.drafters.online import OnlineDrafter

        return OnlineDrafter(runtime, draft, vocab_ids, build, view, cross_layers, schedule)
    return ModelDrafter(build(draft.model.decoder), runtime.vocab_size, view=view)
