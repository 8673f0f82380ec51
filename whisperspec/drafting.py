"""Turn a drafter name into a drafter for a loaded Whisper model.

    none              plain greedy decoding (no drafter)
    ngram[:N]         prompt lookup over the prompt / previous text (N = longest n-gram, default 3)
    early-exit[:E]    the main decoder's first E layers (default: all but the last)
    int8[:V]          int8 copy of the main decoder, head restricted to the V most frequent tokens
    auto              the fastest drafter measured (see docs/BENCHMARKS.md): the shipped trained
                      draft where one exists for the model, else int8
    trained           the draft `whisperspec distill` trained for this model, shipped in
                      whisperspec/assets (base: 2 layers, 24576-token head), run with int8 weights
    FILE.safetensors  a draft trained by `whisperspec distill` for this main model
    MODEL[:V]         a draft checkpoint (name, dir or hub id); shares the main encoder when its
                      encoder is the same (distil-whisper); with another vocabulary (tiny.en for
                      base) it drafts in its own tokens, translated through text; V: its head
                      scores only the V most frequent text tokens
"""

from __future__ import annotations

from pathlib import Path

import torch

from whisperspec.models.drafts import load_draft, shipped_draft
from whisperspec.speculative.drafters.ngram import NgramDrafter
from whisperspec.whisper import drafters
from whisperspec.whisper.model import WhisperRuntime


def make_drafter(spec: str, runtime: WhisperRuntime):
    name, _, arg = spec.partition(":")
    n_layers = runtime.decoder.n_layers
    if name == "ngram":
        return NgramDrafter(max_ngram=int(arg or 3))
    if name == "early-exit":
        exit_layer = int(arg) if arg else max(n_layers - 1, 1)
        if not 1 <= exit_layer < n_layers:
            raise ValueError(f"early-exit layer must be in 1..{n_layers - 1} for this model, got {exit_layer}")
        return drafters.early_exit_drafter(runtime, exit_layer)
    if name == "int8":
        return drafters.int8_self_drafter(runtime, int(arg) if arg else 16384)
    if name == "auto":  # measured on base (docs/BENCHMARKS.md): trained beats int8, ngram gains nothing
        shipped = shipped_draft(runtime.model)
        return trained_drafter(shipped, runtime) if shipped else drafters.int8_self_drafter(runtime)
    if name == "trained":
        shipped = shipped_draft(runtime.model)
        if shipped is None:
            raise ValueError("no trained draft ships for this model: train one with `whisperspec distill` "
                             "and pass its .safetensors file as the draft")
        return trained_drafter(shipped, runtime)
    if spec.endswith(".safetensors"):
        return trained_drafter(Path(spec), runtime)
    return _checkpoint_drafter(spec, runtime)


def trained_drafter(path: Path, runtime: WhisperRuntime):
    """A distilled draft file: its layers over the main encoder output, its reduced vocabulary;
    it drafts without long-form's previous-text prompt, which it reads badly (`without_prompt`).

    It runs with int8 weights: one step 1.7 ms instead of 2.3 on base, acceptance unchanged
    (measured with an earlier draft at lookahead 3 on the test clips: 57.2% against 56.7%)."""
    draft, vocab_ids = load_draft(path, runtime.model)
    return drafters.draft_model_drafter(runtime, draft, share_encoder=True, vocab_ids=vocab_ids, int8=True,
                                        reads_prompt=False)


def _checkpoint_drafter(spec: str, runtime: WhisperRuntime):
    from whisperspec.models import load_whisper

    source, _, kept = spec.rpartition(":")  # MODEL:V, a head scoring the V most frequent text tokens
    spec, kept = (source, int(kept)) if source and kept.isdigit() else (spec, None)
    bundle = load_whisper(spec)
    draft = bundle.model
    if draft.config.vocab_size != runtime.vocab_size:  # another tokenizer: draft in its tokens, translate via text
        from whisperspec.whisper.cross_tokenizer import cross_tokenizer_drafter

        return cross_tokenizer_drafter(runtime, WhisperRuntime.from_bundle(bundle), vocab_size_kept=kept)
    return drafters.draft_model_drafter(runtime, draft, share_encoder=same_encoder(runtime.model, draft),
                                        vocab_size_kept=kept)


def same_encoder(main: torch.nn.Module, draft: torch.nn.Module) -> bool:
    """distil-whisper keeps its teacher's encoder frozen: then one encoder pass serves both."""
    a, b = main.model.encoder.state_dict(), draft.model.encoder.state_dict()
    return a.keys() == b.keys() and all(a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a)
