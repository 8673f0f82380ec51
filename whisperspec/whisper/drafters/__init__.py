"""Whisper's drafters, one module per kind, and the `--draft` factory.

    none              plain greedy decoding (no drafter)
    auto              the fastest of trained, int8 and ngram, chosen as decoding goes, or none (`auto`)
    trained           the draft `whisperspec distill` trained for this model, shipped in
                      whisperspec/assets (`trained`)
    int8[:V]          the main decoder with int8 weights, its head scoring V tokens (`int8_self`)
    early-exit[:E]    the main decoder's first E layers (default: all but the last) (`early_exit`)
    ngram[:N]         prompt lookup over the prompt / previous text, n-grams up to N
    FILE.safetensors  a draft trained by `whisperspec distill` for this main model (`trained`)
    MODEL[:V]         a draft Whisper (embedded name, folder or hub id): same vocabulary
                      (`draft_whisper`, shares the main encoder when it is the same, as
                      distil-whisper's) or another one (`cross_tokenizer`); V: its head scores only
                      the V most frequent text tokens

Each spec may end in `@LOOKAHEAD` (`whisperspec.spec`).
"""

from __future__ import annotations

from pathlib import Path

from whisperspec import defaults
from whisperspec.spec import DrafterKind, DraftSpec, parse_draft
from whisperspec.speculative.drafters.ngram import NgramDrafter
from whisperspec.speculative.protocols import Drafter

DRAFTERS = (
    DrafterKind("none", help="plain greedy decoding"),
    DrafterKind("auto", help="the fastest of trained, int8 and ngram as decoding goes, or none"),
    DrafterKind("trained", help="the draft trained for this model, shipped with whisperspec"),
    DrafterKind("int8", "V", help="the main decoder in int8, its head scoring V tokens"),
    DrafterKind("early-exit", "E", help="the main decoder's first E layers"),
    DrafterKind("ngram", "N", help="prompt lookup, n-grams up to N"),
)


def parse_draft_spec(text: str | DraftSpec | None, lookahead: str | int | None = None,
                     default: str = defaults.DRAFT) -> DraftSpec:
    """`DRAFT[@LOOKAHEAD]` for a Whisper model, checked before anything loads."""
    from whisperspec.models.registry import EMBEDDED_MODELS

    return parse_draft(text, DRAFTERS, models=EMBEDDED_MODELS, files=True, lookahead=lookahead, default=default)


def make_drafter(spec: str | DraftSpec | None, runtime, online_learning: bool = False) -> Drafter | None:
    """The drafter a spec names, for a loaded `WhisperRuntime` (None for `none`). `online_learning`:
    a trained draft keeps learning between windows (`drafters.online`); the others have nothing
    to learn."""
    spec = parse_draft_spec(spec)
    kind, argument = spec.kind, spec.argument
    if kind == "none":
        return None
    if kind == "ngram":
        return NgramDrafter(max_ngram=argument or defaults.NGRAM_MAX)
    if kind == "early-exit":
        from whisperspec.whisper.drafters.early_exit import early_exit_drafter

        return early_exit_drafter(runtime, argument)
    from whisperspec.whisper.drafters.int8_self import int8_self_drafter
    from whisperspec.whisper.drafters.trained import shipped_drafter, trained_drafter

    if kind == "int8":
        return int8_self_drafter(runtime, argument or defaults.INT8_DRAFT_HEAD)
    if kind == "auto":
        from whisperspec.whisper.drafters.auto import auto_drafter

        return auto_drafter(runtime, online_learning)
    if kind == "trained":
        drafter = shipped_drafter(runtime, online_learning)
        if drafter is None:
            raise ValueError("no trained draft ships for this model: train one with `whisperspec distill` "
                             "and pass its .safetensors file as the draft")
        return drafter
    if kind == "file":
        return trained_drafter(Path(spec.model).expanduser(), runtime, online_learning)
    return model_drafter(spec.model, runtime, argument)


def model_drafter(name: str, runtime, vocab_size_kept: int | None = None) -> Drafter:
    """A draft Whisper by name: with the main vocabulary it drafts in it, with another one it
    drafts in its own tokens, translated through text (universal assisted decoding)."""
    from whisperspec.models import load_whisper
    from whisperspec.whisper.model import WhisperRuntime

    try:
        bundle = load_whisper(name)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot load drafter {name!r}: {error}") from error
    if bundle.model.config.vocab_size != runtime.vocab_size:
        from whisperspec.whisper.drafters.cross_tokenizer import cross_tokenizer_drafter

        # a draft's precision never changes the output: its encoder runs the fastest type it can
        return cross_tokenizer_drafter(runtime, WhisperRuntime.from_bundle(bundle, "auto"),
                                      vocab_size_kept=vocab_size_kept)
    from whisperspec.whisper.drafters.draft_whisper import draft_whisper_drafter

    return draft_whisper_drafter(runtime, bundle.model, vocab_size_kept)
