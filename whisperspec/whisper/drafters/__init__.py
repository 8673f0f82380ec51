"""Whisper's drafters, one module per kind, and the `--draft` factory.

    none              plain greedy decoding (no drafter)
    auto              the fastest of trained, int8 and ngram, chosen as decoding goes, or none
                      (`auto_drafter` below)
    trained           the draft `whisperspec distill` trained for this model, shipped in
                      whisperspec/assets (`trained`)
    int8[:V]          the main decoder with int8 weights, its head scoring the V lowest text ids
                      (and on a multilingual model the window language's most frequent tokens),
                      drafting in the main decoder's own cache (`int8_self`)
    early-exit[:E]    the main decoder's first E layers (default: all but the last) (`early_exit`)
    ngram[:N]         prompt lookup over the prompt / previous text, n-grams up to N
    FILE.safetensors  a draft trained by `whisperspec distill` for this main model (`trained`; one
                      trained with `--kind features`, which reads the main decoder's features:
                      `features`)
    MODEL[:V]         a draft Whisper (embedded name, folder or hub id): same vocabulary
                      (`draft_whisper`, shares the main encoder when it is the same, as
                      distil-whisper's) or another one (`cross_tokenizer`); V: its head scores only
                      the V most frequent text tokens

Each spec may end in `@LOOKAHEAD` (`whisperspec.spec`); `whisperspec.options.parse_draft_spec`
checks it against `DRAFTERS` before anything loads.

`auto`'s candidates are the distilled drafts shipped for the model (each only on windows in the
languages it is the best shipped draft for: the English one, the multilingual one), the model's
own decoder in int8, and prompt lookup over the window's own tokens (previous text included);
`SelectingDrafter` measures what each emits per second and drafts with the best, or with none when
a plain step is faster. The priors only decide the first rounds: the trained draft's agreement from
its file, an int8 self-draft right on most tokens at about a third of a plain step per drafted
token, prompt lookup free but seldom right.
"""

from __future__ import annotations

from pathlib import Path

from whisperspec import defaults
from whisperspec.models.draft_file import draft_languages, shipped_drafts
from whisperspec.options import parse_draft_spec
from whisperspec.spec import DraftSpec
from whisperspec.speculative.drafters.ngram import NgramDrafter
from whisperspec.speculative.drafters.select import Candidate, SelectingDrafter
from whisperspec.speculative.protocols import Drafter
from whisperspec.speculative.warmup import WarmUp


def make_drafter(spec: str | DraftSpec | None, runtime, online_learning: bool = False) -> Drafter | None:
    """The drafter a spec names, for a loaded `WhisperRuntime` (None for `none`). `online_learning`:
    a trained draft keeps learning between windows (`drafters.online`); the others have nothing
    to learn. A spec `TranscriptionOptions` already checked is used as it is."""
    if not isinstance(spec, DraftSpec):
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


# Priors (docs/BENCHMARKS-HISTORY.md has the measurements): per-token acceptance, the cost of
# drafting one token as a share of a plain step of the main model, and of building the drafter in
# plain steps. With `SelectingDrafter`'s default `explore_after` (5 times the build cost) the int8
# self-draft is tried however poor its prior once the rounds run pass what a 30-s clip decodes (where
# it could not repay its build), and early enough into a long file (a later try left much of a
# 3-minute file to a worse candidate).
TRAINED_STEP_COST, TRAINED_BUILD_COST = 0.08, 12
INT8_ACCEPTANCE, INT8_STEP_COST, INT8_BUILD_COST = 0.75, 0.35, 12
NGRAM_ACCEPTANCE = 0.2


def auto_drafter(runtime, online_learning: bool = False) -> SelectingDrafter:
    """`online_learning`: the trained draft keeps learning from every round once built, whichever
    candidate drafts (`whisperspec.whisper.drafters.online`). Beside any main decoder: a pass
    checking k tokens costs about a step on every compute type (`whisperspec.kernels.exact_rows`),
    and where a plain step is still the faster, `SelectingDrafter` measures it and decodes plain."""
    return SelectingDrafter(auto_candidates(runtime, online_learning), warmup=runtime.warmup)


def auto_candidates(runtime, online_learning: bool = False) -> list[Candidate]:
    """Every drafter Whisper has for `runtime`'s model, with its priors, built when first chosen.

    A model candidate compiles its one-row pass at its first pass, instead of once its eager passes
    have shown the work is long (`WarmUp`): `auto` builds a candidate once it expects to repay the
    build (compiling included, in its build cost) and then judges it by what its rounds cost; run
    eager, a candidate seldom chosen would be measured at its eager cost, lose for it, and so never
    run the passes that would compile it. A draft that learns online rebuilds its model as it
    trains, and keeps the usual rule."""
    from whisperspec.whisper.drafters.int8_self import int8_self_drafter
    from whisperspec.whisper.drafters.trained import trained_drafter

    at_once = WarmUp(compile_after=0)

    candidates = []
    for path, languages in shipped_drafts(runtime.model).items():
        agreement = [a for language, a in draft_languages(path).items() if language in languages and a] or [0.7]
        candidates.append(Candidate(
            "trained" if "en" in languages else f"trained:{path.stem}",
            lambda path=path: trained_drafter(path, runtime, online_learning,
                                              warmup=None if online_learning else at_once),
            acceptance=sum(agreement) / len(agreement), step_cost=TRAINED_STEP_COST,
            build_cost=TRAINED_BUILD_COST, watches=online_learning,
            applies=lambda tokens, languages=languages: runtime.special.language_of(tokens) in languages))
    candidates += [
        Candidate("int8", lambda: int8_self_drafter(runtime, warmup=at_once), acceptance=INT8_ACCEPTANCE,
                  step_cost=INT8_STEP_COST, build_cost=INT8_BUILD_COST),
        Candidate("ngram", lambda: NgramDrafter(defaults.NGRAM_MAX), acceptance=NGRAM_ACCEPTANCE, step_cost=0.0),
    ]
    return candidates

