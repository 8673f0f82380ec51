"""Transcription options, checked before any model loads: `TranscriptionOptions`, the one object
`Transcriber`, the CLI, evaluate, bench and the demo build, and the checks it is built with. Each
bad value is one ValueError line that names the option and says what it accepts (the drafter spec
has its own grammar: `whisperspec.spec`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from whisperspec import defaults
from whisperspec.spec import DrafterKind, DraftSpec, is_model_name, parse_draft

if TYPE_CHECKING:
    from whisperspec.vad import VadOptions
    from whisperspec.whisper.decode import DecodeOptions

# The choices of the options that take one (the CLI's `choices=` are these)
COMPUTE_TYPES = ("auto", "float32", "int8", "bfloat16")  # faster-whisper's names (`whisper.model.resolve_compute_type`)
TASKS = ("transcribe", "translate")
SAMPLING = ("coupled", "residual")  # at temperature > 0 (see `whisperspec.whisper.decode.DecodeOptions`)
ONLINE_LEARNING = ("off", "on")  # a trained draft keeps learning while it transcribes (`whisper.drafters.online`)


# Whisper's drafter kinds (`whisperspec.whisper.drafters.make_drafter` builds each)
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


def _default_decode_options() -> "DecodeOptions":
    from whisperspec.whisper.decode import DecodeOptions

    return DecodeOptions()


@dataclass(frozen=True)
class TranscriptionOptions:
    """How inputs are transcribed: every option, checked (`build`). `decode` holds what each 30-s
    window is decoded with (`whisperspec.whisper.decode.DecodeOptions`); the rest says what is read,
    which drafter runs and how windows follow one another. Frozen: a change is a new object
    (`dataclasses.replace`), so no option moves under a transcription that is running."""

    model: str = defaults.MODEL
    compute_type: str = defaults.COMPUTE_TYPE
    draft: DraftSpec = DraftSpec(defaults.DRAFT)
    decode: "DecodeOptions" = field(default_factory=_default_decode_options)
    condition_on_previous_text: bool = True
    initial_prompt: str | None = None
    carry_initial_prompt: bool = False
    hotwords: str | None = None
    vad: "VadOptions | None" = None  # None: every sample is decoded; else only the speech this finds
    chunked: bool = False
    batch_size: int = defaults.BATCH_SIZE
    word_timestamps: bool = False
    prepend_punctuations: str = defaults.PREPEND_PUNCTUATIONS
    append_punctuations: str = defaults.APPEND_PUNCTUATIONS
    online_learning: bool = False
    progress: bool = False

    @classmethod
    def build(cls, model: str = defaults.MODEL, *, compute_type: str = defaults.COMPUTE_TYPE,
              draft: str | DraftSpec | None = None, lookahead: str | int | None = None, language: str | None = None,
              task: str = "transcribe", timestamps: bool = False, temperature=None,
              condition_on_previous_text: bool = True, initial_prompt: str | None = None,
              carry_initial_prompt: bool = False, hotwords: str | None = None,
              compression_ratio_threshold: float | None = defaults.COMPRESSION_RATIO_THRESHOLD,
              logprob_threshold: float | None = defaults.LOGPROB_THRESHOLD,
              no_speech_threshold: float | None = defaults.NO_SPEECH_THRESHOLD, beam_size: int = defaults.BEAM_SIZE,
              patience: float | None = None, length_penalty: float | None = defaults.LENGTH_PENALTY,
              best_of: int = defaults.BEST_OF, vad: bool = False, vad_parameters=None, progress: bool = False,
              seed: int = 0, sampling: str = "coupled", word_timestamps: bool = False,
              prepend_punctuations: str = defaults.PREPEND_PUNCTUATIONS,
              append_punctuations: str = defaults.APPEND_PUNCTUATIONS,
              online_learning: str = defaults.ONLINE_LEARNING, chunked: bool = False,
              batch_size: int = defaults.BATCH_SIZE) -> "TranscriptionOptions":
        """The options of these arguments (faster-whisper's and openai-whisper's names), each
        checked without loading anything: a SpecError or ValueError names the bad one.

        model: "base" / "tiny.en" (embedded), a faster-whisper (CTranslate2) dir, a transformers
        dir or hub id. compute_type: one of COMPUTE_TYPES (`whisper.model.resolve_compute_type`).
        draft: `DRAFT[@LOOKAHEAD]` (`whisperspec.whisper.drafters`): "none" for plain greedy,
        "auto", "auto@5", ...; lookahead: the same as "@LOOKAHEAD", as a separate argument.
        temperature: None for openai-whisper's fallback schedule (0, 0.2, ... 1.0), a number for
        one fixed temperature, or a sequence of them (faster-whisper's). sampling (at temperature
        > 0): "coupled", the same tokens with or without a draft, or "residual" (`DecodeOptions`).
        compression_ratio_threshold, logprob_threshold, no_speech_threshold: openai-whisper's
        (None turns a check off). beam_size > 1: beam search at temperature 0 (patience,
        length_penalty as openai-whisper's), where nothing is drafted; best_of: samples per window
        at temperature > 0, the likeliest kept.
        initial_prompt: text the first window continues (every window with carry_initial_prompt);
        hotwords: text put ahead of every window's prompt (faster-whisper's).
        vad: transcribe only the speech Silero VAD finds (faster-whisper's vad_filter), with
        vad_parameters (a dict of `whisperspec.vad.VadOptions` fields, or one).
        chunked: a long input's speech is cut into independent chunks of at most 30 s, decoded
        together in batches of `batch_size` (faster-whisper's BatchedInferencePipeline: no
        previous-text prompt, one segment per chunk, each decoded once at the first temperature;
        `whisperspec.whisper.chunked`); implies VAD, whose regions are split at 30 s and end after
        160 ms of silence unless vad_parameters say otherwise. batch_size: windows decoded together
        (a chunked input's chunks; the files of `Transcriber.transcribe_many`).
        word_timestamps: each segment gets its words with start, end and probability
        (`whisperspec.whisper.alignment`); prepend_punctuations / append_punctuations join the
        word after / before them. online_learning: "on", a trained draft keeps learning from what
        the main model verifies (docs/ONLINE.md), or "off"; the transcript is the same either way.
        progress: a progress bar over a long input.
        """
        from whisperspec.whisper.decode import DecodeOptions

        spec = parse_draft_spec(draft, lookahead)
        temperature = temperatures(temperature)
        decode = DecodeOptions(
            task=check_task(task, model), language=check_language(language, model), timestamps=bool(timestamps),
            seed=seed,
            sampling=one_of("sampling", sampling, SAMPLING),
            temperatures=DecodeOptions.temperatures if temperature is None else temperature,
            **thresholds(compression_ratio_threshold, logprob_threshold, no_speech_threshold),
            **search(beam_size, patience, length_penalty, best_of))
        if chunked and timestamps:
            raise ValueError("chunked: each chunk is decoded as one segment, without timestamps "
                             "(word timestamps split it finer)")
        return cls(model=check_model(model), compute_type=one_of("compute type", compute_type, COMPUTE_TYPES),
                   draft=spec, decode=decode, condition_on_previous_text=bool(condition_on_previous_text),
                   initial_prompt=initial_prompt, carry_initial_prompt=bool(carry_initial_prompt), hotwords=hotwords,
                   vad=(vad_options(chunk_vad_options(vad_parameters) if chunked else vad_parameters)
                        if vad or chunked else None),
                   chunked=bool(chunked), batch_size=whole_number("batch size", batch_size),
                   word_timestamps=bool(word_timestamps), prepend_punctuations=prepend_punctuations,
                   append_punctuations=append_punctuations,
                   online_learning=one_of("online learning", online_learning, ONLINE_LEARNING) == "on",
                   progress=bool(progress))


def one_of(option: str, value, accepted: tuple) -> str:
    if value not in accepted:
        raise ValueError(f"{option} {value!r}: one of {', '.join(accepted)}")
    return value


def language_code(language: str | None) -> str | None:
    """A Whisper language code from a code or a name, any case ("EN", "english", "Castilian");
    None (detect) passes through, also spelled "None" (openai-whisper's command line)."""
    if language is None or str(language).strip().lower() in ("", "none"):
        return None
    from whisperspec.languages import LANGUAGES, TO_LANGUAGE_CODE

    text = str(language).strip().lower()
    if text in LANGUAGES:
        return text
    if text in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[text]
    raise ValueError(f"language {language!r}: not one Whisper knows; use a code (en, es, fr, de, ...) or a "
                     "name (English, Spanish, ...), or leave it out to detect it")


def finite_number(value) -> float:
    """`value` as a finite float, or NaN when it is none (text, infinity, NaN): NaN fails every
    comparison, so a caller's range check refuses it too."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def temperatures(temperature) -> tuple[float, ...] | None:
    """faster-whisper's `temperature`: one number (that temperature only) or a sequence (tried in
    turn while a window fails the fallback checks), each finite and >= 0; None: openai-whisper's
    schedule (0, 0.2, ... 1.0)."""
    if temperature is None:
        return None
    values = tuple(temperature) if isinstance(temperature, (list, tuple)) else (temperature,)
    checked = tuple(finite_number(value) for value in values)
    if not checked or not all(value >= 0 for value in checked):
        raise ValueError(f"temperature {temperature!r}: a finite number >= 0 (0 is greedy), or a list of them")
    return checked


def temperature_schedule(start, increment) -> tuple[float, ...]:
    """openai-whisper's command line: `--temperature` is where the schedule starts and
    `--temperature-increment-on-fallback` its step up to 1.0 (None: the start temperature only)."""
    first = temperatures(0.0 if start is None else start)[0]
    step = optional_number("temperature increment on fallback", increment, minimum=0, inclusive=False)
    if step is None:
        return (first,)
    count = int((1.0 + 1e-6 - first) // step) + 1 if first <= 1.0 else 1  # numpy.arange(start, 1.0 + 1e-6, step)
    return tuple(round(first + i * step, 6) for i in range(count))


def boolean(option: str, value) -> bool:
    """openai-whisper's True / False (any case; also yes / no, 1 / 0)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    raise ValueError(f"{option} {value!r}: True or False")


def optional_number(option: str, value, minimum: float | None = None, maximum: float | None = None,
                    inclusive: bool = True) -> float | None:
    """A finite number within [minimum, maximum] (or (minimum, ...) when not `inclusive`), or None
    (also spelled "None", as openai-whisper's command line does) for "no such check"."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    number = finite_number(value)
    low_ok = minimum is None or (number >= minimum if inclusive else number > minimum)
    if not (low_ok and (maximum is None or number <= maximum)):  # NaN fails both
        bounds = [f"{'>=' if inclusive else '>'} {minimum:g}" if minimum is not None else "",
                  f"<= {maximum:g}" if maximum is not None else ""]
        raise ValueError(f"{option} {value!r}: a number {' and '.join(b for b in bounds if b) or 'that is finite'}, "
                         "or None")
    return number


def whole_number(option: str, value, minimum: int = 1) -> int:
    number = finite_number(value)
    if not (number >= minimum and number == int(number)):
        raise ValueError(f"{option} {value!r}: a whole number >= {minimum}")
    return int(number)


def check_task(task: str, model: str) -> str:
    one_of("task", task, TASKS)
    if str(model).endswith(".en"):
        english_only_error(None, task, model)
    return task


def check_language(language: str | None, model: str) -> str | None:
    """`language_code`, and only English for an English-only model (named *.en; one loaded from a
    folder is checked once loaded: `english_only_error`)."""
    code = language_code(language)
    if str(model).endswith(".en"):
        english_only_error(code, "transcribe", model)
    return code


def english_only_error(language: str | None, task: str, model: str) -> None:
    """Refuses what an English-only model cannot do, naming the fix (openai-whisper's CLI instead
    transcribes as English with a warning; asked for German, a transcript in English is a surprise)."""
    if task == "translate":
        raise ValueError(f"task 'translate': model {model!r} is English-only (it cannot translate); "
                         "use a multilingual model such as base")
    if language not in (None, "en"):
        raise ValueError(f"language {language!r}: model {model!r} is English-only; use a multilingual model "
                         "such as base, or leave the language out")


def check_model(model: str) -> str:
    """An embedded name, an existing folder or an owner/name hub id; anything else is a typo that
    would otherwise be retried against the hub."""
    from whisperspec.models.registry import EMBEDDED_MODELS

    if not is_model_name(str(model), EMBEDDED_MODELS):
        raise ValueError(f"model {model!r}: use {', '.join(EMBEDDED_MODELS)}, a faster-whisper or transformers "
                         "folder, or an owner/name hub id")
    return str(model)


def search(beam_size=defaults.BEAM_SIZE, patience=defaults.PATIENCE, length_penalty=defaults.LENGTH_PENALTY,
           best_of=defaults.BEST_OF) -> dict:
    """Beam search and best-of options (openai-whisper's names; None is the default), checked, as
    `DecodeOptions` fields."""
    beam_size = whole_number("beam size", defaults.BEAM_SIZE if beam_size is None else beam_size)
    patience = optional_number("patience", patience, minimum=0, inclusive=False)
    patience = defaults.PATIENCE if patience is None else patience
    if round(beam_size * patience) < 1:
        raise ValueError(f"patience {patience:g}: with beam size {beam_size} no hypothesis could finish "
                         "(beam size x patience must round to 1 or more)")
    return dict(beam_size=beam_size, patience=patience,
                length_penalty=optional_number("length penalty", length_penalty, minimum=0, maximum=1),
                best_of=whole_number("best of", defaults.BEST_OF if best_of is None else best_of))


def thresholds(compression_ratio_threshold=defaults.COMPRESSION_RATIO_THRESHOLD,
               logprob_threshold=defaults.LOGPROB_THRESHOLD, no_speech_threshold=defaults.NO_SPEECH_THRESHOLD) -> dict:
    """openai-whisper's fallback and no-speech thresholds (None: no such check), checked, as
    `DecodeOptions` fields."""
    return dict(
        compression_ratio_threshold=optional_number("compression ratio threshold", compression_ratio_threshold,
                                                    minimum=0, inclusive=False),
        # a mean log-probability is never above 0
        logprob_threshold=optional_number("logprob threshold", logprob_threshold, maximum=0),
        no_speech_threshold=optional_number("no speech threshold", no_speech_threshold, minimum=0, maximum=1))


def chunk_vad_options(parameters=None) -> dict:
    """VAD parameters of chunked long-form: faster-whisper's BatchedInferencePipeline's (speech
    regions end after 160 ms of silence and are split at 30 s, a chunk's length), `parameters` on
    top (a region longer than a chunk is cut into chunks: `whisperspec.whisper.chunked`)."""
    from dataclasses import asdict

    from whisperspec.vad import VadOptions

    given = asdict(parameters) if isinstance(parameters, VadOptions) else dict(parameters or {})
    return {"min_silence_duration_ms": defaults.CHUNK_VAD_MIN_SILENCE_DURATION_MS,
            "max_speech_duration_s": defaults.CHUNK_SECONDS, **given}


def vad_options(parameters=None):
    """faster-whisper's `vad_parameters`: a dict of `VadOptions` fields or a VadOptions (None: the
    defaults), checked."""
    from dataclasses import fields

    from whisperspec.vad import VadOptions

    if isinstance(parameters, VadOptions):
        parameters = {f.name: getattr(parameters, f.name) for f in fields(VadOptions)}
    parameters = dict(parameters or {})
    known = [f.name for f in fields(VadOptions)]
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ValueError(f"VAD parameter {unknown[0]!r}: one of {', '.join(known)}")
    checked = VadOptions(**{name: value for name, value in parameters.items() if value is not None})
    threshold = optional_number("VAD threshold", checked.threshold, minimum=0, maximum=1, inclusive=False)
    neg_threshold = optional_number("VAD neg_threshold", checked.neg_threshold, minimum=0, maximum=threshold,
                                    inclusive=False)
    longest = checked.max_speech_duration_s
    if not (str(longest).strip().lower() in ("inf", "infinity") or finite_number(longest) > 0):
        raise ValueError(f"VAD max_speech_duration_s {longest!r}: a number of seconds > 0, or inf")
    return VadOptions(
        threshold=threshold, neg_threshold=neg_threshold,
        min_speech_duration_ms=optional_number("VAD min_speech_duration_ms", checked.min_speech_duration_ms, minimum=0),
        max_speech_duration_s=float(longest),
        min_silence_duration_ms=optional_number("VAD min_silence_duration_ms", checked.min_silence_duration_ms,
                                                minimum=0),
        speech_pad_ms=optional_number("VAD speech_pad_ms", checked.speech_pad_ms, minimum=0))
