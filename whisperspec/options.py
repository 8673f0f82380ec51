"""Transcription options checked before any model loads: each bad value is one ValueError line that
names the option and says what it accepts (the drafter spec has its own grammar: `whisperspec.spec`)."""

from __future__ import annotations

import math

from whisperspec import defaults
from whisperspec.spec import is_model_name

TASKS = ("transcribe", "translate")
SAMPLING = ("coupled", "residual")  # at temperature > 0 (see `whisperspec.whisper.decode.DecodeOptions`)
ONLINE_LEARNING = ("off", "on")  # a trained draft keeps learning while it transcribes (`whisper.drafters.online`)


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
    if task == "translate" and str(model).endswith(".en"):
        raise ValueError(f"task 'translate': model {model!r} is English-only (it cannot translate); "
                         "use a multilingual model such as base")
    return task


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
